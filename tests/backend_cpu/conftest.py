"""Fixtures for the CPU backend's tests: the C compilers found here, memory, kernels."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from fusegrad_cpu.compiler import CCompiler
from fusegrad_cpu.device import CPUAllocator

#: The compilers a CPU backend may meet; tests run with each one installed here.
COMPILERS = [name for name in ("clang", "gcc") if shutil.which(name)]


@pytest.fixture(params=COMPILERS)
def compiler(request: pytest.FixtureRequest) -> CCompiler:
    """A compiler for each C compiler installed here."""
    return CCompiler([request.param])


@pytest.fixture
def allocator() -> CPUAllocator:
    return CPUAllocator()


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path):
    """An empty kernel cache folder, used by ``compile_cached`` for the test's duration."""
    monkeypatch.setenv("FUSEGRAD_CACHE", str(tmp_path))
    monkeypatch.delenv("FUSEGRAD_DISABLE_CACHE", raising=False)
    return tmp_path


def upload(allocator: CPUAllocator, array: np.ndarray) -> np.ndarray:
    """A new allocation holding ``array``'s bytes."""
    handle = allocator.alloc(array.nbytes)
    allocator.copyin(handle, memoryview(np.ascontiguousarray(array)).cast("B"))
    return handle


def download(allocator: CPUAllocator, handle: np.ndarray, dtype: type, size: int) -> np.ndarray:
    """A host copy of ``size`` elements of ``dtype`` from ``handle``."""
    out = np.empty(size, dtype=dtype)
    allocator.copyout(memoryview(out).cast("B"), handle)
    return out
