"""OpenCL devices through pyopencl: finding them, memory as ``cl.Buffer``, kernels as ``cl.Kernel``.

Everything here imports pyopencl; the plugin module imports this only when an OPENCL device is
opened (or counted, see ``fusegrad_opencl.fusegrad_devices``).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyopencl as cl

from fusegrad.device import Allocator
from fusegrad.errors import DeviceNotFound


@functools.cache
def find_devices() -> tuple[Any, ...]:
    """Every OpenCL device of every platform, GPUs and accelerators first: ``OPENCL:i`` is the i-th.

    Raises ``cl.Error`` (no ICD loader, no platform); the probe turns that into a reason.
    """
    found = [d for platform in cl.get_platforms() for d in platform.get_devices()]
    return tuple(sorted(found, key=lambda d: not (d.type & ~cl.device_type.CPU)))


def device_index(name: str) -> int:
    """``"OPENCL"`` -> 0, ``"OPENCL:2"`` -> 2."""
    return int(name.partition(":")[2] or 0)


@dataclass(frozen=True)
class CLDevice:
    """One opened OpenCL device: its context and an in-order queue that can time kernels."""

    name: str
    device: Any
    context: Any
    queue: Any

    @property
    def extensions(self) -> list[str]:
        return self.device.extensions.split()

    @property
    def max_group_size(self) -> int:
        """The most work-items one work-group may have."""
        return int(self.device.max_work_group_size)

    @property
    def local_memory_bytes(self) -> int:
        """Bytes of local memory one work-group may use."""
        return int(self.device.local_mem_size)

    @property
    def is_cpu(self) -> bool:
        """Whether the device is the host's processor (PoCL's): its work-items are trips of a
        loop on each core rather than SIMD lanes."""
        return bool(self.device.type & cl.device_type.CPU)

    def describe(self) -> str:
        """``OPENCL:0 (pthread-AMD EPYC, Portable Computing Language OpenCL 3.0 PoCL ...)``."""
        return f"{self.name} ({self.device.name.strip()}, {self.device.platform.version.strip()})"


def open_device(name: str) -> CLDevice:
    """The context and queue of device ``name`` (``"OPENCL:1"``), made once per process."""
    return _open(device_index(name))


@functools.cache
def _open(index: int) -> CLDevice:
    devices = find_devices()
    if index >= len(devices):
        raise DeviceNotFound(f"no OpenCL device OPENCL:{index}: {len(devices)} found here")
    device, name = devices[index], f"OPENCL:{index}" if index else "OPENCL"
    context = cl.Context([device])
    profiling = cl.command_queue_properties.PROFILING_ENABLE
    try:
        queue = cl.CommandQueue(context, device, properties=profiling)
    except cl.Error:  # a device that cannot time kernels is still a device
        queue = cl.CommandQueue(context, device)
    return CLDevice(name, device, context, queue)


class CLAllocator(Allocator):
    """Device memory as ``cl.Buffer``; copies block until done, so host memory may be reused."""

    def __init__(self, device: CLDevice):
        self.device = device

    def alloc(self, nbytes: int) -> Any:
        return cl.Buffer(self.device.context, cl.mem_flags.READ_WRITE, nbytes)

    def free(self, handle: Any, nbytes: int) -> None:
        handle.release()

    def copyin(self, handle: Any, src: memoryview) -> None:
        """Copy host bytes into ``handle``, after every kernel queued before."""
        if src.nbytes != handle.size:
            raise ValueError(f"copyin of {src.nbytes} bytes into a {handle.size}-byte allocation")
        cl.enqueue_copy(self.device.queue, handle, src, is_blocking=True)

    def copyout(self, dest: memoryview, handle: Any) -> None:
        """Copy ``handle``'s bytes to the host, once every kernel queued before has finished."""
        if dest.nbytes != handle.size:
            raise ValueError(f"copyout of a {handle.size}-byte allocation into {dest.nbytes} bytes")
        cl.enqueue_copy(self.device.queue, dest, handle, is_blocking=True)


class CLProgram:
    """A kernel built from its device binary; calls enqueue it over the output's grid.

    ``CLProgram(device, name, binary)``: the plugin hands core ``functools.partial(CLProgram,
    device)``, so core calls it with ``(name, binary)`` as it does every program class.
    """

    def __init__(self, device: CLDevice, name: str, binary: bytes):
        self.device, self.name = device, name
        program = cl.Program(device.context, [device.device], [binary]).build()
        self.kernel = cl.Kernel(program, name)
        #: buffers past these are ones the kernel never reads (see ``fill_param_gaps``)
        self.arity = self.kernel.get_info(cl.kernel_info.NUM_ARGS)
        self.profiled = bool(device.queue.properties & cl.command_queue_properties.PROFILING_ENABLE)

    def __call__(
        self,
        *buffers: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        """Enqueue on ``buffers`` over ``global_size`` (one work-item when None); seconds if
        ``wait``.

        With ``local_size`` the work-items come in work-groups of that many, and the global size
        is rounded up to whole groups (the kernel guards its index); without, the driver chooses.
        """
        used = buffers[: self.arity - len(vals)]
        self.kernel.set_args(*used, *(np.int32(v) for v in vals))
        size = global_size or (1,)
        if local_size is not None:
            size = tuple(-(-n // m) * m for n, m in zip(size, local_size))
        start = time.perf_counter()
        event = cl.enqueue_nd_range_kernel(self.device.queue, self.kernel, size, local_size)
        if not wait:
            return None
        event.wait()
        if self.profiled:
            return (event.profile.end - event.profile.start) * 1e-9
        return time.perf_counter() - start

    def __repr__(self) -> str:
        return f"<CLProgram {self.name} on {self.device.name}>"
