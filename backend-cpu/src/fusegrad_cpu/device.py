"""Host memory as aligned numpy arrays; kernels as shared objects loaded from memory, via ctypes."""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import itertools
import mmap
import os
import platform
import re
import shutil
import sys
import time
import weakref
from typing import Any

import numpy as np

from fusegrad.compile_process import owned_folder, remove_stale_folders
from fusegrad.device import Allocator
from fusegrad.errors import CompileError

#: Alignment of every allocation: a cache line, and enough for any vector load.
ALIGNMENT = 64


class CPUAllocator(Allocator):
    """Memory is a numpy ``uint8`` array whose first byte is 64-byte aligned."""

    def alloc(self, nbytes: int) -> np.ndarray:
        """Over-allocate by ``ALIGNMENT`` bytes; the aligned slice keeps the whole array alive."""
        raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
        start = -raw.ctypes.data % ALIGNMENT
        return raw[start : start + nbytes]

    def alloc_zeroed(self, nbytes: int) -> np.ndarray:
        """An anonymous memory map: the operating system hands out its pages zeroed when first
        touched, so the parts never written take no memory (a language model's KV cache for
        1,024 positions, of which a chat uses a few hundred). Page-aligned."""
        return np.frombuffer(mmap.mmap(-1, nbytes), dtype=np.uint8, count=nbytes)

    def copyin(self, handle: np.ndarray, src: memoryview) -> None:
        """Copy host bytes into ``handle``; their sizes must match."""
        if src.nbytes != handle.nbytes:
            raise ValueError(f"copyin of {src.nbytes} bytes into a {handle.nbytes}-byte allocation")
        handle[:] = np.frombuffer(src, dtype=np.uint8)

    def copyout(self, dest: memoryview, handle: np.ndarray) -> None:
        """Copy ``handle``'s bytes into host memory; their sizes must match."""
        if dest.nbytes != handle.nbytes:
            raise ValueError(
                f"copyout of a {handle.nbytes}-byte allocation into {dest.nbytes} bytes"
            )
        np.frombuffer(dest, dtype=np.uint8)[:] = handle

    def transfer(self, dest: np.ndarray, source: Allocator, handle: Any, nbytes: int) -> bool:
        """From another CPU device (both are host memory): one memory copy, not two."""
        if not isinstance(source, CPUAllocator):
            return False
        dest[:nbytes] = handle[:nbytes]
        return True


# numpy takes about a microsecond to say where an array's data is, more than the kernel call
# itself; so addresses are remembered, keyed by id and checked through a weak reference (an id
# is reused once its array is gone, and the weak reference's callback forgets it then).
_addresses: dict[int, tuple[weakref.ref, int]] = {}


def address_of(handle: np.ndarray) -> int:
    """The address of ``handle``'s first byte."""
    entry = _addresses.get(id(handle))
    if entry is not None and entry[0]() is handle:
        return entry[1]
    key = id(handle)
    _addresses[key] = (weakref.ref(handle, lambda ref: _forget(key, ref)), handle.ctypes.data)
    return _addresses[key][1]


def _forget(key: int, ref: weakref.ref) -> None:
    if (entry := _addresses.get(key)) is not None and entry[0] is ref:
        del _addresses[key]


_loads = itertools.count()
_folder: str | None = None


def load_folder() -> str:
    """A folder of this process's own for the paths libraries are loaded through; named after
    the process, so that the next one removes it if this one is killed."""
    global _folder
    if _folder is None or not os.path.isdir(_folder):
        remove_stale_folders()
        _folder = owned_folder("so")
        atexit.register(_remove_folder, _folder, os.getpid())
    return _folder


def _remove_folder(folder: str, pid: int) -> None:
    if os.getpid() == pid:  # a forked child inherits this exit handler, not the folder
        shutil.rmtree(folder, ignore_errors=True)


