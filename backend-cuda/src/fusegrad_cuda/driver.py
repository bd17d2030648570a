"""The few CUDA driver API calls the backend needs, through ctypes: no Python package, only the
NVIDIA driver's ``libcuda``.

Each call returns a status (0 is success); ``call`` turns any other into a ``CUDAError`` that
names the function and the driver's own words for the status. Handles (contexts, modules,
functions, events) are opaque pointers; device memory is a 64-bit address (``CUdeviceptr``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os

import numpy as np

from fusegrad.errors import FusegradError

#: ``cuDeviceGetAttribute`` numbers (cuda.h's ``CUdevice_attribute``)
COMPUTE_CAPABILITY_MAJOR, COMPUTE_CAPABILITY_MINOR = 75, 76
#: the error numbers the probe tells apart
NO_DEVICE, STUB_LIBRARY = 100, 34


class CUDAError(FusegradError, RuntimeError):
    """A CUDA driver call failed; ``status`` is the driver's error number."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


#: where drivers live outside the loader's cache: containers mount them, WSL has its own
DRIVER_FOLDERS = ("/usr/local/nvidia/lib64", "/usr/lib/wsl/lib")


def find_driver() -> str | None:
    """The driver library's name or path, without loading it: the loader's cache first, then
    ``LD_LIBRARY_PATH`` and the folders of ``DRIVER_FOLDERS``."""
    if name := ctypes.util.find_library("cuda"):
        return name
    folders = [*os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep), *DRIVER_FOLDERS]
    paths = (os.path.join(f, "libcuda.so.1") for f in folders if f)
    return next((p for p in paths if os.path.exists(p)), None)


@functools.cache
def driver() -> ctypes.CDLL:
    """``libcuda``, loaded once and initialised (``cuInit``)."""
    lib = ctypes.CDLL(find_driver() or "libcuda.so.1")
    _check(lib, "cuInit", lib.cuInit(0))
    return lib


def _check(lib: ctypes.CDLL, name: str, status: int) -> None:
    if status != 0:
        text = ctypes.c_char_p()
        lib.cuGetErrorString(status, ctypes.byref(text))
        words = text.value.decode() if text.value else "unknown error"
        raise CUDAError(f"the CUDA driver's {name} failed: {words} (error {status})", status)


def call(name: str, *args: object) -> None:
    """Call driver function ``name`` with ``args``; raise ``CUDAError`` if it fails."""
    lib = driver()
    _check(lib, name, getattr(lib, name)(*args))


def out(kind: type, name: str, *args: object):
    """Call ``name`` with a pointer to a new ``kind`` as its first argument; return its value."""
    value = kind()
    call(name, ctypes.byref(value), *args)
    return value.value


def device_count() -> int:
    return out(ctypes.c_int, "cuDeviceGetCount")


def compute_capability(device: int) -> tuple[int, int]:
    """(major, minor) of GPU ``device``: (9, 0) for an H100."""
    get = functools.partial(out, ctypes.c_int, "cuDeviceGetAttribute")
    return get(COMPUTE_CAPABILITY_MAJOR, device), get(COMPUTE_CAPABILITY_MINOR, device)


def primary_context(device: int) -> int:
    """The primary context of GPU ``device`` (the one the runtime API and other libraries
    share), retained for the life of the process."""
    handle = out(ctypes.c_int, "cuDeviceGet", device)
    return out(ctypes.c_void_p, "cuDevicePrimaryCtxRetain", handle)


def set_current(context: int) -> None:
    call("cuCtxSetCurrent", ctypes.c_void_p(context))


def synchronize() -> None:
    call("cuCtxSynchronize")


def alloc(nbytes: int) -> int:
    """``nbytes`` of device memory (at least one byte: the driver refuses zero)."""
    return out(ctypes.c_uint64, "cuMemAlloc_v2", ctypes.c_size_t(max(nbytes, 1)))


def free(address: int) -> None:
    call("cuMemFree_v2", ctypes.c_uint64(address))


def copy_to_device(address: int, src: memoryview) -> None:
    """Copy ``src`` to ``address``, after the work launched before it (the default stream)."""
    if src.nbytes:
        host = np.frombuffer(src, dtype=np.uint8)  # a pointer to read-only bytes too
        call(
            "cuMemcpyHtoD_v2",
            ctypes.c_uint64(address),
            ctypes.c_void_p(host.ctypes.data),
            ctypes.c_size_t(src.nbytes),
        )


def copy_to_host(dest: memoryview, address: int) -> None:
    """Copy to writable ``dest`` once the work launched before has finished."""
    if dest.nbytes:
        host = np.frombuffer(dest, dtype=np.uint8)
        call(
            "cuMemcpyDtoH_v2",
            ctypes.c_void_p(host.ctypes.data),
            ctypes.c_uint64(address),
            ctypes.c_size_t(dest.nbytes),
        )


def load_module(image: bytes) -> int:
    """A module loaded from a cubin's bytes."""
    return out(ctypes.c_void_p, "cuModuleLoadData", ctypes.c_char_p(image))


def get_function(module: int, name: str) -> int:
    return out(ctypes.c_void_p, "cuModuleGetFunction", ctypes.c_void_p(module), name.encode())


def launch(
    function: int,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    args: list[ctypes.c_uint64 | ctypes.c_int32],
) -> None:
    """Launch ``function`` on the default stream; ``args`` hold each parameter's value."""
    params = (ctypes.c_void_p * len(args))(*(ctypes.addressof(a) for a in args))
    call("cuLaunchKernel", ctypes.c_void_p(function), *grid, *block, 0, None, params, None)


class Timer:
    """Two events around launches on the default stream: ``with Timer() as t: ...`` then
    ``t.seconds`` (waits for the launches to finish)."""

    def __enter__(self) -> Timer:
        self.start, self.end = (out(ctypes.c_void_p, "cuEventCreate", 0) for _ in range(2))
        call("cuEventRecord", ctypes.c_void_p(self.start), None)
        return self

    def __exit__(self, *exc: object) -> None:
        call("cuEventRecord", ctypes.c_void_p(self.end), None)

    @property
    def seconds(self) -> float:
        try:
            call("cuEventSynchronize", ctypes.c_void_p(self.end))
            ms = ctypes.c_float()
            call(
                "cuEventElapsedTime",
                ctypes.byref(ms),
                ctypes.c_void_p(self.start),
                ctypes.c_void_p(self.end),
            )
            return ms.value * 1e-3
        finally:
            for event in (self.start, self.end):
                call("cuEventDestroy_v2", ctypes.c_void_p(event))
