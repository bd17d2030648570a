"""Attention as one kernel with online softmax (schedule/online_softmax.py,
codegen/online_softmax.py): values against torch, the kernels it takes, and that no T x T
buffer is written on a device that runs loops; grid devices keep today's kernels."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import fusegrad.engine.realize as engine
from fusegrad import GlobalCounters, Tensor
from fusegrad.device import Device

F = torch.nn.functional


def _qkv(shape: tuple[int, ...], device: str = "CPU", seed: int = 0):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    return [Tensor(a, device=device).realize() for a in arrays], [torch.tensor(a) for a in arrays]


def _masks(kind: str, t: int, heads: int):
    """(fusegrad kwargs, torch kwargs) for a mask ``kind``."""
    rng = np.random.default_rng(1)
    if kind == "causal":
        return {"is_causal": True}, {"is_causal": True}
    if kind == "bool":
        m = rng.random((t, t)) > 0.3
        m[:, 0] = True  # (every query sees a key: an all-masked row is NaN, tested apart)
        return {"attn_mask": Tensor(m, device="CPU")}, {"attn_mask": torch.tensor(m)}
    if kind == "float":
        m = rng.standard_normal((1, heads, t, t)).astype(np.float32)
        return {"attn_mask": Tensor(m, device="CPU")}, {"attn_mask": torch.tensor(m)}
    return {}, {}


def _slot_sizes(out: Tensor) -> list[int]:
    """The element counts of the buffers realizing ``out`` would allocate."""
    plan = engine.plan_for([out.uop], [out.device])
    return [size for size, _, _ in plan.new_slots]


@pytest.mark.parametrize(
    "shape", [(2, 4, 128, 64), (1, 2, 257, 32), (1, 1, 5, 3)], ids=lambda s: "x".join(map(str, s))
)
@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_attention_matches_torch_in_one_kernel(shape, mask):
    (q, k, v), (tq, tk, tv) = _qkv(shape)
    ours, theirs = _masks(mask, shape[2], shape[1])
    out = q.scaled_dot_product_attention(k, v, **ours)
    b, h, t, _ = shape
    assert max(_slot_sizes(out)) < b * h * t * t  # no buffer of scores
    assert len(out.schedule()) <= 2  # the attention (and at most a copy of k in panels)
    expected = F.scaled_dot_product_attention(tq, tk, tv, **theirs).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=2e-5)


def test_no_buffer_holds_the_scores_for_long_sequences():
    """The forward of (1, 4, 1024, 64) allocates nothing of 1024 x 1024 elements: before, the
    scores, then each softmax step, were buffers of 4 * 1024 * 1024 floats."""
    (q, k, v), _ = _qkv((1, 4, 1024, 64))
    out = q.scaled_dot_product_attention(k, v, is_causal=True)
    sizes = _slot_sizes(out)
    assert max(sizes) <= 4 * 1024 * 64, sizes
    GlobalCounters.reset()
    out.realize()
    assert GlobalCounters.kernel_count <= 2  # (the attention, and at most a copy of k in panels)


def test_kernel_count_and_values_of_a_plain_softmax_weighted_sum():
    """Any ``softmax(x) @ v`` over the last axis runs online, not only attention's."""
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((6, 9)).astype(np.float32), rng.standard_normal((9, 5))
    out = Tensor(x).softmax(-1) @ Tensor(w.astype(np.float32))
    assert len(out.schedule()) == 1
    expected = torch.softmax(torch.tensor(x), -1) @ torch.tensor(w.astype(np.float32))
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_an_all_masked_row_is_nan_as_before():
    """A query that may see no key has softmax 0/0: NaN, in the online form too."""
    (q, k, v), _ = _qkv((1, 1, 4, 8))
    m = np.ones((4, 4), dtype=bool)
    m[2] = False
    out = q.scaled_dot_product_attention(k, v, attn_mask=Tensor(m)).numpy()
    assert np.isnan(out[0, 0, 2]).all() and not np.isnan(np.delete(out, 2, axis=2)).any()


def test_large_scores_do_not_overflow():
    """The running max keeps every exp at most 1, however large the scores."""
    (q, k, v), (tq, tk, tv) = _qkv((1, 2, 40, 16))
    out = (q * 30).scaled_dot_product_attention(k, v, is_causal=True)
    expected = F.scaled_dot_product_attention(tq * 30, tk, tv, is_causal=True)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)


