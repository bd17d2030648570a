"""Tests of ``fusegrad_cpu/device.py``: aligned memory, kernels loaded from memory, their calls."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import GlobalCounters, Tensor
from fusegrad_cpu.compiler import CCompiler
from fusegrad_cpu.device import ALIGNMENT, CPUProgram, address_of

from .conftest import download, upload

MULADD = """void muladd(float* restrict data0, const float* restrict data1,
                        const float* restrict data2, int var0) {
  for (int i = 0; i < var0; i++) data0[i] = data1[i] * data2[i] + 1.0f;
}"""


def constant_kernel(value: int) -> str:
    return f"void constant(int* data0) {{ data0[0] = {value}; }}"


@pytest.mark.parametrize("nbytes", [1, 3, 64, 1000, 4097])
def test_alloc_is_aligned_and_sized(allocator, nbytes):
    handle = allocator.alloc(nbytes)
    assert (handle.nbytes, address_of(handle) % ALIGNMENT) == (nbytes, 0)


def test_copyin_copyout_round_trip(allocator):
    data = np.random.default_rng(0).standard_normal(37)
    back = download(allocator, upload(allocator, data), np.float64, 37)
    np.testing.assert_array_equal(back, data)


def test_copy_of_another_size_is_refused(allocator):
    with pytest.raises(ValueError, match="copyin of 3 bytes into a 4-byte allocation"):
        allocator.copyin(allocator.alloc(4), memoryview(b"abc"))
    with pytest.raises(ValueError, match="copyout of a 4-byte allocation into 8 bytes"):
        allocator.copyout(memoryview(bytearray(8)), allocator.alloc(4))


def test_kernel_matches_numpy_bit_for_bit(compiler, allocator):
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(1001).astype(np.float32) for _ in range(2))
    out = allocator.alloc(a.nbytes)
    program = CPUProgram("muladd", compiler.compile(MULADD))
    assert program(out, upload(allocator, a), upload(allocator, b), vals=(1001,)) is None
    np.testing.assert_array_equal(download(allocator, out, np.float32, 1001), a * b + 1)


def test_vals_bound_the_loop(compiler, allocator):
    ones = np.ones(8, np.float32)
    out = upload(allocator, np.zeros(8, np.float32))
    CPUProgram("muladd", compiler.compile(MULADD))(
        out, upload(allocator, ones), upload(allocator, ones), vals=(3,)
    )
    np.testing.assert_array_equal(download(allocator, out, np.float32, 8), [2, 2, 2, 0, 0, 0, 0, 0])


def test_kernels_of_the_same_name_stay_apart(compiler, allocator):
    # glibc finds loaded libraries by path, and /proc/self/fd numbers are reused
    programs = [CPUProgram("constant", compiler.compile(constant_kernel(v))) for v in range(4)]
    out = allocator.alloc(4)
    results = []
    for program in programs:
        program(out)
        results.append(download(allocator, out, np.int32, 1)[0])
    assert results == [0, 1, 2, 3]


def test_wait_returns_seconds(compiler, allocator):
    program = CPUProgram("constant", compiler.compile(constant_kernel(1)))
    seconds = program(allocator.alloc(4), wait=True)
    assert isinstance(seconds, float) and 0 <= seconds < 1


def test_new_handles_are_not_confused_with_dead_ones(allocator):
    # CPython reuses the id of a freed array at once; a stale address would read freed memory
    program = CPUProgram("muladd", CCompiler().compile(MULADD))
    out = allocator.alloc(16)
    for i in range(50):
        x = upload(allocator, np.full(4, i, np.float32))
        program(out, x, x, vals=(4,))
        assert download(allocator, out, np.float32, 4)[0] == i * i + 1
        del x


def test_views_have_their_own_address(allocator):
    handle = allocator.alloc(64)
    assert address_of(handle[16:]) == address_of(handle) + 16


def test_argument_count_is_fixed_by_the_first_call(compiler, allocator):
    program = CPUProgram("constant", compiler.compile(constant_kernel(1)))
    program(allocator.alloc(4))
    with pytest.raises(TypeError, match="takes 1 buffers and 0 ints, called with 2 and 0"):
        program(allocator.alloc(4), allocator.alloc(4))


def test_kernels_built_together_load_their_library_once(compiler, allocator):
    binaries = compiler.compile_batch([constant_kernel(v) for v in range(3)] + [MULADD])
    programs = [CPUProgram("constant", b) for b in binaries[:3]]
    muladd = CPUProgram("muladd", binaries[3])
    alone = CPUProgram("constant", compiler.compile(constant_kernel(0)))
    assert len({id(p.library) for p in [*programs, muladd]}) == 1
    assert alone.library is not muladd.library
    out = allocator.alloc(4)
    results = []
    for program in programs:
        program(out)
        results.append(download(allocator, out, np.int32, 1)[0])
    assert results == [0, 1, 2]
    # each kernel keeps its own argument types, though they share a library
    ones = upload(allocator, np.ones(2, np.float32))
    muladd(out, ones, ones, vals=(1,))
    assert download(allocator, out, np.float32, 1)[0] == 2


def _resident_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def test_zeroed_memory_takes_room_only_where_written(allocator):
    """``alloc_zeroed``: zeros, aligned, and pages that the operating system fills when first
    touched: a 256 MiB buffer costs nothing until written, then what is written."""
    before = _resident_mib()
    handle = allocator.alloc_zeroed(256 << 20)
    assert address_of(handle) % ALIGNMENT == 0 and handle.nbytes == 256 << 20
    assert _resident_mib() - before < 16
    handle[: 64 << 20] = 1
    assert 48 < _resident_mib() - before < 96
    assert handle[(64 << 20) - 1] == 1 and not handle[64 << 20 :].any()
    del handle


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_zeros_buffer_is_realized_zeros_written_in_place(device):
    """``Tensor.zeros_buffer``: a buffer at once (no kernel), zeros, and a prefix view assigned
    writes into it (as a KV cache is written)."""
    GlobalCounters.reset()
    t = Tensor.zeros_buffer(5, 3, device=device)
    assert GlobalCounters.kernel_count == 0
    t.shrink(((0, 2), None)).assign(Tensor.ones(2, 3, device=device)).realize()
    np.testing.assert_array_equal(t.numpy(), np.r_[np.ones((2, 3)), np.zeros((3, 3))])
