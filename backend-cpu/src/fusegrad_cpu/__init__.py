"""fusegrad's CPU backend: C source built by the system's C compiler and run through ctypes.

Hook implementations only. Nothing heavy is imported here: the compiler, the allocator, the
program class and the renderer are imported by ``open_runtime``, when the CPU device is opened.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from fusegrad.device import DeviceSpec, Runtime
from fusegrad.errors import InvalidArgument
from fusegrad.helpers import usable_cores
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


def device_count() -> int:
    """How many CPU devices there are: ``$CPU_DEVICES`` (default 1). Several devices ("CPU",
    "CPU:1", ...) share the processor, each running its kernels on its own share of the cores,
    so that sharding across devices (``Tensor.shard``) is real and testable on one machine."""
    return _positive_int("CPU_DEVICES", 1)


def device_threads() -> int | None:
    """The OpenMP threads of each CPU device's kernels: ``$CPU_THREADS``, else the usable cores
    shared out between the devices; None (OpenMP's own default, every core) with one device."""
    devices = device_count()
    if "CPU_THREADS" not in os.environ and devices == 1:
        return None
    return _positive_int("CPU_THREADS", max(1, usable_cores() // devices))


def _positive_int(variable: str, default: int) -> int:
    """The positive integer in environment ``variable``, ``default`` when unset."""
    text = os.environ.get(variable, "")
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise InvalidArgument(f"{variable}={text!r}: expected a positive integer such as 2")
    return int(text)


def open_runtime(name: str) -> Runtime:
    """Host memory in 64-byte aligned numpy arrays, C99 with OpenMP pragmas, the system C compiler
    (``$CC``, else clang, else gcc) and shared objects loaded from memory, called through ctypes."""
    from fusegrad_cpu.compiler import CCompiler
    from fusegrad_cpu.device import CPUAllocator, CPUProgram
    from fusegrad_cpu.renderer import CPURenderer

    renderer = CPURenderer(name, threads=device_threads())
    return Runtime(name, CPUAllocator(), renderer, CCompiler(), CPUProgram)


@hookimpl
def fusegrad_devices() -> list[DeviceSpec]:
    """The CPU devices (``$CPU_DEVICES`` of them); usable wherever clang or gcc is installed."""
    return [DeviceSpec("CPU", PRIORITY, probe, count=device_count, open=open_runtime)]


@hookimpl
def fusegrad_rewrite_rules(stage: str, device: str) -> PatternMatcher | None:
    """The program stage's index sums, shaped for gcc's vectoriser (``renderer.PROGRAM_RULES``)."""
    if stage != "program" or device.partition(":")[0] != "CPU":
        return None
    from fusegrad_cpu.renderer import PROGRAM_RULES

    return PROGRAM_RULES
