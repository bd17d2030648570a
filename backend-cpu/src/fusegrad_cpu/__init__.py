"""fusegrad's CPU backend: C source built by the system's C compiler and run through ctypes.

Hook implementations only. Nothing heavy is imported here: the compiler, the allocator, the
program class and the renderer are imported by ``open_runtime``, when the CPU device is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusegrad.device import DeviceSpec, Runtime
from fusegrad.plugin import hookimpl

if TYPE_CHECKING:
    from fusegrad.uop.pattern import PatternMatcher

FUSEGRAD_BACKEND_API = 2
#: Above PYTHON (0), below the GPUs (20 and more).
PRIORITY = 10


def probe() -> str | None:
    """None when a C compiler can be found, else why not and how to get one."""
    from fusegrad.errors import DeviceUnavailable
    from fusegrad_cpu.compiler import find_c_compiler

    try:
        find_c_compiler()
    except DeviceUnavailable as e:
        return str(e)
    return None


def open_runtime(name: str) -> Runtime:
    """Host memory in 64-byte aligned numpy arrays, C99 with OpenMP pragmas, the system C compiler
    (``$CC``, else clang, else gcc) and shared objects loaded from memory, called through ctypes."""
    from fusegrad_cpu.compiler import CCompiler
    from fusegrad_cpu.device import CPUAllocator, CPUProgram
    from fusegrad_cpu.renderer import CPURenderer

    return Runtime(name, CPUAllocator(), CPURenderer(name), CCompiler(), CPUProgram)


@hookimpl
def fusegrad_devices() -> list[DeviceSpec]:
    """The one CPU device; usable wherever clang or gcc is installed."""
    return [DeviceSpec("CPU", PRIORITY, probe, open=open_runtime)]


@hookimpl
def fusegrad_rewrite_rules(stage: str, device: str) -> PatternMatcher | None:
    """The program stage's index sums, shaped for gcc's vectoriser (``renderer.PROGRAM_RULES``)."""
    if stage != "program" or device.partition(":")[0] != "CPU":
        return None
    from fusegrad_cpu.renderer import PROGRAM_RULES

    return PROGRAM_RULES
