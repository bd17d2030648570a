"""fusegrad's WebGPU backend: WGSL kernels run through wgpu-py (Vulkan, Metal, D3D12 or OpenGL).

Hook implementations only. Nothing heavy is imported here: wgpu is imported when the
WEBGPU device is probed or opened. ``fusegrad_webgpu.export.export_webgpu`` writes a
model out as a web page that runs it on ``navigator.gpu``.
"""

from __future__ import annotations

from fusegrad.device import DeviceSpec, Runtime
from fusegrad.plugin import hookimpl

FUSEGRAD_BACKEND_API = 2
#: Below CPU (10): here WebGPU mostly reaches a software adapter (llvmpipe); ask for it by name.
PRIORITY = 5


def probe() -> str | None:
    """None when wgpu is installed and finds an adapter, else why not and how to fix it."""
    import importlib.util

    if importlib.util.find_spec("wgpu") is None:
        return "wgpu is not installed; install it with `pip install wgpu`"
    from fusegrad_webgpu.device import adapter_problem

    return adapter_problem()


def open_runtime(name: str) -> Runtime:
    """The adapter: storage buffers sized in whole 32-bit words, WGSL with its features
    (shader-f16) and limits, validated on the device (the source is the binary), and compute
    pipelines, cached per kernel, dispatched over a grid folded to fit the adapter."""
    from fusegrad_webgpu.compiler import WGSLCompiler
    from fusegrad_webgpu.device import WebGPUAllocator, WebGPUProgram, context
    from fusegrad_webgpu.renderer import WGSLRenderer

    ctx = context()
    renderer = WGSLRenderer(name, ctx.features, ctx.limits, ctx.adapter_name, ctx.on_cpu)
    return Runtime(name, WebGPUAllocator(), renderer, WGSLCompiler(), WebGPUProgram)


def describe() -> str:
    """The adapter wgpu found: its name, driver and graphics API, for ``fusegrad devices``."""
    from fusegrad_webgpu.device import find_adapter

    info = find_adapter().info
    kind = f", {str(info['adapter_type']).lower()} adapter" if info.get("adapter_type") else ""
    driver = f"{info['description']}; " if info.get("description") else ""
    return f"{info.get('device', '?')} ({driver}{info.get('backend_type', '?')}{kind})"


@hookimpl
def fusegrad_devices() -> list[DeviceSpec]:
    """One WEBGPU device: the adapter wgpu prefers (``FUSEGRAD_WEBGPU_BACKEND`` picks another)."""
    return [DeviceSpec("WEBGPU", PRIORITY, probe, open=open_runtime, describe=describe)]
