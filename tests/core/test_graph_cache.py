"""The caches that make building a training step's graph cheap give the graphs the plain
construction gives (uop.ops.broadcast_scalar, tensor/nn_ops.py _pool's replayed movement ops)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fusegrad import Tensor, dtypes
from fusegrad.uop import ops as ops_module
from fusegrad.uop.ops import Ops, UOp, broadcast_scalar


def _plain_scalar(value, dtype, shape):
    node = UOp.const(dtype, value)
    if shape:
        node = UOp(Ops.EXPAND, dtype, (UOp(Ops.RESHAPE, dtype, (node,), (1,) * len(shape)),), shape)
    return node


@pytest.mark.parametrize(
    "value, dtype", [(2.0, dtypes.float32), (3, dtypes.int32), (True, dtypes.bool)]
)
def test_scalar_operand_is_a_broadcast_constant(value, dtype):
    t = Tensor(np.ones((2, 3)), dtype=dtype)
    a, b = t._operands(value)
    assert a is t and b.uop is _plain_scalar(value, dtype, (2, 3))
    b2, a2 = t._operands(value, reverse=True)
    assert a2 is t and b2.uop is b.uop


def test_scalar_cache_keeps_equal_but_different_constants_apart():
    shape = (4,)
    assert broadcast_scalar(0.0, dtypes.float32, shape) is not broadcast_scalar(
        -0.0, dtypes.float32, shape
    )
    assert broadcast_scalar(1, dtypes.float32, shape) is broadcast_scalar(
        1.0, dtypes.float32, shape
    )  # both 1.0f
    assert broadcast_scalar(1, dtypes.int32, shape) is not broadcast_scalar(
        1, dtypes.float32, shape
    )
    nan = broadcast_scalar(math.nan, dtypes.float32, shape)
    assert nan is broadcast_scalar(math.nan, dtypes.float32, shape)
    assert broadcast_scalar(5.0, dtypes.float32, ()) is UOp.const(dtypes.float32, 5.0)
    assert broadcast_scalar(5.0, dtypes.float32, (1, 1)).op is Ops.RESHAPE  # nothing to expand


def test_scalar_results_match_numpy():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = Tensor(x)
    np.testing.assert_allclose((2.0 - t * 0.5 + 1).numpy(), 2.0 - x * 0.5 + 1)
    np.testing.assert_allclose((1.0 / (t + 1)).numpy(), 1.0 / (x + 1), rtol=1e-6)
    assert (t.int() + 1.5).dtype == dtypes.float32  # an int tensor and a float scalar: float


def test_scalar_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(ops_module, "_SCALARS_LIMIT", 8)
    monkeypatch.setattr(ops_module, "_SCALARS", {})
    for i in range(50):
        broadcast_scalar(float(i), dtypes.float32, (3,))
    assert len(ops_module._SCALARS) <= 8


@pytest.mark.parametrize(
    "shape, kernel, stride, dilation",
    [
        ((2, 3, 12, 12), (5, 5), (1, 1), (1, 1)),
        ((2, 3, 12, 12), (2, 2), (2, 2), (1, 1)),  # windows that tile the axis
        ((2, 3, 11, 13), (3, 2), (2, 3), (2, 1)),
        ((2, 4, 9), (3,), (1,), (2,)),
    ],
)
def test_pool_replays_the_movement_ops_it_would_build(shape, kernel, stride, dilation):
    x = Tensor.rand(*shape)
    first = x._pool(kernel, stride, dilation)
    assert first.uop is x._pool_windows(kernel, stride, dilation).uop
    assert x._pool(kernel, stride, dilation).uop is first.uop  # (from the cache)
    y = Tensor.rand(*shape)
    assert y._pool(kernel, stride, dilation).uop is y._pool_windows(kernel, stride, dilation).uop
