"""``tensor/nn_ops.py``: what is not a comparison of values with torch (those are one line each in
tests/core/differential/test_nn.py): dropout's statistics, errors as torch's."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor

from .torch_helpers import f32, rand, torch

F = torch.nn.functional

# ---- dropout -------------------------------------------------------------------------------------


def test_dropout(device):
    x = Tensor.ones(50, 40, device=device)
    assert x.dropout(0.5) is x  # not training
    with Tensor.train():
        Tensor.manual_seed(1)
        out = x.dropout(0.25).numpy()
    assert set(np.unique(out)) <= {0.0, np.float32(1 / 0.75)}
    assert 0.2 < (out == 0).mean() < 0.3


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
    (
        "pad_mode",
        lambda: X4.pad((1, 1), mode="typo"),
        lambda: F.pad(TX4, (1, 1), mode="typo"),
        "typo",
    ),
    (
        "pad_reflect_size",
        lambda: X4.pad((3, 5, 0, 0), mode="reflect"),
        lambda: F.pad(TX4, (3, 5, 0, 0), mode="reflect"),
        "less than the axis size",
    ),
    (
        "pad_circular_twice",
        lambda: X4.pad((3, 6, 0, 0), mode="circular"),
        lambda: F.pad(TX4, (3, 6, 0, 0), mode="circular"),
        "more than once",
    ),
    (
        "pad_value_reflect",
        lambda: X4.pad((1, 1), 2.0, "reflect"),
        lambda: F.pad(TX4, (1, 1), mode="reflect", value=2.0),
        "takes no value",
    ),
    (
        "conv_padding_len",
        lambda: X4.conv2d(W4, padding=(1, 1, 1)),
        lambda: F.conv2d(TX4, TW4, padding=(1, 1, 1)),
        "1, 2 .* or 4 values",
    ),
    (
        "conv_kernel_too_big",
        lambda: X4.conv2d(W4, dilation=3),
        lambda: F.conv2d(TX4, TW4, dilation=3),
        "does not fit",
    ),
    (
        "conv_same_stride",
        lambda: X4.conv2d(W4, stride=2, padding="same"),
        lambda: F.conv2d(TX4, TW4, stride=2, padding="same"),
        "stride 1",
    ),
    (
        "unpool_size",
        lambda: Tensor.max_unpool2d(*X4.max_pool2d(2, return_indices=True), 2, output_size=(9, 9)),
        lambda: F.max_unpool2d(*F.max_pool2d(TX4, 2, return_indices=True), 2, output_size=(9, 9)),
        "within stride",
    ),
    (
        "reshape_ambiguous",
        lambda: Tensor.zeros(0, 3).reshape(0, -1),
        lambda: torch.zeros(0, 3).reshape(0, -1),
        "could be any size",
    ),
    (
        "sdpa_mask_and_causal",
        lambda: Q.scaled_dot_product_attention(Q, Q, Q.ones_like() > 0, is_causal=True),
        lambda: F.scaled_dot_product_attention(TQ, TQ, TQ, TQ > -9, is_causal=True),
        "not both",
    ),
    (
        "sdpa_gqa_heads",
        lambda: Q.scaled_dot_product_attention(K, K, enable_gqa=True),
        lambda: F.scaled_dot_product_attention(TQ, TK, TK, enable_gqa=True),
        "must divide",
    ),
    (
        "sdpa_heads_without_gqa",
        lambda: Q.scaled_dot_product_attention(K, K),
        lambda: F.scaled_dot_product_attention(TQ, TK, TK),
        "broadcast",
    ),
    (
        "cross_entropy_target_out_of_bounds",
        lambda: LOGITS.cross_entropy(BAD_TARGET).item(),  # (checked at the read: tensor/bounds.py)
        lambda: F.cross_entropy(TLOGITS, TBAD_TARGET),
        "index 3 is out of bounds",
    ),
    (
        "cross_entropy_negative_target",
        lambda: LOGITS.cross_entropy(Tensor([0, -100]), ignore_index=-1).item(),
        lambda: F.cross_entropy(TLOGITS, torch.tensor([0, -100]), ignore_index=-1),
        "index -100",
    ),
    (
        "nll_loss_target_out_of_bounds",
        lambda: LOGITS.nll_loss(BAD_TARGET).item(),
        lambda: F.nll_loss(TLOGITS, TBAD_TARGET),
        "out of bounds",
    ),
    (
        "cross_entropy_reduction",
        lambda: LOGITS.cross_entropy(GOOD_TARGET, reduction="typo"),
        lambda: F.cross_entropy(TLOGITS, TGOOD_TARGET, reduction="typo"),
        "reduction",
    ),
    (
        "nll_loss_reduction",
        lambda: LOGITS.nll_loss(GOOD_TARGET, reduction="typo"),
        lambda: F.nll_loss(TLOGITS, TGOOD_TARGET, reduction="typo"),
        "reduction",
    ),
    (
        "cross_entropy_batch",
        lambda: LOGITS.cross_entropy(Tensor([0, 1, 2])),
        lambda: F.cross_entropy(TLOGITS, torch.tensor([0, 1, 2])),
        "class indices of shape",
    ),
    (
        "cross_entropy_prob_shape",
        lambda: LOGITS.cross_entropy(Tensor([[0.5], [0.5]])),
        lambda: F.cross_entropy(TLOGITS, torch.tensor([[0.5], [0.5]])),
        "probabilities",
    ),
    (
        "cross_entropy_weight",
        lambda: LOGITS.cross_entropy(GOOD_TARGET, weight=Tensor.ones(4)),
        lambda: F.cross_entropy(TLOGITS, TGOOD_TARGET, weight=torch.ones(4)),
        "one value per class",
    ),
    (
        "cross_entropy_smoothing",
        lambda: LOGITS.cross_entropy(GOOD_TARGET, label_smoothing=1.5),
        lambda: F.cross_entropy(TLOGITS, TGOOD_TARGET, label_smoothing=1.5),
        "label_smoothing",
    ),
    (
        "mean_int_dtype",
        lambda: LOGITS.mean(dtype="int32"),
        lambda: TLOGITS.mean(dtype=torch.int32),
        "float dtype",
    ),
]


@pytest.mark.parametrize(
    "ours, theirs, message", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
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


def test_multinomial_without_replacement_draws_as_torch_one_at_a_time():
    """Several samples without replacement (torch's default): never a category twice in a row,
    never a weight of 0, and each ordered pair as often as drawing one, removing it, then
    drawing again: (0, 1) from [0.5, 0.3, 0.2] is 0.5 * 0.3 / 0.5."""
    Tensor.manual_seed(4)
    draws = Tensor([[0.5, 0.3, 0.2, 0.0]] * 20000).multinomial(2).numpy()
    assert draws.shape == (20000, 2) and (draws[:, 0] != draws[:, 1]).all()
    assert (draws != 3).all()
    w = [0.5, 0.3, 0.2]
    for a, b in [(0, 1), (1, 0), (2, 1), (1, 2)]:
        seen = ((draws[:, 0] == a) & (draws[:, 1] == b)).mean()
        assert abs(seen - w[a] * w[b] / (1 - w[a])) < 0.015
    assert sorted(Tensor([1.0, 2.0, 3.0]).multinomial(3).tolist()) == [0, 1, 2]


@pytest.mark.parametrize(
    "fn, error",
    [
        (lambda: Tensor.ones(3, 5).glu(), "odd"),
        (lambda: Tensor.ones(1, 5, 2, 2).pixel_shuffle(2), "upscale_factor"),
        (lambda: Tensor.ones(2, 3).unbind(2), "out of range"),
        (lambda: Tensor.ones(2, 3).instance_norm(), "spatial"),
        (lambda: Tensor.ones(3).multinomial(4), "replacement=True"),
        (lambda: Tensor([1.0, 0.0, 2.0]).multinomial(3), "only 2 categories of positive"),
        (lambda: Tensor.ones(3).norm("nuc"), "'fro'"),
    ],
)
def test_functional_errors_say_what_is_wrong(fn, error):
    with pytest.raises((RuntimeError, ValueError, IndexError), match=error):
        fn()


X2, TX2 = _t(2, 3)
X3, TX3 = _t(2, 3, 4)
ERRORS_MORE = [  # issue 16's functions: (id, fusegrad's call, torch's call, what our message says)
    (
        "prelu_channels",
        lambda: X2.prelu(Tensor.ones(2)),
        lambda: F.prelu(TX2, torch.ones(2)),
        "channel",
    ),
    ("softshrink_negative", lambda: X2.softshrink(-1.0), lambda: F.softshrink(TX2, -1.0), "lambda"),
    ("dropout2d_p", lambda: X3.dropout2d(1.5), lambda: F.dropout2d(TX3, 1.5), "between 0 and 1"),
    (
        "pixel_unshuffle_size",
        lambda: X3.reshape(1, 2, 3, 4).pixel_unshuffle(2),
        lambda: F.pixel_unshuffle(TX3.reshape(1, 2, 3, 4), 2),
        "height 3",
    ),
    ("cdist_1d", lambda: X2[0].cdist(X2[0]), lambda: torch.cdist(TX2[0], TX2[0]), "at least 2-d"),
    ("cdist_columns", lambda: X2.cdist(X3[0]), lambda: torch.cdist(TX2, TX3[0]), "columns"),
    ("cdist_p", lambda: X2.cdist(X2, -1), lambda: torch.cdist(TX2, TX2, -1), "non-negative"),
    (
        "triplet_ndim",
        lambda: X2.triplet_margin_loss(X2[0], X2),
        lambda: F.triplet_margin_loss(TX2, TX2[0], TX2),
        "same number of dimensions",
    ),
    (
        "triplet_margin",
        lambda: X2.triplet_margin_loss(X2, X2, -1.0),
        lambda: F.triplet_margin_loss(TX2, TX2, TX2, -1.0),
        "greater than 0",
    ),
    (
        "gaussian_var_size",
        lambda: X2.gaussian_nll_loss(X2, Tensor.ones(3, 3)),
        lambda: F.gaussian_nll_loss(TX2, TX2, torch.ones(3, 3)),
        "incorrect size",
    ),
    (
        "gaussian_var_negative",
        lambda: X2.gaussian_nll_loss(X2, -X2.abs()),
        lambda: F.gaussian_nll_loss(TX2, TX2, -TX2.abs()),
        "negative",
    ),
    (
        "poisson_reduction",
        lambda: X2.poisson_nll_loss(X2, reduction="typo"),
        lambda: F.poisson_nll_loss(TX2, TX2, reduction="typo"),
        "reduction",
    ),
    (
        "margin_ranking_reduction",
        lambda: X2.margin_ranking_loss(X2, X2, reduction="typo"),
        lambda: F.margin_ranking_loss(TX2, TX2, TX2, reduction="typo"),
        "reduction",
    ),
    (
        "adaptive_max_pool1d_dims",
        lambda: X4.adaptive_max_pool1d(2),
        lambda: F.adaptive_max_pool1d(TX4, 2),
        "2 to 3 dimensions",
    ),
    (
        "adaptive_avg_pool1d_dims",
        lambda: X2[0].adaptive_avg_pool1d(2),
        lambda: F.adaptive_avg_pool1d(TX2[0], 2),
        "2 to 3 dimensions",
    ),
    (
        "fold_channels",
        lambda: Tensor.ones(1, 5, 4).fold((3, 3), 2),
        lambda: F.fold(torch.ones(1, 5, 4), (3, 3), 2),
        "kernel_size",
    ),
    (
        "fold_blocks",
        lambda: Tensor.ones(1, 4, 5).fold((3, 3), 2),
        lambda: F.fold(torch.ones(1, 4, 5), (3, 3), 2),
        "sliding blocks",
    ),
    (
        "affine_grid_theta",
        lambda: Tensor.ones(1, 2, 3).affine_grid((1, 1, 4, 4, 4)),
        lambda: F.affine_grid(torch.ones(1, 2, 3), (1, 1, 4, 4, 4), False),
        r"\(1, 3, 4\)",
    ),
    (
        "affine_grid_size",
        lambda: Tensor.ones(1, 2, 3).affine_grid((1, 1, 4)),
        lambda: F.affine_grid(torch.ones(1, 2, 3), (1, 1, 4), False),
        "4-d and 5-d",
    ),
    (
        "grid_sample_mode",
        lambda: X4.grid_sample(Tensor.zeros(1, 3, 3, 2), mode="typo"),
        lambda: F.grid_sample(TX4, torch.zeros(1, 3, 3, 2), mode="typo", align_corners=False),
        "mode",
    ),
    (
        "grid_sample_padding",
        lambda: X4.grid_sample(Tensor.zeros(1, 3, 3, 2), padding_mode="typo"),
        lambda: F.grid_sample(
            TX4, torch.zeros(1, 3, 3, 2), padding_mode="typo", align_corners=False
        ),
        "padding_mode",
    ),
    (
        "grid_sample_batch",
        lambda: X4.grid_sample(Tensor.zeros(2, 3, 3, 2)),
        lambda: F.grid_sample(TX4, torch.zeros(2, 3, 3, 2), align_corners=False),
        "same N",
    ),
    (
        "ctc_input_length",
        lambda: X3.ctc_loss(Tensor([[1, 2]] * 3), [3, 3, 3], [2, 2, 2]),
        lambda: F.ctc_loss(
            TX3, torch.tensor([[1, 2]] * 3), torch.tensor([3, 3, 3]), torch.tensor([2, 2, 2])
        ),
        "at most T",
    ),
    (
        "ctc_reduction",
        lambda: X3.ctc_loss(Tensor([[1]] * 3), [2, 2, 2], [1, 1, 1], reduction="typo"),
        lambda: F.ctc_loss(
            TX3,
            torch.tensor([[1]] * 3),
            torch.tensor([2, 2, 2]),
            torch.tensor([1, 1, 1]),
            reduction="typo",
        ),
        "reduction",
    ),
]


@pytest.mark.parametrize(
    "ours, theirs, message", [e[1:] for e in ERRORS_MORE], ids=[e[0] for e in ERRORS_MORE]
)
def test_functional_more_errors_as_torch(ours, theirs, message):
    """Each mistake raises an exception of the type torch raises for it, saying what was wrong."""
    with pytest.raises(Exception) as theirs_raised:
        theirs()
    with pytest.raises(theirs_raised.type, match=message):
        ours()


def test_dropout2d_zeros_whole_channels():
    x = Tensor.ones(20, 30, 3, 2)
    assert x.dropout2d(0.5) is x  # not training
    Tensor.manual_seed(2)
    out = x.dropout2d(0.25, training=True).numpy()
    per_channel = out.reshape(20, 30, -1)
    assert (per_channel == per_channel[..., :1]).all()  # a channel is kept or zeroed whole
    assert set(np.unique(out)) <= {0.0, np.float32(1 / 0.75)}
    assert 0.15 < (per_channel[..., 0] == 0).mean() < 0.35
    with Tensor.train():
        assert (x.dropout2d(1.0).numpy() == 0).all()
    assert x[:, :, 0, 0].dropout2d(0.5, training=True).shape == (20, 30)


def test_gumbel_softmax_samples_the_categorical_distribution():
    Tensor.manual_seed(4)
    logits = Tensor([[0.0, 1.0, 2.0]]).log_softmax(-1).expand(3000, 3)
    soft = logits.gumbel_softmax(tau=0.5).numpy()
    assert np.allclose(soft.sum(-1), 1, atol=1e-5) and (soft >= 0).all()
    hard = logits.gumbel_softmax(hard=True)
    picked = hard.numpy()
    assert set(np.unique(picked)) <= {0.0, 1.0} and (picked.sum(-1) == 1).all()
    want = np.exp([0.0, 1.0, 2.0]) / np.exp([0.0, 1.0, 2.0]).sum()
    assert np.abs(picked.mean(0) - want).max() < 0.04  # argmax of logits + Gumbel noise ~ softmax
    x = Tensor([[0.5, -1.0, 2.0]])  # the hard sample's gradient is the soft sample's
    (grad,) = (x.gumbel_softmax(hard=True) * Tensor([[1.0, 2.0, 3.0]])).sum().gradient(x)
    assert np.isfinite(grad.numpy()).all() and abs(grad.numpy().sum()) < 1e-5
