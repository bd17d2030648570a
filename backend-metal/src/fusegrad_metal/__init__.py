"""fusegrad's Metal backend: Metal Shading Language kernels on Apple GPUs, through pyobjc.

Hook implementations only. The probe checks the platform and looks for pyobjc's Metal module
without importing it; ``Metal`` is imported when the METAL device is opened.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from typing import TYPE_CHECKING

from fusegrad.device import DeviceSpec
from fusegrad.plugin import hookimpl

if TYPE_CHECKING:
    from fusegrad.device import Allocator, Compiler
    from fusegrad.renderer import Renderer

FUSEGRAD_BACKEND_API = 1
#: Above CPU (10): on a Mac the GPU is the fastest device.
PRIORITY = 30


def is_metal(device: str) -> bool:
    """Whether ``device`` (``"METAL"``, ``"metal"``) names this backend's device."""
    return device.partition(":")[0].upper() == "METAL"


@functools.cache
def probe() -> str | None:
    """None on a Mac with pyobjc's Metal and a GPU, else why not."""
    if sys.platform != "darwin":
        return f"Metal needs macOS (this is {sys.platform})"
    if importlib.util.find_spec("Metal") is None:
        return "pyobjc-framework-Metal not installed (pip install fusegrad-metal)"
    import Metal

    if Metal.MTLCreateSystemDefaultDevice() is None:
        return "no Metal GPU: MTLCreateSystemDefaultDevice() found none"
    return None


@hookimpl
def fusegrad_devices() -> list[DeviceSpec]:
    """The system's default GPU."""
    return [DeviceSpec("METAL", PRIORITY, probe)]


@hookimpl
def fusegrad_allocator(device: str) -> Allocator | None:
    """Shared-storage ``MTLBuffer`` memory."""
    if not is_metal(device):
        return None
    from fusegrad_metal.device import MetalAllocator

    return MetalAllocator()


@hookimpl
def fusegrad_compiler(device: str) -> Compiler | None:
    """Source passed through: Metal compiles it when the program is loaded."""
    if not is_metal(device):
        return None
    from fusegrad_metal.compiler import MetalCompiler

    return MetalCompiler()


@hookimpl
def fusegrad_program(device: str) -> type | None:
    """Compute pipelines dispatched in threadgroups of 256 threads."""
    if not is_metal(device):
        return None
    from fusegrad_metal.device import MetalProgram

    return MetalProgram


@hookimpl
def fusegrad_renderer(device: str) -> Renderer | None:
    """Metal Shading Language."""
    if not is_metal(device):
        return None
    from fusegrad_metal.renderer import MetalRenderer

    return MetalRenderer(device)
