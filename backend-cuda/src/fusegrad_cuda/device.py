"""NVIDIA GPUs through the CUDA driver API (driver.py): a context per device, memory, cubin
modules, launches, events.

The plugin module imports this only when a CUDA device is opened, after its probe has found the
driver. Everything runs on the default stream, so launches and copies happen in the order they
are asked for, and a copy to the host waits for the kernels before it.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass
from typing import Any

from fusegrad.device import Allocator, whole_groups
from fusegrad_cuda import driver
from fusegrad_cuda.renderer import BLOCK_SIZE


@dataclass(frozen=True)
class CUDADevice:
    """One opened GPU: its index, its primary context (made current before each use) and its
    architecture, e.g. ``sm_90``."""

    name: str
    index: int
    context: int
    arch: str

    def current(self) -> None:
        """Make this device's context the calling thread's current one."""
        driver.set_current(self.context)


def device_index(name: str) -> int:
    """``"CUDA"`` -> 0, ``"CUDA:1"`` -> 1."""
    return int(name.partition(":")[2] or 0)


def open_device(name: str) -> CUDADevice:
    """The context of GPU ``name``, made once per process."""
    return _open(device_index(name))


@functools.cache
def _open(index: int) -> CUDADevice:
    major, minor = driver.compute_capability(index)
    name = f"CUDA:{index}" if index else "CUDA"
    return CUDADevice(name, index, driver.primary_context(index), f"sm_{major}{minor}")


class CUDAAllocator(Allocator):
    """Device memory from ``cuMemAlloc``, handles are its addresses; copies are synchronous."""

    def __init__(self, device: CUDADevice):
        self.device = device

    def alloc(self, nbytes: int) -> int:
        self.device.current()
        return driver.alloc(nbytes)

    def free(self, handle: int, nbytes: int) -> None:
        self.device.current()
        driver.free(handle)

    def copyin(self, handle: int, src: memoryview) -> None:
        """Copy host bytes in, after the kernels launched before (one stream orders them)."""
        self.device.current()
        driver.copy_to_device(handle, src)

    def copyout(self, dest: memoryview, handle: int) -> None:
        """Copy to the host once the kernels launched before have finished."""
        self.device.current()
        driver.copy_to_host(dest, handle)


class CUDAProgram:
    """A kernel loaded from its cubin, launched over ``ceil(n / BLOCK_SIZE)`` blocks.

    ``CUDAProgram(device, name, binary)``; the plugin hands core a ``functools.partial``.
    """

    def __init__(self, device: CUDADevice, name: str, binary: bytes):
        self.device, self.name = device, name
        device.current()
        self.module = driver.load_module(binary)
        self.function = driver.get_function(self.module, name)

    def __call__(
        self,
        *buffers: int,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        """Launch over ``global_size`` (one thread when None) in blocks of ``local_size`` threads
        (``BLOCK_SIZE`` when None); the seconds it took if ``wait``."""
        blocks, threads = whole_groups(global_size, local_size[0] if local_size else BLOCK_SIZE)
        args: list[Any] = [ctypes.c_uint64(b) for b in buffers]
        args += [ctypes.c_int32(v) for v in vals]
        self.device.current()
        if not wait:
            driver.launch(self.function, (blocks, 1, 1), (threads, 1, 1), args)
            return None
        with driver.Timer() as timer:
            driver.launch(self.function, (blocks, 1, 1), (threads, 1, 1), args)
        return timer.seconds

    def __repr__(self) -> str:
        return f"<CUDAProgram {self.name} on {self.device.name}>"
