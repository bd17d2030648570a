"""fusegrad's Metal backend: Metal Shading Language kernels on Apple GPUs, through pyobjc.

Hook implementations only. The probe checks the platform and looks for pyobjc's Metal module
without importing it; ``Metal`` is imported when the METAL device is opened.
"""

from __future__ import annotations

import functools
import importlib.util
import sys

from fusegrad.device import DeviceSpec, Runtime
from fusegrad.plugin import hookimpl

FUSEGRAD_BACKEND_API = 2
#: Above CPU (10): on a Mac the GPU is the fastest device.
PRIORITY = 30


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


def open_runtime(name: str) -> Runtime:
    """The GPU: shared-storage ``MTLBuffer`` memory, Metal Shading Language passed through to
    Metal (which compiles it when the program is loaded), and compute pipelines dispatched in
    threadgroups of 256 threads."""
    from fusegrad_metal.compiler import MetalCompiler
    from fusegrad_metal.device import MetalAllocator, MetalProgram
    from fusegrad_metal.renderer import MetalRenderer

    return Runtime(name, MetalAllocator(), MetalRenderer(name), MetalCompiler(), MetalProgram)


@hookimpl
def fusegrad_devices() -> list[DeviceSpec]:
    """The system's default GPU."""
    return [DeviceSpec("METAL", PRIORITY, probe, open=open_runtime)]
