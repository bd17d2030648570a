"""Tests of ``fusegrad_cpu/__init__.py``: the entry point, the hooks, the probe."""

from __future__ import annotations

import subprocess
import sys
import warnings
from importlib import metadata

import numpy as np

import fusegrad_cpu
from fusegrad.device import PARTS, Device, Runtime
from fusegrad.plugin import hookspecs, manager
from fusegrad_cpu.compiler import CCompiler
from fusegrad_cpu.device import CPUAllocator, CPUProgram


def test_entry_point_and_api_version():
    (entry,) = [e for e in metadata.entry_points(group="fusegrad") if e.name == "cpu"]
    assert entry.value == "fusegrad_cpu"
    assert fusegrad_cpu.FUSEGRAD_BACKEND_API == hookspecs.BACKEND_API_VERSION
    keywords = metadata.metadata("fusegrad-cpu")["Keywords"]
    assert f"fusegrad-backend-api-{hookspecs.BACKEND_API_VERSION}" in keywords


def test_importing_the_plugin_loads_nothing_heavy():
    code = "import sys, fusegrad_cpu; print(sorted(m for m in sys.modules if 'fusegrad_cpu.' in m))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_open_builds_the_four_parts():
    runtime = fusegrad_cpu.open_runtime("CPU")
    assert isinstance(runtime, Runtime) and runtime.name == "CPU"
    assert isinstance(runtime.allocator, CPUAllocator) and isinstance(runtime.compiler, CCompiler)
    assert runtime.program is CPUProgram and runtime.renderer.device == "CPU"


def test_the_plugin_answers_no_part_hook():
    """Since backend API version 2 a backend builds its parts in DeviceSpec.open; the part hooks
    are left to plugins that override one part of it."""
    (spec,) = fusegrad_cpu.fusegrad_devices()
    assert spec.open is fusegrad_cpu.open_runtime
    assert not any(hasattr(fusegrad_cpu, f"fusegrad_{part}") for part in PARTS)


def test_probe_says_why_and_how(monkeypatch, tmp_path):
    assert fusegrad_cpu.probe() is None
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "apt-get install clang" in fusegrad_cpu.probe()


def test_device_registry_opens_cpu_and_runs_a_kernel():
    manager.reset()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # another installed plugin may be broken
            spec = Device.specs()["CPU"]
            runtime = Device["cpu"]
        assert (spec.priority, spec.probe()) == (fusegrad_cpu.PRIORITY, None)
        assert runtime.suppliers == dict.fromkeys(PARTS, "cpu")
        source = "void twice(int* data0, const int* data1) { data0[0] = 2 * data1[0]; }"
        program = runtime.program("twice", runtime.compiler.compile(source))
        out, x = runtime.allocator.alloc(4), runtime.allocator.alloc(4)
        runtime.allocator.copyin(x, memoryview(np.array([21], np.int32)).cast("B"))
        program(out, x)
        assert out.view(np.int32)[0] == 42
    finally:
        manager.reset()
