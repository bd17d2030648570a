"""``Tensor.matmul`` builds its graph node by node in the common case (``_plain_matmul``); that
graph must be exactly the one the general path (unsqueeze, transpose, broadcast, multiply,
sum) builds, so that every layout rule, kernel cache entry and gradient sees the same nodes."""

import numpy as np
import pytest

from fusegrad import Tensor, dtypes
from fusegrad.tensor.tensor import _plain_matmul

SHAPES = [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (4, 5)),
    ((3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 6)),
    ((4, 4, 8, 16), (4, 4, 16, 8)),
    ((1, 3, 4), (2, 4, 3)),
    ((0, 4), (4, 3)),
    ((3, 0), (0, 2)),
]


def general(x: Tensor, w: Tensor) -> Tensor:
    return (x.unsqueeze(-2) * w.transpose(-1, -2).unsqueeze(-3)).sum(-1, dtype=x.dtype)


@pytest.mark.parametrize("xs,ws", SHAPES)
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32])
def test_same_nodes_as_the_general_path(xs, ws, dtype):
    x, w = Tensor.ones(*xs, dtype=dtype), Tensor.ones(*ws, dtype=dtype)
    fast = _plain_matmul(x, w)
    assert fast is not None
    assert fast.uop is general(x, w).uop
    np.testing.assert_array_equal(fast.numpy(), np.ones(xs, "f4") @ np.ones(ws, "f4"))


def test_other_cases_take_the_general_path():
    f, i = Tensor.ones(2, 3), Tensor.ones(3, 2, dtype=dtypes.int32)
    assert _plain_matmul(f, i) is None  # promotion
    b = Tensor.ones(2, 3, dtype=dtypes.bool)
    assert _plain_matmul(b, b.T) is None  # a bool product counts as int


def test_gradient_through_the_fast_path():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3, 4), np.float32), rng.standard_normal((4, 5), np.float32)
    x, w = Tensor(a, requires_grad=True), Tensor(b, requires_grad=True)
    (x @ w).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.ones((2, 3, 5)) @ b.T, rtol=1e-5)
    np.testing.assert_allclose(
        w.grad.numpy(), np.einsum("bij->ij", a).T @ np.ones((3, 5)), rtol=1e-5
    )


@pytest.mark.parametrize("xs,ws", [((1, 3, 4), (2, 4, 1)), ((3, 1), (1, 5))])
def test_a_transpose_of_a_column_or_row_takes_the_general_path(xs, ws):
    """Transposing a (k, 1) or (1, m) weight moves only an axis of 1, which ``Tensor`` makes a
    reshape (``Tensor._permuted``): the fast path, whose node is a permute, steps aside."""
    x, w = Tensor.ones(*xs), Tensor.ones(*ws)
    assert _plain_matmul(x, w) is None
    np.testing.assert_array_equal((x @ w).numpy(), np.ones(xs, "f4") @ np.ones(ws, "f4"))


BROADCASTS = [
    ((4, 3), (1,)),
    ((4, 3), ()),
    ((3,), (2, 4, 3)),
    ((2, 1, 3), (5, 1)),
    ((0, 3), (1, 3)),
    ((3,), (1, 3)),  # (leading 1s only: a reshape, no expand)
    ((4, 3), (1, 1, 4, 3)),
]


@pytest.mark.parametrize("xs,ys", BROADCASTS)
@pytest.mark.parametrize(
    "dtypes_", [(dtypes.float32, dtypes.float32), (dtypes.int32, dtypes.float32)]
)
def test_binary_ops_broadcast_with_the_nodes_expand_makes(xs, ys, dtypes_):
    """A binary op's operands are broadcast without re-checking the shape ``broadcast_shapes``
    gave (``Tensor._broadcast_checked``): the same nodes as ``expand``'s, so plans and kernels
    are shared with graphs built either way."""
    x, y = Tensor.ones(*xs, dtype=dtypes_[0]), Tensor.full(ys, 2, dtype=dtypes_[1])
    shape = np.broadcast_shapes(xs, ys)
    a, b = x._operands(y)
    dtype = b.dtype
    assert a.uop is x.cast(dtype).expand(shape).uop
    assert b.uop is y.cast(dtype).expand(shape).uop
    c, _, _ = (x > 0).where(x, y).uop.src
    assert c is (x > 0).expand(shape).uop
    np.testing.assert_array_equal((x * y).numpy(), np.ones(xs) * np.full(ys, 2))
