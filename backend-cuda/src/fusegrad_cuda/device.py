"""NVIDIA GPUs through pycuda: a context per device, memory, cubin modules, launches, events.

Everything here imports pycuda; the plugin module imports this only when a CUDA device is
opened, after its probe has found both the driver and pycuda.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pycuda.driver as cuda

from fusegrad.device import Allocator, whole_groups
from fusegrad_cuda.renderer import BLOCK_SIZE


@dataclass(frozen=True)
class CUDADevice:
    """One opened GPU: its pycuda context (made current while it is used) and architecture."""

    name: str
    device: Any
    context: Any

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """Make this device's context the current one for the duration."""
        self.context.push()
        try:
            yield
        finally:
            cuda.Context.pop()

    @property
    def arch(self) -> str:
        major, minor = self.device.compute_capability()
        return f"sm_{major}{minor}"


def device_index(name: str) -> int:
    """``"CUDA"`` -> 0, ``"CUDA:1"`` -> 1."""
    return int(name.partition(":")[2] or 0)


def open_device(name: str) -> CUDADevice:
    """The context of GPU ``name``, made once per process."""
    return _open(device_index(name))


@functools.cache
def _open(index: int) -> CUDADevice:
    cuda.init()
    device = cuda.Device(index)
    context = device.retain_primary_context()
    return CUDADevice(f"CUDA:{index}" if index else "CUDA", device, context)


class CUDAAllocator(Allocator):
    """``cuda.mem_alloc`` memory; copies are synchronous."""

    def __init__(self, device: CUDADevice):
        self.device = device

    def alloc(self, nbytes: int) -> Any:
        with self.device.current():
            return cuda.mem_alloc(nbytes)

    def free(self, handle: Any, nbytes: int) -> None:
        handle.free()

    def copyin(self, handle: Any, src: memoryview) -> None:
        """Copy host bytes in, after the kernels launched before (one stream orders them)."""
        with self.device.current():
            cuda.memcpy_htod(handle, np.frombuffer(src, dtype=np.uint8))

    def copyout(self, dest: memoryview, handle: Any) -> None:
        """Copy to the host once the kernels launched before have finished."""
        with self.device.current():
            cuda.memcpy_dtoh(np.frombuffer(dest, dtype=np.uint8), handle)


class CUDAProgram:
    """A kernel loaded from its cubin, launched over ``ceil(n / BLOCK_SIZE)`` blocks.

    ``CUDAProgram(device, name, binary)``; the plugin hands core a ``functools.partial``.
    """

    def __init__(self, device: CUDADevice, name: str, binary: bytes):
        self.device, self.name = device, name
        with device.current():
            self.module = cuda.module_from_buffer(binary)
            self.function = self.module.get_function(name)

    def __call__(
        self,
        *buffers: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        """Launch over ``global_size`` (one thread when None) in blocks of ``local_size`` threads
        (``BLOCK_SIZE`` when None); the seconds it took if ``wait``."""
        blocks, threads = whole_groups(global_size, local_size[0] if local_size else BLOCK_SIZE)
        grid, block = (blocks, 1, 1), (threads, 1, 1)
        args = (*buffers, *(np.int32(v) for v in vals))
        with self.device.current():
            if not wait:
                self.function(*args, block=block, grid=grid)
                return None
            start, end = cuda.Event(), cuda.Event()
            start.record()
            self.function(*args, block=block, grid=grid)
            end.record()
            end.synchronize()
            return start.time_till(end) * 1e-3

    def __repr__(self) -> str:
        return f"<CUDAProgram {self.name} on {self.device.name}>"
