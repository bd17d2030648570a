"""The compiler-override plugin (plugins/cpu-compiler-override) replaces only the CPU backend's
compiler when it is installed, and changes nothing when it is not."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from fusegrad import Device, Tensor
from fusegrad.__main__ import format_survey, survey
from fusegrad.device import PARTS
from fusegrad.plugin import manager
from fusegrad_cpu.compiler import CCompiler
from fusegrad_cpu.renderer import CPURenderer

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "plugins" / "cpu-compiler-override" / "src"


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Plugins undiscovered, an empty kernel cache (so compilers are really asked), DEV unset."""
    monkeypatch.delenv("DEV", raising=False)
    monkeypatch.setenv("FUSEGRAD_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("FUSEGRAD_DISABLE_CACHE", raising=False)
    manager.reset()
    yield
    manager.reset()


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The plugin installed as an editable install does it: its source folder on ``sys.path``
    and a ``*.dist-info`` holding its entry point."""
    site = tmp_path / "site"
    info = site / "fusegrad_cpu_compiler_override-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fusegrad-cpu-compiler-override\nVersion: 0.1.0\n"
    )
    (info / "entry_points.txt").write_text(
        "[fusegrad]\ncpu_compiler_override = fusegrad_cpu_compiler_override\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(SOURCE))
    importlib.invalidate_caches()
    manager.reset()
    yield
    for name in [m for m in sys.modules if m.startswith("fusegrad_cpu_compiler_override")]:
        del sys.modules[name]


def add_on_cpu() -> np.ndarray:
    x = np.arange(12, dtype=np.float32)
    return (Tensor(x, device="CPU") * 2 + 7).numpy()


def test_override_builds_the_cpu_kernels(installed):
    from fusegrad_cpu_compiler_override.compiler import OverrideCompiler

    OverrideCompiler.built.clear()
    runtime = Device["CPU"]
    assert type(runtime.compiler) is OverrideCompiler
    assert "-march=native" not in runtime.compiler.flags and "-O2" in runtime.compiler.flags
    assert runtime.compiler.identity.startswith("fusegrad-cpu-compiler-override")
    assert runtime.compiler.identity != CCompiler().identity
    assert type(runtime.renderer) is CPURenderer  # only the compiler was replaced
    assert runtime.suppliers == dict.fromkeys(PARTS, "cpu") | {"compiler": "cpu_compiler_override"}
    np.testing.assert_array_equal(add_on_cpu(), np.arange(12, dtype=np.float32) * 2 + 7)
    assert len(OverrideCompiler.built) == 1 and "void E_12" in OverrideCompiler.built[0]


def test_fusegrad_devices_says_the_cpu_compiler_is_replaced(installed):
    text = format_survey(survey())
    assert "      (offers no devices; OVERRIDES the compiler of CPU)" in text
    assert "compiler from cpu_compiler_override (OVERRIDE)" in text
    assert (
        "  WARNING: plugin 'cpu_compiler_override' replaces the compiler of CPU (offered by 'cpu')"
    ) in text


def test_override_leaves_other_devices_alone(installed):
    from fusegrad.runtime.python import PythonCompiler

    assert type(Device["PYTHON"].compiler) is PythonCompiler


def test_without_the_plugin_the_backend_compiler_is_used():
    runtime = Device["CPU"]
    assert type(runtime.compiler) is CCompiler
    assert "-march=native" in runtime.compiler.flags
    assert all(i.name != "cpu_compiler_override" for i in manager.plugins().infos)
    np.testing.assert_array_equal(add_on_cpu(), np.arange(12, dtype=np.float32) * 2 + 7)
