"""``tensor_nn.py`` against torch on random inputs, on each device (forward values only)."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor

from .torch_helpers import bool_, both, check, f16, f32, f64, i8, i32, i64, rand, tol, torch, u8  # noqa: F401

F = torch.nn.functional
loose = {"rtol": 1e-4, "atol": 1e-5}

# ---- convolution ---------------------------------------------------------------------------------

CONVS = [  # (input shape, weight shape, keyword arguments)
    ((1, 2, 6, 7), (3, 2, 3, 3), {}),
    ((2, 4, 7, 7), (4, 2, 3, 2), {"stride": 2, "padding": 1, "groups": 2}),
    ((1, 3, 9, 8), (2, 3, 3, 3), {"dilation": 2, "padding": (2, 1)}),
    ((1, 2, 6, 6), (2, 2, 3, 3), {"padding": "same"}),
    ((1, 2, 6, 6), (2, 2, 4, 4), {"padding": "same", "dilation": 2}),
    ((1, 2, 5, 6), (2, 2, 2, 3), {"padding": "valid", "stride": (1, 2)}),
    ((2, 3, 8), (4, 3, 3), {"stride": 3, "padding": 2}),  # conv1d
    ((1, 2, 4, 5, 5), (2, 2, 2, 3, 3), {"padding": 1, "stride": (1, 2, 1)}),  # conv3d
    ((3, 5, 5), (2, 3, 3, 3), {}),  # unbatched
    ((1, 4, 5, 5), (4, 1, 3, 3), {"groups": 4, "padding": 1}),  # depthwise
]


@pytest.mark.parametrize("xs, ws, kw", CONVS, ids=[str(i) for i in range(len(CONVS))])
def test_conv(device, xs, ws, kw):
    (x, tx), (w, tw), (b, tb) = (
        both(rand(xs), device),
        both(rand(ws), device),
        both(rand(ws[:1]), device),
    )
    ref = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}[len(ws)]
    check(x.conv2d(w, b, **kw), ref(tx, tw, tb, **kw), **loose)
    ours = {3: x.conv1d, 4: x.conv2d, 5: x.conv3d}[len(ws)]
    check(ours(w, **kw), ref(tx, tw, **kw), **loose)


def test_conv_non_contiguous_input(device):
    x, tx = both(rand((1, 2, 6, 5)), device)
    w, tw = both(rand((2, 2, 3, 3)), device)
    check(
        x.transpose(2, 3).conv2d(w, padding=1), F.conv2d(tx.transpose(2, 3), tw, padding=1), **loose
    )


CONV_TRANSPOSES = [
    ((1, 2, 4, 4), (2, 3, 3, 3), {}),
    ((2, 4, 3, 5), (4, 1, 3, 2), {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}),
    ((1, 2, 4, 4), (2, 2, 3, 3), {"stride": (2, 3), "dilation": 2, "padding": (1, 2)}),
    ((1, 3, 5), (3, 2, 4), {"stride": 3, "padding": 1}),  # 1-d
]


@pytest.mark.parametrize(
    "xs, ws, kw", CONV_TRANSPOSES, ids=[str(i) for i in range(len(CONV_TRANSPOSES))]
)
def test_conv_transpose(device, xs, ws, kw):
    (x, tx), (w, tw) = both(rand(xs), device), both(rand(ws), device)
    groups = kw.get("groups", 1)
    b, tb = both(rand((ws[1] * groups,)), device)
    ref = F.conv_transpose1d if len(ws) == 3 else F.conv_transpose2d
    check(x.conv_transpose2d(w, b, **kw), ref(tx, tw, tb, **kw), **loose)


# ---- pooling -------------------------------------------------------------------------------------

POOLS = [
    {"kernel_size": 2},
    {"kernel_size": 3, "stride": 1, "padding": 1},
    {"kernel_size": (3, 2), "stride": (2, 1)},
    {"kernel_size": 3, "stride": 2, "ceil_mode": True},
    {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True},
    {"kernel_size": 2, "stride": 3, "ceil_mode": True},
]


@pytest.mark.parametrize("kw", POOLS, ids=[str(i) for i in range(len(POOLS))])
def test_max_avg_pool(device, kw):
    x, tx = both(rand((2, 2, 7, 6)), device)
    check(x.max_pool2d(**kw), F.max_pool2d(tx, **kw))
    check(x.avg_pool2d(**kw), F.avg_pool2d(tx, **kw), **loose)
    if kw.get("padding"):
        check(
            x.avg_pool2d(**kw, count_include_pad=False),
            F.avg_pool2d(tx, **kw, count_include_pad=False),
            **loose,
        )


def test_max_pool_dilation_and_ints(device):
    x, tx = both(rand((1, 1, 9, 9), i32), device)
    check(x.max_pool2d(3, 2, 1, dilation=2), F.max_pool2d(tx.float(), 3, 2, 1, dilation=2).int())


@pytest.mark.parametrize("size", [(1, 1), (3, 2), (5, 4), 2])
def test_adaptive_avg_pool(device, size):
    x, tx = both(rand((2, 3, 7, 5)), device)
    check(x.adaptive_avg_pool2d(size), F.adaptive_avg_pool2d(tx, size), **loose)


INTERPOLATIONS = [
    {"size": (5, 7), "mode": "nearest"},
    {"scale_factor": 2, "mode": "nearest"},
    {"size": (3, 2), "mode": "nearest-exact"},
    {"size": (5, 7), "mode": "bilinear", "align_corners": False},
    {"size": (5, 7), "mode": "bilinear", "align_corners": True},
    {"size": (2, 3), "mode": "bilinear", "align_corners": False},
    {"scale_factor": 1.5, "mode": "bilinear", "align_corners": False},
]


@pytest.mark.parametrize("kw", INTERPOLATIONS, ids=[str(i) for i in range(len(INTERPOLATIONS))])
def test_interpolate(device, kw):
    x, tx = both(rand((1, 2, 4, 5)), device)
    check(x.interpolate(**kw), F.interpolate(tx, **kw), **loose)


def test_interpolate_linear_1d(device):
    x, tx = both(rand((2, 3, 5)), device)
    check(x.interpolate(size=8, mode="linear"), F.interpolate(tx, size=8, mode="linear"), **loose)


# ---- normalisation, dropout, attention, linear ---------------------------------------------------


def test_batchnorm(device):
    x, tx = both(rand((2, 3, 4, 4)), device)
    (w, tw), (b, tb), (m, tm) = (both(rand((3,), f32, lo, 2), device) for lo in (-2, -1, 0))
    v, tv = both(rand((3,), f32, 0.5, 2), device)
    want = F.batch_norm(tx, tm, tv, tw, tb, eps=1e-5)
    check(x.batchnorm(w, b, m, (v + 1e-5).rsqrt()), want, **loose)
    check(
        x.batchnorm(None, None, m, (v + 1e-5).rsqrt()), F.batch_norm(tx, tm, tv, eps=1e-5), **loose
    )


def test_layernorm(device):
    x, tx = both(rand((3, 4, 6)), device, transpose=True)
    check(x.layernorm(), F.layer_norm(tx, (tx.shape[-1],)), **loose)
    check(x.layernorm((-2, -1), eps=1e-3), F.layer_norm(tx, tx.shape[-2:], eps=1e-3), **loose)


def test_dropout(device):
    x = Tensor.ones(50, 40, device=device)
    assert x.dropout(0.5) is x  # not training
    with Tensor.train():
        Tensor.manual_seed(1)
        out = x.dropout(0.25).numpy()
    assert set(np.unique(out)) <= {0.0, np.float32(1 / 0.75)}
    assert 0.2 < (out == 0).mean() < 0.3


@pytest.mark.parametrize("mask", [None, "bool", "float", "causal"])
def test_scaled_dot_product_attention(device, mask):
    (q, tq), (k, tk), (v, tv) = (
        both(rand(s), device) for s in [(2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6)]
    )
    kw, tkw = {}, {}
    if mask == "bool":
        m = rand((4, 5), bool_)
        m[:, 0] = True  # every query sees something
        kw["attn_mask"], tkw["attn_mask"] = Tensor(m, device=device), torch.from_numpy(m)
    elif mask == "float":
        m = rand((3, 4, 5))
        kw["attn_mask"], tkw["attn_mask"] = Tensor(m, device=device), torch.from_numpy(m)
    elif mask == "causal":
        kw["is_causal"] = tkw["is_causal"] = True
    check(
        q.scaled_dot_product_attention(k, v, **kw),
        F.scaled_dot_product_attention(tq, tk, tv, **tkw),
        **loose,
    )


def test_linear_and_embedding(device):
    (x, tx), (w, tw), (b, tb) = (
        both(rand((2, 3, 4)), device),
        both(rand((4, 5)), device),
        both(rand((5,)), device),
    )
    check(x.linear(w, b), F.linear(tx, tw.T, tb), **loose)
    idx = rand((2, 3), i32, 0, 6)
    (i, ti), (e, te) = both(idx, device), both(rand((7, 4)), device)
    check(i.embedding(e), F.embedding(ti.long(), te))


# ---- losses --------------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("smoothing", [0.0, 0.2])
def test_cross_entropy_indices(device, reduction, smoothing):
    (x, tx), y = both(rand((5, 4)), device), rand((5,), i64, 0, 3)
    y[1] = -100  # ignored
    want = F.cross_entropy(tx, torch.from_numpy(y), reduction=reduction, label_smoothing=smoothing)
    check(x.cross_entropy(Tensor(y, device=device), reduction, smoothing), want, **loose)


def test_cross_entropy_probabilities_and_spatial(device):
    (x, tx), (p, tp) = both(rand((3, 4, 2)), device), both(rand((3, 4, 2), f32, 0, 1), device)
    check(x.cross_entropy(p.softmax(1)), F.cross_entropy(tx, tp.softmax(1)), **loose)
    check(
        x.cross_entropy(p.softmax(1), label_smoothing=0.1),
        F.cross_entropy(tx, tp.softmax(1), label_smoothing=0.1),
        **loose,
    )
    y = rand((3, 2), i64, 0, 3)
    check(
        x.cross_entropy(Tensor(y, device=device)), F.cross_entropy(tx, torch.from_numpy(y)), **loose
    )


def test_cross_entropy_weight_and_nll(device):
    (x, tx), (w, tw), y = (
        both(rand((6, 4)), device),
        both(rand((4,), f32, 0.1, 2), device),
        rand((6,), i64, 0, 3),
    )
    ty, fy = torch.from_numpy(y), Tensor(y, device=device)
    check(x.cross_entropy(fy, weight=w), F.cross_entropy(tx, ty, weight=tw), **loose)
    logp, tlogp = x.log_softmax(1), torch.log_softmax(tx, 1)
    check(logp.nll_loss(fy, w), F.nll_loss(tlogp, ty, tw), **loose)
    check(logp.nll_loss(fy, reduction="sum"), F.nll_loss(tlogp, ty, reduction="sum"), **loose)


@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_sparse_categorical_crossentropy(device, smoothing):
    (x, tx), y = both(rand((2, 3, 5)), device), rand((2, 3), i64, 0, 4)
    y[0, 1] = -1
    want = F.cross_entropy(
        tx.reshape(6, 5), torch.from_numpy(y).reshape(6), ignore_index=-1, label_smoothing=smoothing
    )
    check(
        x.sparse_categorical_crossentropy(Tensor(y, device=device), label_smoothing=smoothing),
        want,
        **loose,
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_losses(device, reduction):
    (x, tx), (y, ty) = both(rand((4, 3), f32, -4, 4), device), both(rand((4, 3), f32, 0, 1), device)
    check(
        x.sigmoid().binary_crossentropy(y, reduction),
        F.binary_cross_entropy(tx.sigmoid(), ty, reduction=reduction),
        **loose,
    )
    want = F.binary_cross_entropy_with_logits(tx, ty, reduction=reduction)
    check(x.binary_crossentropy_logits(y, reduction), want, **loose)
    (pw, tpw) = both(rand((3,), f32, 0.5, 3), device)
    want = F.binary_cross_entropy_with_logits(tx, ty, reduction=reduction, pos_weight=tpw)
    check(x.binary_cross_entropy_with_logits(y, reduction, pos_weight=pw), want, **loose)
    check(x.mse_loss(y, reduction), F.mse_loss(tx, ty, reduction=reduction), **loose)
    check(x.l1_loss(y, reduction), F.l1_loss(tx, ty, reduction=reduction), **loose)


def test_binary_crossentropy_clamps_logs(device):
    p, y = Tensor([0.0, 1.0], device=device), Tensor([1.0, 0.0], device=device)
    check(p.binary_crossentropy(y, "none"), [100.0, 100.0])


# ---- errors, as PyTorch's ------------------------------------------------------------------------


def _t(*shape: int, dtype=f32) -> tuple[Tensor, object]:
    x = rand(shape, dtype)
    return Tensor(x), torch.from_numpy(x)


(X4, TX4), (W4, TW4) = _t(1, 1, 5, 5), _t(2, 1, 3, 3)
(Q, TQ), (K, TK) = _t(1, 6, 3, 4), _t(1, 4, 5, 4)
(LOGITS, TLOGITS) = _t(2, 3)
BAD_TARGET, TBAD_TARGET = Tensor([0, 3]), torch.tensor([0, 3])
GOOD_TARGET, TGOOD_TARGET = Tensor([0, 2]), torch.tensor([0, 2])

ERRORS = [  # (id, fusegrad's call, torch's call, what our message says)
    ("pad_odd", lambda: X4.pad((2, 0, 2)), lambda: F.pad(TX4, (2, 0, 2)), "even number"),
    ("pad_too_many", lambda: X4.pad((0,) * 10), lambda: F.pad(TX4, (0,) * 10), "at most 8"),
    ("pad_mode", lambda: X4.pad((1, 1), mode="typo"), lambda: F.pad(TX4, (1, 1), mode="typo"), "typo"),
    ("pad_reflect_size", lambda: X4.pad((3, 5, 0, 0), mode="reflect"),
     lambda: F.pad(TX4, (3, 5, 0, 0), mode="reflect"), "less than the axis size"),
    ("pad_circular_twice", lambda: X4.pad((3, 6, 0, 0), mode="circular"),
     lambda: F.pad(TX4, (3, 6, 0, 0), mode="circular"), "more than once"),
    ("pad_value_reflect", lambda: X4.pad((1, 1), 2.0, "reflect"),
     lambda: F.pad(TX4, (1, 1), mode="reflect", value=2.0), "takes no value"),
    ("conv_padding_len", lambda: X4.conv2d(W4, padding=(1, 1, 1)),
     lambda: F.conv2d(TX4, TW4, padding=(1, 1, 1)), "1, 2 .* or 4 values"),
    ("conv_kernel_too_big", lambda: X4.conv2d(W4, dilation=3), lambda: F.conv2d(TX4, TW4, dilation=3),
     "does not fit"),
    ("conv_same_stride", lambda: X4.conv2d(W4, stride=2, padding="same"),
     lambda: F.conv2d(TX4, TW4, stride=2, padding="same"), "stride 1"),
    ("unpool_size", lambda: Tensor.max_unpool2d(*X4.max_pool2d(2, return_indices=True), 2, output_size=(9, 9)),
     lambda: F.max_unpool2d(*F.max_pool2d(TX4, 2, return_indices=True), 2, output_size=(9, 9)),
     "within stride"),
    ("reshape_ambiguous", lambda: Tensor.zeros(0, 3).reshape(0, -1),
     lambda: torch.zeros(0, 3).reshape(0, -1), "could be any size"),
    ("sdpa_mask_and_causal", lambda: Q.scaled_dot_product_attention(Q, Q, Q.ones_like() > 0, is_causal=True),
     lambda: F.scaled_dot_product_attention(TQ, TQ, TQ, TQ > -9, is_causal=True), "not both"),
    ("sdpa_gqa_heads", lambda: Q.scaled_dot_product_attention(K, K, enable_gqa=True),
     lambda: F.scaled_dot_product_attention(TQ, TK, TK, enable_gqa=True), "must divide"),
    ("sdpa_heads_without_gqa", lambda: Q.scaled_dot_product_attention(K, K),
     lambda: F.scaled_dot_product_attention(TQ, TK, TK), "broadcast"),
    ("cross_entropy_target_out_of_bounds", lambda: LOGITS.cross_entropy(BAD_TARGET),
     lambda: F.cross_entropy(TLOGITS, TBAD_TARGET), "Target 3 is out of bounds"),
    ("cross_entropy_negative_target", lambda: LOGITS.cross_entropy(Tensor([0, -100]), ignore_index=-1),
     lambda: F.cross_entropy(TLOGITS, torch.tensor([0, -100]), ignore_index=-1), "Target -100"),
    ("nll_loss_target_out_of_bounds", lambda: LOGITS.nll_loss(BAD_TARGET),
     lambda: F.nll_loss(TLOGITS, TBAD_TARGET), "out of bounds"),
    ("cross_entropy_reduction", lambda: LOGITS.cross_entropy(GOOD_TARGET, reduction="typo"),
     lambda: F.cross_entropy(TLOGITS, TGOOD_TARGET, reduction="typo"), "reduction"),
    ("nll_loss_reduction", lambda: LOGITS.nll_loss(GOOD_TARGET, reduction="typo"),
     lambda: F.nll_loss(TLOGITS, TGOOD_TARGET, reduction="typo"), "reduction"),
    ("cross_entropy_batch", lambda: LOGITS.cross_entropy(Tensor([0, 1, 2])),
     lambda: F.cross_entropy(TLOGITS, torch.tensor([0, 1, 2])), "class indices of shape"),
    ("cross_entropy_prob_shape", lambda: LOGITS.cross_entropy(Tensor([[0.5], [0.5]])),
     lambda: F.cross_entropy(TLOGITS, torch.tensor([[0.5], [0.5]])), "probabilities"),
    ("cross_entropy_weight", lambda: LOGITS.cross_entropy(GOOD_TARGET, weight=Tensor.ones(4)),
     lambda: F.cross_entropy(TLOGITS, TGOOD_TARGET, weight=torch.ones(4)), "one value per class"),
    ("cross_entropy_smoothing", lambda: LOGITS.cross_entropy(GOOD_TARGET, label_smoothing=1.5),
     lambda: F.cross_entropy(TLOGITS, TGOOD_TARGET, label_smoothing=1.5), "label_smoothing"),
    ("mean_int_dtype", lambda: LOGITS.mean(dtype="int32"), lambda: TLOGITS.mean(dtype=torch.int32),
     "float dtype"),
]


@pytest.mark.parametrize("ours, theirs, message", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors_as_torch(ours, theirs, message):
    """Each mistake raises an exception of the type torch raises for it, saying what was wrong."""
    with pytest.raises(Exception) as theirs_raised:
        theirs()
    with pytest.raises(theirs_raised.type, match=message):
        ours()


def test_multinomial_draws_in_proportion_to_the_weights():
    Tensor.manual_seed(3)
    weights = Tensor([[0.0, 1.0, 3.0], [2.0, 0.0, 0.0]])
    draws = weights.multinomial(4000, replacement=True).numpy()
    assert draws.shape == (2, 4000) and draws.dtype.kind == "i"
    assert not (draws[0] == 0).any() and (draws[1] == 0).all()  # a zero weight is never drawn
    assert abs((draws[0] == 2).mean() - 0.75) < 0.03
    assert Tensor([1.0, 1.0]).multinomial().shape == (1,)


@pytest.mark.parametrize("fn, error", [
    (lambda: Tensor.ones(3, 5).glu(), "odd"),
    (lambda: Tensor.ones(1, 5, 2, 2).pixel_shuffle(2), "upscale_factor"),
    (lambda: Tensor.ones(2, 3).unbind(2), "out of range"),
    (lambda: Tensor.ones(2, 3).instance_norm(), "spatial"),
    (lambda: Tensor.ones(3).multinomial(2), "replacement"),
    (lambda: Tensor.ones(3).norm("nuc"), "'fro'"),
])
def test_functional_errors_say_what_is_wrong(fn, error):
    with pytest.raises((RuntimeError, ValueError, IndexError), match=error):
        fn()
