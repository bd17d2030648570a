"""``tensor_nn.py``: what is not a comparison of values with torch (those are one line each in
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