def test_a_float_mask_of_minus_infinity_and_huge_negatives():
    """Keys masked with -inf before keys masked with -1e30: the running max goes from -inf to
    -1e30, and the sums so far (zeros) must not become 0 * inf."""
    (q, k, v), (tq, tk, tv) = _qkv((1, 1, 6, 4))
    m = np.zeros((6, 6), dtype=np.float32)
    m[:, :2], m[:, 2:4] = -np.inf, -1e30
    out = q.scaled_dot_product_attention(k, v, attn_mask=Tensor(m)).numpy()
    expected = F.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.tensor(m)).numpy()
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_grouped_query_attention_and_a_scale():
    rng = np.random.default_rng(3)
    qa = rng.standard_normal((1, 4, 17, 8)).astype(np.float32)
    ka, va = (rng.standard_normal((1, 2, 17, 8)).astype(np.float32) for _ in range(2))
    out = Tensor(qa).scaled_dot_product_attention(
        Tensor(ka), Tensor(va), is_causal=True, scale=0.3, enable_gqa=True
    )
    expected = F.scaled_dot_product_attention(
        torch.tensor(qa),
        torch.tensor(ka),
        torch.tensor(va),
        is_causal=True,
        scale=0.3,
        enable_gqa=True,
    )
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)


def test_gradients_still_match_torch():
    """Training takes today's path (the backward reads the probabilities, so they get a
    buffer); its values and gradients are torch's."""
    shape = (2, 2, 33, 16)
    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal(shape).astype(np.float32) for _ in range(3)]
    ours = [Tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = ours[0].scaled_dot_product_attention(ours[1], ours[2], is_causal=True)
    ref = F.scaled_dot_product_attention(*theirs, is_causal=True)
    (out * out).sum().backward()
    (ref * ref).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-4, atol=1e-5)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-3, atol=1e-4)


def test_grid_devices_keep_todays_kernels():
    """The interpreter runs a grid: one thread per output would redo the key loop for each
    element of the row, so the scores keep their buffer there, and the values agree."""
    (q, k, v), (tq, tk, tv) = _qkv((1, 2, 9, 4), device="PYTHON")
    out = q.scaled_dot_product_attention(k, v, is_causal=True)
    assert len(out.schedule()) == 4
    expected = F.scaled_dot_product_attention(tq, tk, tv, is_causal=True).numpy()
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-6)
    assert Device["PYTHON"].renderer.grid_dims is not None


def test_scale_default_is_one_over_sqrt_of_head_size():
    (q, k, v), (tq, tk, tv) = _qkv((1, 1, 7, 9))
    out = q.scaled_dot_product_attention(k, v).numpy()
    ref = F.scaled_dot_product_attention(tq, tk, tv, scale=1 / math.sqrt(9)).numpy()
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "x_shape, v_shape", [((6, 9), (9, 1)), ((2, 6, 9), (2, 9, 1)), ((64, 64), (64, 1))]
)
def test_a_weighted_sum_of_one_column(x_shape, v_shape):
    """With v of one column the output's last long axis is the queries': upcast, each would have
    a running max of its own, so the kernel keeps one loop per output instead."""
    rng = np.random.default_rng(5)
    x, v = (rng.standard_normal(s).astype(np.float32) for s in (x_shape, v_shape))
    out = Tensor(x).softmax(-1) @ Tensor(v)
    assert len(out.schedule()) == 1
    expected = torch.softmax(torch.tensor(x), -1) @ torch.tensor(v)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)


def test_attention_inside_a_larger_inference_graph():
    """q, k and v from one linear layer, the heads projected after: the attention is one
    kernel of the plan (the projection reads it through a view, so it keeps its buffer)."""
    rng = np.random.default_rng(6)
    b, t, c, heads = 2, 64, 32, 4
    x = rng.standard_normal((b, t, c)).astype(np.float32)
    w = (rng.standard_normal((c, 3 * c)) * 0.2).astype(np.float32)

    def attend(x, w, split, attention):
        q, k, v = (s.reshape(b, t, heads, c // heads).transpose(1, 2) for s in split(x @ w))
        return attention(q, k, v).transpose(1, 2).reshape(b, t, c)

    out = attend(
        Tensor(x),
        Tensor(w),
        lambda y: y.split(c, dim=2),
        lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
    )
    sizes = _slot_sizes(out)
    assert max(sizes) < b * heads * t * t
    expected = attend(
        torch.tensor(x),
        torch.tensor(w),
        lambda y: y.split(c, dim=2),
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    )
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)


def test_float64_attention():
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal((1, 2, 64, 8)) for _ in range(3)]
    out = Tensor(arrays[0]).scaled_dot_product_attention(
        Tensor(arrays[1]), Tensor(arrays[2]), is_causal=True
    )
    assert len(out.schedule()) <= 2
    expected = F.scaled_dot_product_attention(*map(torch.tensor, arrays), is_causal=True)
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-10, atol=1e-12)
