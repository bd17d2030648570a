"""The built-in PYTHON device, registered through the same hooks as every other backend."""

from __future__ import annotations

from fusegrad.device import DeviceSpec
from fusegrad.plugin import hookimpl
from fusegrad.plugin.hookspecs import BACKEND_API_VERSION

FUSEGRAD_BACKEND_API = BACKEND_API_VERSION


def _mine(device: str) -> bool:
    return device.partition(":")[0] == "PYTHON"


@hookimpl
def fusegrad_devices() -> list[DeviceSpec]:
    return [DeviceSpec("PYTHON", 0, lambda: None)]


@hookimpl
def fusegrad_allocator(device: str):
    from fusegrad.runtime.python import PythonAllocator

    return PythonAllocator() if _mine(device) else None


@hookimpl
def fusegrad_renderer(device: str):
    from fusegrad.runtime.python import PythonRenderer

    return PythonRenderer(device) if _mine(device) else None


@hookimpl
def fusegrad_compiler(device: str):
    from fusegrad.runtime.python import PythonCompiler

    return PythonCompiler() if _mine(device) else None


@hookimpl
def fusegrad_program(device: str):
    from fusegrad.runtime.python import PythonProgram

    return PythonProgram if _mine(device) else None
