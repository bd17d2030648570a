"""fusegrad's OpenCL backend: OpenCL C built by the device's driver and run through pyopencl.

Hook implementations only. pyopencl is imported when the device is probed or opened, and only if
it is installed: ``OPENCL:0``, ``OPENCL:1``... are the OpenCL devices of every platform, GPUs first.
"""

from __future__ import annotations

import functools
import importlib.util

from fusegrad.device import DeviceSpec, Runtime
from fusegrad.plugin import hookimpl

FUSEGRAD_BACKEND_API = 2
#: With a GPU (or accelerator): above CPU (10). With only CPU devices (PoCL), below the CPU
#: backend, which is faster on the same cores: OPENCL is then chosen by name, never by default.
#: Below CPU: knowing whether an OpenCL device is a GPU means importing pyopencl, which
#: discovery must not do; use DEV=OPENCL (CUDA and Metal cover GPUs by default).
PRIORITY = 5
NOT_INSTALLED = "pyopencl not installed (pip install fusegrad-opencl)"


@functools.cache
def survey() -> tuple[int, bool, str | None]:
    """(device count, whether one is not a CPU, None or why no device can be used)."""
    if importlib.util.find_spec("pyopencl") is None:
        return 1, False, NOT_INSTALLED
    import pyopencl as cl

    from fusegrad_opencl.device import find_devices

    try:
        devices = find_devices()
    except cl.Error as e:
        why = str(e).strip() or type(e).__name__
        return (
            1,
            False,
            f"no OpenCL platform ({why}); install an OpenCL driver, e.g. "
            "pip install pocl-binary-distribution",
        )
    if not devices:
        return 1, False, "no OpenCL device: the OpenCL platforms found have no device"
    return len(devices), any(d.type & ~cl.device_type.CPU for d in devices), None


def open_runtime(name: str) -> Runtime:
    """Device ``name``: ``cl.Buffer`` memory in its context, OpenCL C with float16 and float64
    as its extensions allow, built by its driver, and kernels enqueued on its queue."""
    from fusegrad_opencl.compiler import CLCompiler
    from fusegrad_opencl.device import CLAllocator, CLProgram, open_device
    from fusegrad_opencl.renderer import OpenCLRenderer

    cl_device = open_device(name)
    renderer = OpenCLRenderer(
        name,
        cl_device.extensions,
        cl_device.max_group_size,
        cl_device.local_memory_bytes,
        threads_in_lanes=not cl_device.is_cpu,
    )
    program = functools.partial(CLProgram, cl_device)  # the program class, bound to the device
    allocator, compiler = CLAllocator(cl_device), CLCompiler(cl_device)
    return Runtime(name, allocator, renderer, compiler, program)  # type: ignore[arg-type]


@hookimpl
def fusegrad_devices() -> list[DeviceSpec]:
    """One spec for every OpenCL device found (``count``), or one saying why there is none."""
    # nothing is imported here: pyopencl is asked (once) only when the device is probed or used
    return [
        DeviceSpec("OPENCL", PRIORITY, lambda: survey()[2], lambda: survey()[0], open=open_runtime)
    ]
