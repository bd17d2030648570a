"""Tests of ``fusegrad_opencl/device.py`` and ``compiler.py`` on a real OpenCL device (PoCL
here)."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import kernel_cache
from fusegrad.errors import CompileError
from fusegrad_opencl.compiler import CLCompiler
from fusegrad_opencl.device import CLAllocator, CLProgram

SCALE = """__kernel void scale(__global float* restrict data0,
                    __global const float* restrict data1) {
  int i = get_global_id(0);
  data0[i] = data1[i] * 3.0f + 1.0f;
}"""


def upload(allocator: CLAllocator, array: np.ndarray):
    handle = allocator.alloc(array.nbytes)
    allocator.copyin(handle, memoryview(np.ascontiguousarray(array)).cast("B"))
    return handle


def download(allocator: CLAllocator, handle, dtype, size: int) -> np.ndarray:
    out = np.empty(size, dtype=dtype)
    allocator.copyout(memoryview(out).cast("B"), handle)
    return out


def test_copyin_copyout_round_trip(cl_device):
    allocator = CLAllocator(cl_device)
    data = np.random.default_rng(0).standard_normal(37)
    np.testing.assert_array_equal(
        download(allocator, upload(allocator, data), np.float64, 37), data
    )
    with pytest.raises(ValueError, match="copyin of 3 bytes into a 4-byte allocation"):
        allocator.copyin(allocator.alloc(4), memoryview(b"abc"))


def test_program_runs_from_the_binary_and_times_itself(cl_device):
    allocator = CLAllocator(cl_device)
    a = np.arange(1000, dtype=np.float32)
    out = allocator.alloc(a.nbytes)
    program = CLProgram(cl_device, "scale", CLCompiler(cl_device).compile(SCALE))
    seconds = program(out, upload(allocator, a), global_size=(1000,), wait=True)
    assert seconds is not None and 0 < seconds < 10
    np.testing.assert_array_equal(download(allocator, out, np.float32, 1000), a * 3 + 1)


def test_buffers_the_kernel_does_not_declare_are_not_passed(cl_device):
    allocator = CLAllocator(cl_device)
    out, a = allocator.alloc(8), upload(allocator, np.array([1, 2], dtype=np.float32))
    program = CLProgram(cl_device, "scale", CLCompiler(cl_device).compile(SCALE))
    program(out, a, allocator.alloc(4), global_size=(2,))
    np.testing.assert_array_equal(download(allocator, out, np.float32, 2), [4, 7])


def test_build_failure_shows_the_build_log_and_the_source(cl_device):
    broken = "__kernel void broken(__global float* data0) { data0[0] = undefined_name; }"
    with pytest.raises(CompileError) as info:
        CLCompiler(cl_device).compile(broken)
    message = str(info.value)
    assert "failed to build on OPENCL" in message and "undefined_name" in message
    assert "   1 | __kernel void broken" in message


def test_identity_names_device_and_driver(cl_device):
    identity = CLCompiler(cl_device).identity
    assert cl_device.device.name.strip() in identity and "driver" in identity


def test_binaries_are_cached_on_disk(cl_device, monkeypatch, tmp_path):
    monkeypatch.setenv("FUSEGRAD_CACHE", str(tmp_path))
    monkeypatch.delenv("FUSEGRAD_DISABLE_CACHE", raising=False)
    compiler = CLCompiler(cl_device)
    binary = compiler.compile_cached(SCALE)
    assert len(list((tmp_path / kernel_cache.FOLDER).iterdir())) == 1
    monkeypatch.setattr(compiler, "compile", lambda source: pytest.fail("compiled again"))
    assert compiler.compile_cached(SCALE) == binary


def test_an_empty_program_from_the_drivers_cache_is_built_again(cl_device, monkeypatch):
    """PoCL's kernel cache can return a program without kernels (a half-written file): the
    compiler builds once more under another cache key instead of keeping an empty binary."""
    compiler, built = CLCompiler(cl_device), []
    real_build = CLCompiler._build

    def build(self, source, options):
        built.append(list(options))
        return real_build(self, "" if len(built) == 1 else source, options)  # first: no kernels

    monkeypatch.setattr(CLCompiler, "_build", build)
    binary = compiler.compile(SCALE)
    assert built == [[], ["-DFUSEGRAD_REBUILD=1"]]
    assert CLProgram(cl_device, "scale", binary).name == "scale"
    built.clear()
    monkeypatch.setattr(
        CLCompiler, "_build", lambda self, _, options: real_build(self, "", options)
    )
    with pytest.raises(CompileError, match="built no kernel from the source below"):
        compiler.compile(SCALE)
