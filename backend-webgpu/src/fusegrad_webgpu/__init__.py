"""fusegrad's WebGPU backend: WGSL kernels run through wgpu-py (Vulkan, Metal, D3D12 or OpenGL).

Hook implementations only. Nothing heavy is imported here: wgpu is imported inside the hooks,
when the WEBGPU device is probed or opened. ``fusegrad_webgpu.export.export_webgpu`` writes a
model out as a web page that runs it on ``navigator.gpu``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusegrad.device import DeviceSpec
from fusegrad.plugin import hookimpl

if TYPE_CHECKING:
    from fusegrad.device import Allocator, Compiler
    from fusegrad.renderer import Renderer

FUSEGRAD_BACKEND_API = 1
#: Below CPU (10): here WebGPU mostly reaches a software adapter (llvmpipe); ask for it by name.
PRIORITY = 5


def is_webgpu(device: str) -> bool:
    """Whether ``device`` (``"WEBGPU"``, ``"webgpu:0"``...) names this backend's device."""
    return device.partition(":")[0].upper() == "WEBGPU"


def probe() -> str | None:
    """None when wgpu is installed and finds an adapter, else why not and how to fix it."""
    import importlib.util

    if importlib.util.find_spec("wgpu") is None:
        return "wgpu is not installed; install it with `pip install wgpu`"
    from fusegrad_webgpu.device import adapter_problem

    return adapter_problem()


@hookimpl
def fusegrad_devices() -> list[DeviceSpec]:
    """One WEBGPU device: the adapter wgpu prefers (``FUSEGRAD_WEBGPU_BACKEND`` picks another)."""
    return [DeviceSpec("WEBGPU", PRIORITY, probe)]


@hookimpl
def fusegrad_allocator(device: str) -> Allocator | None:
    """GPU storage buffers, sized in whole 32-bit words."""
    if not is_webgpu(device):
        return None
    from fusegrad_webgpu.device import WebGPUAllocator

    return WebGPUAllocator()


@hookimpl
def fusegrad_compiler(device: str) -> Compiler | None:
    """Validates WGSL on the device (the source is the binary)."""
    if not is_webgpu(device):
        return None
    from fusegrad_webgpu.compiler import WGSLCompiler

    return WGSLCompiler()


@hookimpl
def fusegrad_program(device: str) -> type | None:
    """Compute pipelines, cached per kernel, dispatched over a grid folded to fit the adapter."""
    if not is_webgpu(device):
        return None
    from fusegrad_webgpu.device import WebGPUProgram

    return WebGPUProgram


@hookimpl
def fusegrad_renderer(device: str) -> Renderer | None:
    """WGSL, with the adapter's features (shader-f16) and limits."""
    if not is_webgpu(device):
        return None
    from fusegrad_webgpu.device import context
    from fusegrad_webgpu.renderer import WGSLRenderer

    ctx = context()
    return WGSLRenderer(device, ctx.features, ctx.limits, ctx.adapter_name)
