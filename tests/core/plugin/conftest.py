"""Fake plugins for the plugin tests: a folder on ``sys.path`` holding modules and their
``*.dist-info`` (METADATA and an ``entry_points.txt`` in the group ``fusegrad``), so that
``importlib.metadata`` finds them exactly as it finds an installed distribution.
"""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from fusegrad.plugin import manager

#: A plugin offering the device FAKE, built from the PYTHON device's pieces. Its allocator counts
#: allocations, so a test can tell that FAKE, not PYTHON, held the memory; ``opened`` lists the
#: instances its ``open`` was asked for.
GOOD_PLUGIN = """
from fusegrad.device import DeviceSpec, Runtime
from fusegrad.plugin import BACKEND_API_VERSION, hookimpl
from fusegrad.runtime.python import PythonAllocator, PythonCompiler, PythonProgram, PythonRenderer

FUSEGRAD_BACKEND_API = BACKEND_API_VERSION
allocations = []
opened = []


class CountingAllocator(PythonAllocator):
    def alloc(self, nbytes):
        allocations.append(nbytes)
        return super().alloc(nbytes)


def open_runtime(name):
    opened.append(name)
    return Runtime(name, CountingAllocator(), PythonRenderer(name), PythonCompiler(), PythonProgram)


@hookimpl
def fusegrad_devices():
    return [DeviceSpec("FAKE", 50, lambda: None, count=COUNT, open=open_runtime)]
"""


def good_plugin(count: int = 1) -> str:
    """The source of ``GOOD_PLUGIN`` offering ``count`` FAKE devices."""
    return GOOD_PLUGIN.replace("COUNT", str(count))


def devices_plugin(specs: str, api: str = "BACKEND_API_VERSION") -> str:
    """A plugin announcing ``specs`` (Python source of a list of DeviceSpec) and nothing more."""
    return textwrap.dedent(f"""
        from fusegrad.device import DeviceSpec
        from fusegrad.plugin import BACKEND_API_VERSION, hookimpl

        FUSEGRAD_BACKEND_API = {api}


        @hookimpl
        def fusegrad_devices():
            return {specs}
        """)


class FakePlugins:
    """Installs fake plugin distributions into one folder on ``sys.path``."""

    def __init__(self, root: Path):
        self.root = root
        self.modules: list[str] = []

    def install(
        self,
        module: str,
        source: str,
        dist: str | None = None,
        version: str = "1.0",
        target: str | None = None,
    ) -> None:
        """Write ``module``.py and a distribution ``dist`` whose entry point ``module`` loads
        ``target`` (by default the module itself; ``module:object`` names an object in it)."""
        dist = dist or module.replace("_", "-")
        (self.root / f"{module}.py").write_text(textwrap.dedent(source))
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "entry_points.txt").write_text(f"[fusegrad]\n{module} = {target or module}\n")
        self.modules.append(module)
        importlib.invalidate_caches()
        manager.reset()  # discovery runs again on the next device lookup

    def subprocess_env(self) -> dict[str, str]:
        """The environment for a child Python that should find these plugins (DEV unset)."""
        env = {k: v for k, v in os.environ.items() if k != "DEV"}
        env["PYTHONPATH"] = os.pathsep.join([str(self.root), *sys.path])
        return env


@pytest.fixture(autouse=True)
def fresh_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every test starts and ends with plugins undiscovered, no device open and DEV unset."""
    monkeypatch.delenv("DEV", raising=False)
    manager.reset()
    yield
    manager.reset()


@pytest.fixture
def fake_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakePlugins]:
    """A place to install fake plugins; they are uninstalled and forgotten after the test."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    plugins = FakePlugins(root)
    yield plugins
    for module in plugins.modules:
        sys.modules.pop(module, None)
    manager.reset()
