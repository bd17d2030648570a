"""Small shared utilities: environment flags, products, timing."""

from __future__ import annotations

import functools
import math
import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


@functools.cache
def getenv(key: str, default: int = 0) -> int:
    """An integer environment flag such as ``DEBUG=2``; read once per process."""
    value = os.environ.get(key, "")
    try:
        return int(value) if value != "" else default
    except ValueError:
        return default


class Context:
    """Flags that may change at run time (tests set them); ``DEBUG`` and ``NOOPT`` live here."""

    DEBUG: int = getenv("DEBUG")
    NOOPT: int = getenv("NOOPT")
    BEAM: int = getenv("BEAM")
    #: check every generated kernel before compiling it (codegen/verify.py); on in the tests
    VERIFY: int = getenv("VERIFY")
    #: check index ops' indices at the next read (tensor/bounds.py); 0 skips the checks
    CHECK_BOUNDS: int = getenv("CHECK_BOUNDS", 1)
    #: keep a weight's layout copy from one eager run of a plan to the next while the weight is
    #: unchanged (engine/realize.py ``_reuse_constants``); 0 copies at every run
    KEEP_COPIES: int = getenv("KEEP_COPIES", 1)


@contextmanager
def context(**flags: int) -> Iterator[None]:
    """Temporarily set ``Context`` flags: ``with context(DEBUG=2): ...``."""
    old = {k: getattr(Context, k) for k in flags}
    for k, v in flags.items():
        setattr(Context, k, v)
    try:
        yield
    finally:
        for k, v in old.items():
            setattr(Context, k, v)


def prod(xs: Iterable[int]) -> int:
    """The product of integers (1 for an empty sequence)."""
    return math.prod(xs)


def strides_for(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of a contiguous array of ``shape``."""
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return tuple(reversed(out))


class Timer:
    """``with Timer() as t: ...`` then ``t.seconds``."""

    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *_: object) -> None:
        self.seconds = time.perf_counter() - self.start


def usable_cores() -> int:
    """The cores this process may run on (fewer than the machine's under ``taskset`` or in a
    container limited to some)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def cache_dir() -> str:
    """Where compiled kernels are cached: ``FUSEGRAD_CACHE`` or ``~/.cache/fusegrad``."""
    base = os.environ.get("FUSEGRAD_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "fusegrad"
    )
    return base


def write_atomically(path: str, data: bytes) -> None:
    """Write to a temporary file, then rename: a reader sees the whole file or none of it.
    A cache that cannot be written (read-only folder) only costs speed, so errors pass."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except OSError:
        pass
