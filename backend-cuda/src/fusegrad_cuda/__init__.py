"""fusegrad's CUDA backend: CUDA C++ compiled by NVRTC or nvcc, run on NVIDIA GPUs through pycuda.

Hook implementations only. The probe looks for the driver library and for pycuda without
importing either; pycuda is imported when a CUDA device is opened (or counted, once both exist).
"""

from __future__ import annotations

import ctypes.util
import functools
import importlib.util
from typing import TYPE_CHECKING

from fusegrad.device import DeviceSpec
from fusegrad.plugin import hookimpl

if TYPE_CHECKING:
    from fusegrad.device import Allocator, Compiler
    from fusegrad.renderer import Renderer

FUSEGRAD_BACKEND_API = 1
#: Above CPU (10) and OpenCL (20): a CUDA GPU is the fastest device a machine is likely to have.
PRIORITY = 30


def is_cuda(device: str) -> bool:
    """Whether ``device`` (``"CUDA"``, ``"cuda:1"``...) names one of this backend's devices."""
    return device.partition(":")[0].upper() == "CUDA"


def missing() -> list[str]:
    """What this machine lacks to run CUDA kernels, cheaply: no library is loaded or imported."""
    lacks = []
    if ctypes.util.find_library("cuda") is None:
        lacks.append("no CUDA driver (libcuda.so not found: install the NVIDIA driver)")
    if importlib.util.find_spec("pycuda") is None:
        lacks.append("pycuda not installed (pip install fusegrad-cuda[runtime])")
    return lacks


@functools.cache
def survey() -> tuple[int, str | None]:
    """(GPU count, None or why no GPU can be used)."""
    if lacks := missing():
        return 1, "; ".join(lacks)
    import pycuda.driver as cuda

    try:
        cuda.init()
        count = cuda.Device.count()
    except cuda.Error as e:
        return 1, f"the CUDA driver failed to start: {e}"
    return (count, None) if count else (1, "no CUDA GPU: the driver found none")


@hookimpl
def fusegrad_devices() -> list[DeviceSpec]:
    """One spec covering every GPU (``count``), or one saying what is missing."""
    count, why = survey()
    return [DeviceSpec("CUDA", PRIORITY, lambda: why, count)]


@hookimpl
def fusegrad_allocator(device: str) -> Allocator | None:
    """Device memory from ``cuda.mem_alloc``."""
    if not is_cuda(device):
        return None
    from fusegrad_cuda.device import CUDAAllocator, open_device

    return CUDAAllocator(open_device(device))


@hookimpl
def fusegrad_compiler(device: str) -> Compiler | None:
    """NVRTC (else nvcc) for the GPU's compute capability."""
    if not is_cuda(device):
        return None
    from fusegrad_cuda.compiler import find_cuda_compiler
    from fusegrad_cuda.device import open_device

    return find_cuda_compiler(open_device(device).arch)


@hookimpl
def fusegrad_program(device: str) -> type | None:
    """Kernels loaded from cubins, launched in blocks of 256 threads."""
    if not is_cuda(device):
        return None
    from fusegrad_cuda.device import CUDAProgram, open_device

    return functools.partial(CUDAProgram, open_device(device))  # type: ignore[return-value]


@hookimpl
def fusegrad_renderer(device: str) -> Renderer | None:
    """CUDA C++ for the GPU's architecture."""
    if not is_cuda(device):
        return None
    from fusegrad_cuda.device import open_device
    from fusegrad_cuda.renderer import CUDARenderer

    return CUDARenderer(device, open_device(device).arch)
