"""Tensors with a size-0 axis: PyTorch's values, and no kernel for a value with no elements.

The scheduler (schedule/kernelize.py ``fold_empty``) gives an empty value an empty buffer and
no kernel, folds a reduce over an empty axis to its identity and a pad of an empty source to
its padding; max, min and argmax over an empty axis are refused, as PyTorch refuses them.
"""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import GlobalCounters, Tensor
from fusegrad.errors import ShapeError
from tests.core.torch_helpers import rand, torch

pytestmark = pytest.mark.filterwarnings("ignore:.*degrees of freedom:UserWarning")


def a(*shape: int) -> np.ndarray:
    return rand(shape)


#: (name, inputs, fusegrad's program, torch's program); each output has a size-0 axis
EMPTY_OUTPUTS = [
    (
        "cat dim 0",
        [a(4, 0, 3), a(4, 0, 3)],
        lambda x, y: x.cat(y, dim=0),
        lambda x, y: torch.cat([x, y], 0),
    ),
    (
        "cat dim 0, big",
        [a(45, 0, 9), a(45, 0, 9)],
        lambda x, y: x.cat(y, dim=0),
        lambda x, y: torch.cat([x, y], 0),
    ),
    ("stack", [a(4, 0, 3), a(4, 0, 3)], lambda x, y: x.stack(y), lambda x, y: torch.stack([x, y])),
    (
        "pad",
        [a(4, 0, 3)],
        lambda x: x.pad(((1, 1), None, None)),
        lambda x: torch.nn.functional.pad(x, (0, 0, 0, 0, 1, 1)),
    ),
    ("roll dim 0", [a(4, 0, 3)], lambda x: x.roll(1, 0), lambda x: torch.roll(x, 1, 0)),
    ("roll empty dim", [a(0, 3)], lambda x: x.roll(2, 0), lambda x: torch.roll(x, 2, 0)),
    ("tril", [a(0, 3)], lambda x: x.tril(), torch.tril),
    ("triu", [a(3, 0)], lambda x: x.triu(), torch.triu),
    ("triu batched", [a(0, 3, 3)], lambda x: x.triu(1), lambda x: torch.triu(x, 1)),
    ("cumsum along", [a(3, 0)], lambda x: x.cumsum(1), lambda x: torch.cumsum(x, 1)),
    ("cumsum across", [a(0, 3)], lambda x: x.cumsum(1), lambda x: torch.cumsum(x, 1)),
    (
        "where",
        [a(0, 3), a(0, 3)],
        lambda x, y: (x > 0).where(x, y),
        lambda x, y: torch.where(x > 0, x, y),
    ),
    ("std over a kept empty axis", [a(0, 4)], lambda x: x.std(1), lambda x: x.std(1)),
    ("max over a kept empty axis", [a(0, 4)], lambda x: x.max(1), lambda x: x.amax(1)),
    ("matmul m=0", [a(0, 5), a(5, 4)], lambda x, y: x @ y, lambda x, y: x @ y),
    ("softmax", [a(3, 0)], lambda x: x.softmax(1), lambda x: x.softmax(1)),
    ("elementwise", [a(2, 0, 5)], lambda x: (x * 2).exp() + 1, lambda x: (x * 2).exp() + 1),
    ("expand to 0", [a(3, 1)], lambda x: x.expand(3, 0), lambda x: x.expand(3, 0)),
    ("shrink to 0", [a(3, 4)], lambda x: x[:, 2:2], lambda x: x[:, 2:2]),
]


@pytest.mark.parametrize(
    "name, inputs, ours, theirs", EMPTY_OUTPUTS, ids=[c[0] for c in EMPTY_OUTPUTS]
)
def test_an_empty_result_has_torchs_shape_and_launches_no_kernel(
    device, name, inputs, ours, theirs
):
    xs = [Tensor(x, device=device).realize() for x in inputs]
    GlobalCounters.reset()
    out = ours(*xs).realize()
    assert GlobalCounters.kernel_count == 0
    want = theirs(*map(torch.from_numpy, inputs))
    assert out.shape == tuple(want.shape) and out.numpy().shape == tuple(want.shape)


