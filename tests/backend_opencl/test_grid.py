"""Grid kernels on a real OpenCL device: work-groups for elementwise kernels and grouped
reductions (core's codegen/grid.py), against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor, dtypes
from fusegrad.codegen.kernel import generate
from fusegrad.device import Device
from fusegrad.schedule.kernelize import KernelStep

RNG = np.random.default_rng(7)


def on_device(x: np.ndarray) -> Tensor:
    return Tensor(x, device="OPENCL")


def kernels(t: Tensor):
    """The generated kernels that compute ``t`` on OPENCL."""
    renderer = Device["OPENCL"].renderer
    return [generate(s.ast, renderer) for s in t.schedule() if isinstance(s, KernelStep)]


@pytest.mark.parametrize("n", [1 << 20, 1000003, 255, 64])
def test_full_sum_of_floats(cl_device, n):
    """Against float64: a float32 sum of n normal values is off by about eps * sqrt(n) (its own
    values, so that the order tests run in does not pick harder ones: 1e-4 failed a run by 1e-3)."""
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    want = x.astype(np.float64).sum()
    atol = 1e-4 * max(1.0, (n / 1000) ** 0.5)
    np.testing.assert_allclose(on_device(x).sum().numpy(), want, rtol=1e-5, atol=atol)


@pytest.mark.parametrize("n", [1 << 20, 1000003])
def test_full_sum_and_max_of_ints(cl_device, n):
    x = RNG.integers(-1000, 1000, n).astype(np.int32)
    assert on_device(x).sum().numpy() == x.sum()
    assert on_device(x).max().numpy() == x.max()


def test_max_of_floats_below_zero(cl_device):
    """Threads past the end contribute the identity (-inf), not 0."""
    x = -RNG.random(1000003).astype(np.float32) - 1
    assert on_device(x).max().numpy() == x.max()


@pytest.mark.parametrize("axis", [0, 1])
def test_mean_over_each_axis(cl_device, axis):
    x = RNG.standard_normal((1000, 1000)).astype(np.float32)
    np.testing.assert_allclose(on_device(x).mean(axis).numpy(), x.mean(axis), rtol=1e-4, atol=1e-6)


def test_softmax_rows(cl_device):
    x = RNG.standard_normal((37, 3001)).astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(on_device(x).softmax(-1).numpy(), want, rtol=1e-4, atol=1e-9)


def test_matmul(cl_device):
    a = RNG.standard_normal((65, 300)).astype(np.float32)
    b = RNG.standard_normal((300, 7)).astype(np.float32)
    np.testing.assert_allclose((on_device(a) @ on_device(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_with_a_long_inner_axis(cl_device):
    """Few outputs, each a dot product of 20000: a group per output."""
    a = RNG.standard_normal((3, 20000)).astype(np.float32)
    b = RNG.standard_normal((20000, 2)).astype(np.float32)
    (kernel,) = kernels(on_device(a) @ on_device(b))
    assert kernel.local_size == (256,) and kernel.global_size == (6 * 256,)
    np.testing.assert_allclose((on_device(a) @ on_device(b)).numpy(), a @ b, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("n", [1000003, 7, 256])
def test_elementwise_of_odd_size_runs_in_work_groups(cl_device, n):
    x = RNG.standard_normal(n).astype(np.float32)
    (kernel,) = kernels(on_device(x) * 3 + 1)
    assert kernel.global_size == (n,) and kernel.local_size == (min(n, 256),)
    np.testing.assert_allclose((on_device(x) * 3 + 1).numpy(), x * 3 + 1, rtol=1e-6)


def test_a_long_reduction_uses_local_memory_and_a_barrier(cl_device):
    """A sum of 2**20 is cut in 64 parts (tensor.py), each part a work-group of 256."""
    parts, total = kernels(on_device(RNG.random(1 << 20).astype(np.float32)).sum())
    text = parts.source
    assert "__local float shared0[256];" in text and "barrier(CLK_LOCAL_MEM_FENCE);" in text
    assert "get_local_id(0)" in text and "get_group_id(0)" in text and "return;" not in text
    assert parts.local_size == (256,) and parts.global_size == (64 * 256,)
    assert total.local_size == (16,) and total.global_size == (16,)


def test_a_short_reduction_with_many_outputs_runs_tiled(cl_device):
    """A matmul of 64x64 outputs, 64 each: tiles of outputs (codegen/tiled.py, see
    test_tiled.py), a register block per work-item, no barrier."""
    a = on_device(np.ones((64, 64), np.float32))
    (kernel,) = kernels(a @ a)
    assert "barrier" not in kernel.source and "get_local_id(0)" in kernel.source
    assert "uidx" in kernel.source  # the register block's loops


def test_float16_sum_when_the_device_has_it(cl_device):
    if dtypes.float16 not in Device["OPENCL"].renderer.supported_dtypes:
        pytest.skip("the OpenCL device has no cl_khr_fp16")
    x = RNG.random(5000).astype(np.float16)
    np.testing.assert_allclose(on_device(x).sum().numpy(), x.astype(np.float64).sum(), rtol=2e-2)


@pytest.mark.parametrize("shape", [(5000, 64), (999, 6), (3001, 40)])
def test_columns_reduce_in_blocks_of_neighbouring_outputs(cl_device, shape):
    x = RNG.integers(-50, 50, shape).astype(np.int32)
    (kernel,) = kernels(on_device(x).sum(0))
    assert "barrier(CLK_LOCAL_MEM_FENCE);" in kernel.source
    np.testing.assert_array_equal(on_device(x).sum(0).numpy(), x.sum(0))
    np.testing.assert_array_equal(on_device(x).max(0).numpy(), x.max(0))


@pytest.mark.parametrize("n", [64, 1000])
def test_two_sums_of_one_output_combine_in_one_group(cl_device, n):
    """A masked mean (a loss's sum over the counted rows / their count): two grouped sums in one
    kernel. The second combine loop reads the thread's clamped index that the first one placed:
    it must sit outside the first loop (once it sat inside it and the kernel failed to build)."""
    x = RNG.standard_normal(n).astype(np.float32)
    keep = RNG.integers(0, 2, n).astype(np.float32)
    got = (on_device(x) * on_device(keep)).sum() / on_device(keep).sum()
    (kernel,) = kernels(got)
    assert kernel.source.count("for (") == 4  # each sum: a share loop, then a combine loop
    np.testing.assert_allclose(got.numpy(), (x * keep).sum() / keep.sum(), rtol=1e-5)
