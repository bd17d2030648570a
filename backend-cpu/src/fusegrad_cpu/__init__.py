"""fusegrad's CPU backend: C source built by the system's C compiler and run through ctypes.

Hook implementations only. Nothing heavy is imported here: the compiler, the allocator, the
program class and the renderer are imported inside the hooks, when the CPU device is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusegrad.device import DeviceSpec
from fusegrad.plugin import hookimpl

if TYPE_CHECKING:
    from fusegrad.device import Allocator, Compiler
    from fusegrad.renderer import Renderer

FUSEGRAD_BACKEND_API = 1
#: Above PYTHON (0), below the GPUs (20 and more).
PRIORITY = 10


def is_cpu(device: str) -> bool:
    """Whether ``device`` (``"CPU"``, ``"cpu:0"``...) names this backend's device."""
    return device.partition(":")[0].upper() == "CPU"


def probe() -> str | None:
    """None when a C compiler can be found, else why not and how to get one."""
    from fusegrad.errors import DeviceUnavailable
    from fusegrad_cpu.compiler import find_c_compiler

    try:
        find_c_compiler()
    except DeviceUnavailable as e:
        return str(e)
    return None


@hookimpl
def fusegrad_devices() -> list[DeviceSpec]:
    """The one CPU device; usable wherever clang or gcc is installed."""
    return [DeviceSpec("CPU", PRIORITY, probe)]


@hookimpl
def fusegrad_allocator(device: str) -> Allocator | None:
    """Host memory in 64-byte aligned numpy arrays."""
    if not is_cpu(device):
        return None
    from fusegrad_cpu.device import CPUAllocator

    return CPUAllocator()


@hookimpl
def fusegrad_compiler(device: str) -> Compiler | None:
    """The system C compiler (``$CC``, else clang, else gcc), with OpenMP where it has it."""
    if not is_cpu(device):
        return None
    from fusegrad_cpu.compiler import CCompiler

    return CCompiler()


@hookimpl
def fusegrad_program(device: str) -> type | None:
    """Shared objects loaded from memory, called through ctypes."""
    if not is_cpu(device):
        return None
    from fusegrad_cpu.device import CPUProgram

    return CPUProgram


@hookimpl
def fusegrad_renderer(device: str) -> Renderer | None:
    """C99 with OpenMP pragmas."""
    if not is_cpu(device):
        return None
    from fusegrad_cpu.renderer import CPURenderer

    return CPURenderer(device)