def load_library(binary: bytes, name: str = "a kernel") -> ctypes.CDLL:
    """Load a shared object from its bytes, keeping them in memory where the system allows it.

    glibc hands back the library it already loaded when asked for the same path again, and the
    N of ``/proc/self/fd/N`` is reused once closed; so each library is opened through a path
    used only once: a symlink to an in-memory file (Linux's memfd), or else the file itself.
    The path is removed once loaded; the loaded code stays mapped. A library that does not
    load raises ``CompileError`` naming kernel ``name``, with the loader's reason, not the path.
    """
    path = os.path.join(load_folder(), f"{os.getpid()}-{next(_loads)}.so")
    try:
        return _open_library(path, binary)
    except OSError as e:
        reason = re.sub(r"/proc/self/fd/\d+", "", str(e).replace(path, "")).lstrip(": ")
        raise CompileError(
            f"the compiled CPU kernel {name} could not be loaded ({reason or 'no reason given'}); "
            "delete the kernel cache folder (FUSEGRAD_CACHE, or ~/.cache/fusegrad) if this repeats"
        ) from None
    finally:
        if os.path.lexists(path):
            os.unlink(path)


def _open_library(path: str, binary: bytes) -> ctypes.CDLL:
    """Load ``binary`` through ``path`` (see ``load_library``), which is left for it to remove."""
    if not hasattr(os, "memfd_create"):
        with open(path, "wb") as f:
            f.write(binary)
        return ctypes.CDLL(path)
    fd = os.memfd_create("fusegrad-kernel", os.MFD_CLOEXEC)
    try:
        with open(fd, "wb", closefd=False) as f:
            f.write(binary)
        os.symlink(f"/proc/self/fd/{fd}", path)
        return ctypes.CDLL(path)
    finally:
        os.close(fd)


#: Starts a kernel's binary when its library holds other kernels too: then comes the name of its
#: function there, a newline, and the library (see ``CCompiler.compile_batch``). Any other
#: binary is a library of its own whose function is named after the kernel.
SHARED = b"fusegrad shared library; function "
#: Libraries holding several kernels, by digest: each is loaded once, however many use it.
_shared_libraries: dict[bytes, ctypes.CDLL] = {}


def shared_entry(function: str, library: bytes) -> bytes:
    """The binary of the kernel ``function`` inside ``library``, a library it shares."""
    return SHARED + function.encode() + b"\n" + library


def load_kernel(name: str, binary: bytes) -> tuple[ctypes.CDLL, str]:
    """The loaded library holding the kernel ``name`` built as ``binary``, and its function's
    name."""
    if not binary.startswith(SHARED):
        return load_library(binary, name), name
    function, _, library = binary[len(SHARED) :].partition(b"\n")
    digest = hashlib.sha256(library).digest()
    if (loaded := _shared_libraries.get(digest)) is None:
        loaded = _shared_libraries[digest] = load_library(library, name)
    return loaded, function.decode()


