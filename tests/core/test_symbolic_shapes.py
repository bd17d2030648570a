"""Symbolic sizes: a Variable bound in a shape; every value runs the same compiled kernels."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import GlobalCounters, Tensor
from fusegrad.errors import ShapeError
from fusegrad.uop.ops import Variable

LENGTHS = (3, 7, 16)


def _check_each_length(device, build, reference, var_max=16, cols=8):
    """Run ``build`` on inputs of each length; results match ``reference``, and lengths after
    the first compile nothing."""
    seq = Variable("seq", 1, var_max)
    rng = np.random.default_rng(0)
    compiles = []
    for n in LENGTHS:
        a = rng.standard_normal((n, cols)).astype(np.float32)
        x = Tensor(a, device=device).reshape(seq.bind(n), cols)
        before = GlobalCounters.compiles
        out = build(x).numpy()
        compiles.append(GlobalCounters.compiles - before)
        np.testing.assert_allclose(out, reference(a), rtol=1e-5, atol=1e-5)
    assert compiles[1:] == [0] * (len(LENGTHS) - 1), compiles


def test_elementwise(device):
    _check_each_length(device, lambda x: (x * 2 + 1).relu(), lambda a: np.maximum(a * 2 + 1, 0))


def test_sum_along_the_variable_axis(device):
    _check_each_length(device, lambda x: x.sum(0), lambda a: a.sum(0))


def test_sum_along_a_fixed_axis(device):
    _check_each_length(device, lambda x: x.sum(1), lambda a: a.sum(1))


def test_softmax_over_a_fixed_axis(device):
    def ref(a):
        e = np.exp(a - a.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    _check_each_length(device, lambda x: x.softmax(1), ref)


def test_softmax_over_the_variable_axis(device):
    def ref(a):
        e = np.exp(a - a.max(0, keepdims=True))
        return e / e.sum(0, keepdims=True)

    _check_each_length(device, lambda x: x.softmax(0), ref)


def test_mean_divides_by_the_bound_length(device):
    _check_each_length(device, lambda x: x.mean(0), lambda a: a.mean(0))


def test_matmul_with_the_variable_as_rows_and_as_the_inner_size(device):
    w = np.random.default_rng(1).standard_normal((8, 5)).astype(np.float32)
    wt = Tensor(w, device=device)
    _check_each_length(device, lambda x: x @ wt, lambda a: a @ w)
    _check_each_length(device, lambda x: x.T @ x, lambda a: a.T @ a)


def test_transpose_and_reshape_with_fixed_sizes(device):
    _check_each_length(
        device,
        lambda x: x.T.reshape(2, 4, x.shape[0]).sum(1),
        lambda a: a.T.reshape(2, 4, -1).sum(1),
    )


def test_the_shape_shows_the_bound_value():
    seq = Variable("seq", 1, 10)
    x = Tensor.ones(4, 3).reshape(seq.bind(4), 3)
    assert repr(x.shape) == "(seq=4, 3)"
    assert x.numpy().shape == (4, 3)


def test_a_value_outside_the_bounds_is_refused():
    seq = Variable("seq", 1, 10)
    with pytest.raises(ValueError, match=r"seq.*\[1, 10\].*11"):
        seq.bind(11)


def test_a_reshape_with_the_wrong_count_is_refused():
    seq = Variable("seq", 1, 10)
    with pytest.raises(ShapeError, match="12 elements"):
        Tensor.ones(4, 3).reshape(seq.bind(5), 3)


def test_an_unbound_variable_in_a_shape_is_refused():
    seq = Variable("seq", 1, 10)
    with pytest.raises(ValueError, match="bind it"):
        Tensor.ones(4, 3).reshape(seq, 3)


def test_bad_bounds_and_names_are_refused():
    with pytest.raises(ValueError, match="lo <= hi"):
        Variable("n", 5, 2)
    with pytest.raises(ValueError, match="identifier"):
        Variable("two words", 1, 2)


def test_pad_flip_cat_and_shrink(device):
    _check_each_length(
        device,
        lambda x: x.pad(((1, 2), (0, 1))).flip(0),
        lambda a: np.pad(a, ((1, 2), (0, 1)))[::-1],
    )
    _check_each_length(
        device, lambda x: x.cat(x * 2, dim=1), lambda a: np.concatenate([a, a * 2], 1)
    )
    _check_each_length(device, lambda x: x.shrink(((1, 3), None)) + 1, lambda a: a[1:3] + 1)


def test_gradients_through_a_variable_length(device):
    w0 = np.random.default_rng(2).standard_normal((8, 3)).astype(np.float32)
    w = Tensor(w0, device=device, requires_grad=True)

    def grad_of_w(x):
        w.grad = None
        (x @ w).relu().mean().backward()
        return w.grad

    _check_each_length(
        device, grad_of_w, lambda a: a.T @ ((a @ w0) > 0).astype(np.float32) / (a.shape[0] * 3)
    )


def test_indexing_a_symbolic_tensor_is_refused_with_the_way_out():
    seq = Variable("seq", 1, 10)
    with pytest.raises(ShapeError, match="use shrink"):
        Tensor.ones(4, 3).reshape(seq.bind(4), 3)[1:]


def test_a_variable_prefix_of_a_larger_buffer(device):
    """The other way to bind: keep one buffer of the largest length, use its first ``seq`` rows."""
    seq = Variable("seq", 1, 16)
    cache = np.random.default_rng(3).standard_normal((16, 4)).astype(np.float32)
    full = Tensor(cache, device=device).realize()
    before = None
    for n in LENGTHS:
        out = full.shrink(((0, seq.bind(n)), None)).sum(0).numpy()
        np.testing.assert_allclose(out, cache[:n].sum(0), rtol=1e-5, atol=1e-5)
        if before is None:
            before = GlobalCounters.compiles
    assert GlobalCounters.compiles == before


def test_a_prefix_of_a_buffer_adds_to_a_tensor_bound_to_the_same_length(device):
    """``full[:seq]`` has size ``seq`` (not ``seq - 0``): it meets a tensor reshaped to ``seq``
    (a KV cache's first rows and the step's new ones)."""
    seq = Variable("seq", 1, 16)
    cache = np.random.default_rng(4).standard_normal((16, 4)).astype(np.float32)
    full = Tensor(cache, device=device).realize()
    for n in LENGTHS:
        bound = seq.bind(n)
        prefix = full.shrink(((0, bound), None))
        assert prefix.shape[0] is bound
        new = Tensor(np.ones((n, 4), np.float32), device=device).reshape(bound, 4)
        np.testing.assert_allclose((prefix + new).sum(0).numpy(), (cache[:n] + 1).sum(0), 1e-5)


def test_beam_leaves_a_kernel_over_a_variable_as_it_is():
    from fusegrad import context

    with context(BEAM=2):
        _check_each_length(
            "CPU",
            lambda x: x.softmax(0),
            lambda a: np.exp(a - a.max(0)) / np.exp(a - a.max(0)).sum(0),
        )
