"""The built-in PYTHON device, registered through the same hook as every other backend."""

from __future__ import annotations

from fusegrad.device import DeviceSpec, Runtime
from fusegrad.plugin import hookimpl
from fusegrad.plugin.hookspecs import BACKEND_API_VERSION
from fusegrad.runtime.python import PythonAllocator, PythonCompiler, PythonProgram, PythonRenderer

FUSEGRAD_BACKEND_API = BACKEND_API_VERSION


def open_runtime(name: str) -> Runtime:
    """The interpreter's four parts; nothing to import, so nothing is deferred."""
    return Runtime(name, PythonAllocator(), PythonRenderer(name), PythonCompiler(), PythonProgram)


@hookimpl
def fusegrad_devices() -> list[DeviceSpec]:
    """The PYTHON device, always usable and never the default over a real one."""
    return [DeviceSpec("PYTHON", 0, lambda: None, open=open_runtime)]
