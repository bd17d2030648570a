"""fusegrad's CUDA backend: CUDA C++ compiled by NVRTC or nvcc, run on NVIDIA GPUs through the
CUDA driver API (``libcuda``, called with ctypes: no Python package needed).

Hook implementations only. The probe looks for the driver library without loading it; the
driver is loaded when the GPUs are counted or a CUDA device is opened.
"""

from __future__ import annotations

import functools

from fusegrad.device import DeviceSpec, Runtime
from fusegrad.plugin import hookimpl
from fusegrad_cuda.driver import CUDAError, device_count, find_driver

FUSEGRAD_BACKEND_API = 2
#: Above CPU (10) and OpenCL (20): a CUDA GPU is the fastest device a machine is likely to have.
PRIORITY = 30


def missing() -> list[str]:
    """What this machine lacks to run CUDA kernels, cheaply: no library is loaded."""
    if find_driver() is None:
        return ["no CUDA driver (libcuda.so not found: install the NVIDIA driver)"]
    return []


@functools.cache
def survey() -> tuple[int, str | None]:
    """(GPU count, None or why no GPU can be used)."""
    if lacks := missing():
        return 1, "; ".join(lacks)
    try:
        count = device_count()
    except (OSError, CUDAError) as e:
        return 1, f"the CUDA driver failed to start: {e}"
    return (count, None) if count else (1, "no CUDA GPU: the driver found none")


def open_runtime(name: str) -> Runtime:
    """GPU ``name``: memory from ``cuMemAlloc``, CUDA C++ for its architecture built by NVRTC
    (else nvcc), and kernels loaded from cubins, launched in blocks of 256 threads."""
    from fusegrad_cuda.compiler import find_cuda_compiler
    from fusegrad_cuda.device import CUDAAllocator, CUDAProgram, open_device
    from fusegrad_cuda.renderer import CUDARenderer

    gpu = open_device(name)
    program = functools.partial(CUDAProgram, gpu)  # the program class, bound to this GPU
    renderer, compiler = CUDARenderer(name, gpu.arch), find_cuda_compiler(gpu.arch)
    return Runtime(name, CUDAAllocator(gpu), renderer, compiler, program)  # type: ignore[arg-type]


@hookimpl
def fusegrad_devices() -> list[DeviceSpec]:
    """One spec covering every GPU (``count``), or one saying what is missing."""
    count, why = survey()
    return [DeviceSpec("CUDA", PRIORITY, lambda: why, count, open=open_runtime)]
