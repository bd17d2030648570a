"""Movement ops, fusion and reductions: the kernels the scheduler makes, run on the device.

Kernel counts are the scheduler's, so they must equal the oracle's for the same graph; values
must equal the oracle's too. Movement ops are index arithmetic in the kernel, so each one here
also checks the device's integer ops on indices.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from fusegrad.device import Device
from fusegrad.dtype import DType, dtypes
from fusegrad.engine.realize import GlobalCounters
from fusegrad.tensor import Tensor
from fusegrad.testing.oracle import ORACLE, against_oracle, make, random_array, require_dtypes

f32 = dtypes.float32

MOVEMENT: dict[str, Callable[[Tensor], Tensor]] = {
    "reshape": lambda x: x.reshape(6, 10) + 1,
    "permute": lambda x: x.permute(1, 0) * 2,
    "expand": lambda x: x[:, None, :].expand(4, 3, 15) + 0,
    "pad": lambda x: x.pad(((1, 2), (0, 3))) + 1,
    "shrink": lambda x: x[1:3, 2:13] + 1,
    "flip": lambda x: x.flip(0).flip(1) + 1,
    "step_slice": lambda x: x[::-2, 1::3] + 1,
    "chain": lambda x: x.reshape(2, 2, 15).permute(2, 0, 1).flip(1)[3:9].reshape(6, 4) * 3,
    "pad_then_reduce": lambda x: x.pad(((2, 0), (1, 1))).sum(0),
    "transpose_matmul": lambda x: x.T @ x,
}


@pytest.mark.parametrize("name", MOVEMENT)
def test_movement(conformance_device, name: str):
    x = random_array(f32, (4, 15), -3, 3, key=name)
    against_oracle(conformance_device, MOVEMENT[name], [x], [f32])


def softmax(x: Tensor) -> Tensor:
    e = (x - x.max(1, keepdim=True)).exp()
    return e / e.sum(1, keepdim=True)


FUSION: dict[str, Callable[[Tensor, Tensor], Tensor]] = {
    "elementwise_chain": lambda x, w: ((x * 2 + 1).exp2() - x).sqrt(),
    "linear_relu": lambda x, w: (x @ w + 1).relu(),
    "reduce_then_elementwise": lambda x, w: ((x + 1).sum() * 2).sin(),
    "reduce_through_expand": lambda x, w: x.sum(1, keepdim=True).expand(4, 4) * x,
    "reduce_used_twice": lambda x, w: x.sum(0) * x.sum(0).exp(),
    "contiguous_then_more": lambda x, w: (x + 1).contiguous() * 2,
    "softmax": lambda x, w: softmax(x),
    "two_layers": lambda x, w: (x @ w).relu() @ w.T,
    "softmax_of_matmul": lambda x, w: softmax(x @ w),
}


@pytest.mark.parametrize("name", FUSION)
def test_fusion(conformance_device, name: str):
    """The same graph makes as many kernels on the device as on the oracle (fewer where the
    device runs loops: its row kernels keep a softmax's reductions, schedule/kernelize.py), and
    the device launches exactly the kernels its schedule has."""
    build = FUSION[name]
    arrays = [random_array(f32, (4, 4), -2, 2, key=name), random_array(f32, (4, 3), -2, 2, key=1)]
    inputs = {d: [make(a, f32, d) for a in arrays] for d in (conformance_device, ORACLE)}
    oracle = len(build(*inputs[ORACLE]).schedule())
    out = build(*inputs[conformance_device])
    expected = len(out.schedule())
    loops = Device[conformance_device].renderer.grid_dims is None
    assert expected <= oracle if loops else expected == oracle
    GlobalCounters.reset()
    out.realize()
    assert GlobalCounters.kernel_count == expected
    against_oracle(conformance_device, build, arrays, [f32, f32])


REDUCE_DTYPES = [dtypes.float32, dtypes.int32, dtypes.float16, dtypes.int64, dtypes.uint8]
REDUCTIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "sum_all": lambda x: x.sum(),
    "sum_rows": lambda x: x.sum(1),
    "sum_cols_keepdim": lambda x: x.sum(0, keepdim=True),
    "max_all": lambda x: x.max(),
    "max_rows": lambda x: x.max(1),
    "min_cols": lambda x: x.min(0),
    "sum_of_square": lambda x: (x * x).sum(1),
}


@pytest.mark.parametrize("name", REDUCTIONS)
@pytest.mark.parametrize("dtype", REDUCE_DTYPES, ids=[d.name for d in REDUCE_DTYPES])
def test_reduce(conformance_device, name: str, dtype: DType):
    require_dtypes(conformance_device, dtype)
    x = random_array(dtype, (9, 37), -4 if dtype.is_float else 0, 4, key=name)
    against_oracle(conformance_device, REDUCTIONS[name], [x], [dtype])


@pytest.mark.parametrize("size", [1, 2, 7, 255, 256, 257, 4097, 100_003])
def test_reduce_length(conformance_device, size: int):
    """One long reduction: every element counted once, whatever the device splits it into."""
    x = random_array(dtypes.int32, (size,), 0, 3, key=size)
    got = make(x, dtypes.int32, conformance_device).sum().item()
    assert got == int(x.sum())
    against_oracle(conformance_device, lambda t: t.max(), [x], [dtypes.int32])


@pytest.mark.parametrize("shape, axis", [((0,), 0), ((3, 0), 1), ((0, 4), 0)])
def test_empty_reduce(conformance_device, shape: tuple[int, ...], axis: int):
    """Reducing nothing gives the identity: 0 for sum."""
    got = Tensor(np.zeros(shape, np.float32), device=conformance_device).sum(axis)
    np.testing.assert_array_equal(got.numpy(), np.zeros(got.shape, np.float32))