class CPUProgram:
    """A compiled kernel, ``void name(T* data0, ..., int var0, ...)``, called through ctypes."""

    def __init__(self, name: str, binary: bytes):
        self.name = name
        self.library, symbol = load_kernel(name, binary)
        self.function = self.library[symbol]  # a function object of its own, for its argtypes
        self.function.restype = None
        #: (buffers, vals) the argument types were declared for, on the first call
        self.arity: tuple[int, int] | None = None

    def __call__(
        self,
        *buffers: np.ndarray,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        """Run on allocator handles and integer ``vals``; the seconds it took if ``wait``.

        The kernel loops over its output itself, so ``global_size`` and ``local_size`` are unused.
        """
        if self.arity != (len(buffers), len(vals)):
            self.declare(len(buffers), len(vals))
        args = [address_of(b) for b in buffers]
        if not wait:
            self.function(*args, *vals)
            return None
        start = time.perf_counter()
        self.function(*args, *vals)
        return time.perf_counter() - start

    @staticmethod
    def batch(calls: list[tuple[CPUProgram, list[np.ndarray], tuple[int, ...]]]) -> CPUBatch | None:
        """The launches ``calls`` (program, buffer handles, variables' values) as one callable
        (``CPUBatch``), or None where a batch cannot call them (TinyJit then launches each)."""
        if not batch_supported() or not all(CPUBatch.fits(p, len(b), len(v)) for p, b, v in calls):
            return None
        return CPUBatch(calls)

    def declare(self, buffers: int, vals: int) -> None:
        """Declare the C argument types; once, since the kernel's signature never changes."""
        if self.arity is not None:
            raise TypeError(
                f"kernel {self.name} takes {self.arity[0]} buffers and {self.arity[1]} ints, "
                f"called with {buffers} and {vals}"
            )
        self.function.argtypes = [ctypes.c_void_p] * buffers + [ctypes.c_int] * vals
        self.arity = (buffers, vals)

    def __repr__(self) -> str:
        return f"<CPUProgram {self.name}>"


# ---- replaying many launches in one call (TinyJit) -------------------------------------------

#: The most arguments (buffers and ints) of a kernel a batch calls; a kernel with more runs alone.
BATCH_ARGUMENTS = 24


def _batch_source() -> str:
    """C for ``run_batch``: call ``n`` kernels in order, each through its address with its
    arguments as pointer-sized words (an int argument too: the x86-64 and AArch64 Linux calling
    conventions pass an int in the low half of a register or an 8-byte stack slot, as a pointer).
    A kernel whose ``active`` byte is 0 is skipped."""
    cases = []
    for k in range(BATCH_ARGUMENTS + 1):
        params = ", ".join(["W"] * k) or "void"
        args = ", ".join(f"a[{j}]" for j in range(k))
        cases.append(f"      case {k}: ((void (*)({params}))fns[i])({args}); break;")
    body = "\n".join(cases)
    return f"""#include <stdint.h>
typedef uintptr_t W;
void run_batch(int n, void **fns, const int *counts, const int *starts, const W *words,
               const unsigned char *active) {{
  for (int i = 0; i < n; i++) {{
    if (!active[i]) continue;
    const W *a = words + starts[i];
    switch (counts[i]) {{
{body}
    }}
  }}
}}
"""


@functools.cache
def _run_batch() -> Any:
    """The compiled ``run_batch`` (built once per process, then from the kernel cache)."""
    from fusegrad_cpu.compiler import CCompiler  # (compiler.py imports this module)

    binary = CCompiler().compile_cached(_batch_source())
    function = load_library(binary, "run_batch").run_batch
    function.restype = None
    function.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 5
    return function


def batch_supported() -> bool:
    """Whether ``CPUBatch`` may call kernels here: Linux on x86-64 or AArch64, whose calling
    conventions pass an int argument as a pointer-sized word (``_batch_source``)."""
    return sys.platform.startswith("linux") and platform.machine() in ("x86_64", "aarch64")


class CPUBatch:
    """Launches replayed by one C call instead of a ctypes call each (``CPUProgram.batch``):
    TinyJit's replay of a small model is then the kernels' time, not Python's (silero-vad's 38
    launches took about 3 us each through ctypes). Arguments are set in place between calls:
    ``set_buffer`` (an input's new buffer), ``set_vals`` (variables' values), ``set_active``."""

    def __init__(self, calls: list[tuple[CPUProgram, list[np.ndarray], tuple[int, ...]]]):
        self.n = len(calls)
        self.starts: list[int] = []
        words: list[int] = []
        counts = []
        for _, buffers, vals in calls:
            self.starts.append(len(words))
            words += [address_of(b) for b in buffers] + [int(v) for v in vals]
            counts.append(len(buffers) + len(vals))
        self.buffers = [len(buffers) for _, buffers, _ in calls]
        addresses = [
            ctypes.cast(program.function, ctypes.c_void_p).value for program, _, _ in calls
        ]
        self.keep = [program for program, _, _ in calls]  # the libraries stay loaded
        self.fns = (ctypes.c_void_p * self.n)(*addresses)
        self.counts = (ctypes.c_int * self.n)(*counts)
        self.start_words = (ctypes.c_int * self.n)(*self.starts)
        self.words = (ctypes.c_size_t * max(1, len(words)))(*[w % (1 << 64) for w in words])
        self.active = (ctypes.c_ubyte * self.n)(*([1] * self.n))
        self.run = _run_batch()

    @staticmethod
    def fits(program: CPUProgram, buffers: int, vals: int) -> bool:
        """Whether a launch of ``program`` can be one of a batch's."""
        return isinstance(program, CPUProgram) and buffers + vals <= BATCH_ARGUMENTS

    def set_buffer(self, call: int, position: int, handle: np.ndarray) -> None:
        self.words[self.starts[call] + position] = address_of(handle)

    def set_vals(self, call: int, vals: tuple[int, ...]) -> None:
        start = self.starts[call] + self.buffers[call]
        for j, v in enumerate(vals):
            self.words[start + j] = int(v) % (1 << 64)

    def set_active(self, call: int, active: bool) -> None:
        self.active[call] = 1 if active else 0

    def __call__(self) -> None:
        self.run(self.n, self.fns, self.counts, self.start_words, self.words, self.active)