#: (name, inputs, fusegrad's program, torch's program); outputs with elements, from empty inputs
VALUES_FROM_EMPTY = [
    ("sum over an empty axis", [a(4, 0)], lambda x: x.sum(1), lambda x: x.sum(1)),
    ("sum of everything", [a(4, 0)], lambda x: x.sum(), lambda x: x.sum()),
    (
        "int sum",
        [np.zeros((3, 0), np.int32)],
        lambda x: x.sum(1),
        lambda x: x.sum(1, dtype=torch.int32),
    ),
    ("prod", [a(4, 0)], lambda x: x.prod(1), lambda x: x.prod(1)),
    ("mean", [a(4, 0)], lambda x: x.mean(1), lambda x: x.mean(1)),
    ("mean of everything", [a(0)], lambda x: x.mean(), lambda x: x.mean()),
    ("var", [a(4, 0)], lambda x: x.var(1), lambda x: x.var(1)),
    ("std", [a(4, 0)], lambda x: x.std(1), lambda x: x.std(1)),
    ("var of everything", [a(0)], lambda x: x.var(), lambda x: x.var()),
    ("matmul k=0", [a(3, 0), a(0, 4)], lambda x, y: x @ y, lambda x, y: x @ y),
    ("batched matmul k=0", [a(2, 3, 0), a(2, 0, 4)], lambda x, y: x @ y, lambda x, y: x @ y),
    (
        "pad an empty axis",
        [a(2, 0)],
        lambda x: x.pad((None, (1, 1))),
        lambda x: torch.nn.functional.pad(x, (1, 1)),
    ),
    (
        "pad with a value",
        [a(2, 0)],
        lambda x: x.pad((None, (1, 2)), value=7.0),
        lambda x: torch.nn.functional.pad(x, (1, 2), value=7.0),
    ),
    (
        "cat an empty part",
        [a(4, 0, 3), a(4, 2, 3)],
        lambda x, y: x.cat(y, dim=1),
        lambda x, y: torch.cat([x, y], 1),
    ),
    ("logsumexp", [a(3, 0)], lambda x: x.logsumexp(1), lambda x: x.logsumexp(1)),
    ("sum of a shrink to 0", [a(3, 4)], lambda x: x[:, 2:2].sum(1), lambda x: x[:, 2:2].sum(1)),
]


@pytest.mark.parametrize(
    "name, inputs, ours, theirs", VALUES_FROM_EMPTY, ids=[c[0] for c in VALUES_FROM_EMPTY]
)
def test_a_result_computed_from_an_empty_input_has_torchs_values(
    device, name, inputs, ours, theirs
):
    xs = [Tensor(x, device=device).realize() for x in inputs]
    got = ours(*xs).numpy()
    want = theirs(*map(torch.from_numpy, inputs)).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("reduce", ["max", "min", "argmax", "argmin"])
def test_a_reduction_without_identity_over_an_empty_axis_is_refused(device, reduce):
    x = Tensor(a(3, 0), device=device)
    with pytest.raises(IndexError, match=f"{reduce}\\(\\): Expected reduction dim 1"):
        getattr(torch.from_numpy(a(3, 0)), reduce)(1)  # PyTorch refuses it too
    with pytest.raises(
        ShapeError, match=rf"{reduce}\(\) over axis 1 of shape \(3, 0\) has no elements"
    ):
        getattr(x, reduce)(1)
    with pytest.raises(ShapeError, match=rf"{reduce}\(\) over .*has no elements"):
        getattr(x, reduce)()


def test_an_empty_buffer_feeds_the_next_realize(device):
    """An empty realized tensor is an input like any other: its sum is a kernel storing 0."""
    x = (
        Tensor.rand(4, 0, 3, device=device)
        .cat(Tensor.rand(4, 0, 3, device=device), dim=0)
        .realize()
    )
    assert x.shape == (8, 0, 3) and x.numpy().shape == (8, 0, 3)
    np.testing.assert_array_equal(x.sum((1, 2)).numpy(), np.zeros(8, np.float32))


def test_the_gradient_through_an_empty_sum_is_empty(device):
    x = Tensor(a(3, 0), device=device, requires_grad=True)
    x.sum().backward()
    assert x.grad.shape == (3, 0) and x.grad.numpy().shape == (3, 0)
