"""Each layer of ``fusegrad.nn`` against its PyTorch twin holding the same weights: the output,
the gradient of every parameter and of the input, and the layer's state dict layout."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fusegrad import Tensor, dtypes, nn
from fusegrad.errors import InvalidArgument, ShapeError
from fusegrad.nn.state import get_state_dict

torch = pytest.importorskip("torch")

#: name -> (our layer and torch's, made with the same arguments; input shape)
CASES = {
    "linear": (lambda: (nn.Linear(5, 3), torch.nn.Linear(5, 3)), (4, 5)),
    "linear_nobias_3d": (
        lambda: (nn.Linear(5, 3, bias=False), torch.nn.Linear(5, 3, bias=False)),
        (2, 4, 5),
    ),
    "conv1d": (
        lambda: (
            nn.Conv1d(3, 4, 3, stride=2, padding=1),
            torch.nn.Conv1d(3, 4, 3, stride=2, padding=1),
        ),
        (2, 3, 9),
    ),
    "conv2d": (
        lambda: (nn.Conv2d(3, 4, 3, padding=1), torch.nn.Conv2d(3, 4, 3, padding=1)),
        (2, 3, 6, 6),
    ),
    "conv2d_groups": (
        lambda: (
            nn.Conv2d(4, 6, (3, 2), stride=2, dilation=(1, 2), groups=2),
            torch.nn.Conv2d(4, 6, (3, 2), stride=2, dilation=(1, 2), groups=2),
        ),
        (2, 4, 7, 8),
    ),
    "conv_transpose2d": (
        lambda: (
            nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1),
            torch.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1),
        ),
        (2, 3, 4, 5),
    ),
    "conv_transpose2d_groups": (
        lambda: (
            nn.ConvTranspose2d(4, 6, 2, groups=2, bias=False),
            torch.nn.ConvTranspose2d(4, 6, 2, groups=2, bias=False),
        ),
        (1, 4, 3, 3),
    ),
    "batchnorm2d": (lambda: (nn.BatchNorm2d(3), torch.nn.BatchNorm2d(3)), (4, 3, 5, 5)),
    "batchnorm1d": (lambda: (nn.BatchNorm1d(4), torch.nn.BatchNorm1d(4)), (8, 4)),
    "batchnorm_no_affine": (
        lambda: (nn.BatchNorm2d(3, affine=False), torch.nn.BatchNorm2d(3, affine=False)),
        (4, 3, 2, 2),
    ),
    "layernorm": (lambda: (nn.LayerNorm(5), torch.nn.LayerNorm(5)), (3, 4, 5)),
    "layernorm_2axes": (
        lambda: (nn.LayerNorm((4, 5), eps=1e-3), torch.nn.LayerNorm((4, 5), eps=1e-3)),
        (3, 4, 5),
    ),
    "layernorm_no_affine": (
        lambda: (
            nn.LayerNorm(5, elementwise_affine=False),
            torch.nn.LayerNorm(5, elementwise_affine=False),
        ),
        (3, 5),
    ),
    "groupnorm": (lambda: (nn.GroupNorm(2, 4), torch.nn.GroupNorm(2, 4)), (3, 4, 3, 3)),
    "groupnorm_no_affine": (
        lambda: (nn.GroupNorm(4, 4, affine=False), torch.nn.GroupNorm(4, 4, affine=False)),
        (2, 4, 5),
    ),
    "rmsnorm": (lambda: (nn.RMSNorm(5), torch.nn.RMSNorm(5, eps=1e-6)), (3, 4, 5)),
}


def _copy_weights(ours, theirs) -> None:
    """Give our layer the torch layer's values (randomised first, so that ones and zeros don't hide
    bugs)."""
    rng = np.random.default_rng(1)
    with torch.no_grad():
        for _, p in theirs.named_parameters():
            p.copy_(
                torch.from_numpy(rng.uniform(0.5, 1.5, p.shape).astype(np.float32))
                * p.sign().where(p != 0, 1)
            )
    for name, value in theirs.state_dict().items():
        getattr(ours, name).assign(Tensor(value.numpy()))


def _run_both(name: str, train: bool):
    """Forward and backward through both layers on the same input and output gradient."""
    make, shape = CASES[name]
    ours, theirs = make()
    _copy_weights(ours, theirs)
    theirs.train(train)
    rng = np.random.default_rng(2)
    x_np = rng.standard_normal(shape).astype(np.float32)
    x, tx = Tensor(x_np, requires_grad=True), torch.tensor(x_np, requires_grad=True)
    with Tensor.train(train):
        out = ours(x)
    tout = theirs(tx)
    g = rng.standard_normal(tout.shape).astype(np.float32)
    (out * Tensor(g)).sum().backward()
    (tout * torch.from_numpy(g)).sum().backward()
    return ours, theirs, x, tx, out, tout


@pytest.mark.parametrize("name", CASES)
def test_forward_backward_matches_torch(name):
    ours, theirs, x, tx, out, tout = _run_both(name, train=True)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    for pname, p in theirs.named_parameters():
        ours_grad = getattr(ours, pname).grad
        np.testing.assert_allclose(
            ours_grad.numpy(), p.grad.numpy(), rtol=1e-4, atol=1e-4, err_msg=pname
        )


@pytest.mark.parametrize("name", [n for n in CASES if n.startswith("batchnorm")])
def test_batchnorm_running_stats_match_torch(name):
    ours, theirs, *_ = _run_both(name, train=True)
    if not ours.track_running_stats:
        return
    Tensor.realize(ours.running_mean, ours.running_var, ours.num_batches_tracked)
    np.testing.assert_allclose(
        ours.running_mean.numpy(), theirs.running_mean.numpy(), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        ours.running_var.numpy(), theirs.running_var.numpy(), rtol=1e-5, atol=1e-6
    )
    assert ours.num_batches_tracked.item() == 1 == int(theirs.num_batches_tracked)


@pytest.mark.parametrize("name", ["batchnorm2d", "batchnorm1d"])
def test_batchnorm_eval_uses_running_stats(name):
    ours, theirs, x, tx, out, tout = _run_both(name, train=False)
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert ours.num_batches_tracked.item() == 0  # eval leaves the statistics alone


def test_batchnorm_without_running_stats_always_uses_the_batch():
    bn, ref = (
        nn.BatchNorm2d(2, track_running_stats=False),
        torch.nn.BatchNorm2d(2, track_running_stats=False),
    )
    x = np.random.default_rng(3).standard_normal((3, 2, 2, 2)).astype(np.float32)
    ref.eval()
    np.testing.assert_allclose(
        bn(Tensor(x)).numpy(), ref(torch.from_numpy(x)).detach().numpy(), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize("name", CASES)
def test_state_dict_has_torchs_names_and_shapes(name):
    ours, theirs = CASES[name][0]()
    mine = {k: v.shape for k, v in get_state_dict(ours).items()}
    assert mine == {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    for pname, _ in theirs.named_parameters():
        assert getattr(ours, pname).requires_grad is True


def test_embedding_matches_torch():
    ours, theirs = nn.Embedding(10, 4), torch.nn.Embedding(10, 4)
    ours.weight.assign(Tensor(theirs.weight.detach().numpy()))
    idx = np.array([[1, 3, 3], [9, 0, 1]])
    out, tout = ours(Tensor(idx)), theirs(torch.from_numpy(idx))
    g = np.random.default_rng(4).standard_normal(tout.shape).astype(np.float32)
    (out * Tensor(g)).sum().backward()
    (tout * torch.from_numpy(g)).sum().backward()
    np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-6)
    np.testing.assert_allclose(
        ours.weight.grad.numpy(), theirs.weight.grad.numpy(), rtol=1e-5, atol=1e-6
    )


def test_embedding_rejects_float_indices():
    with pytest.raises(InvalidArgument, match="integer indices"):
        nn.Embedding(4, 2)(Tensor([1.0]))


@pytest.mark.parametrize(
    "layer, fan_in",
    [
        (lambda: nn.Linear(50, 40), 50),
        (lambda: nn.Conv2d(6, 40, 3, groups=2), 27),
        (lambda: nn.ConvTranspose2d(8, 40, 2), 160),
    ],
)
def test_kaiming_uniform_init_bounds(layer, fan_in):
    """Weights and biases fill U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as PyTorch's default."""
    Tensor.manual_seed(0)
    m = layer()
    bound = 1 / math.sqrt(fan_in)
    w = m.weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.1 * bound  # the std of U(-b, b) is b/sqrt(3)
    assert np.abs(m.bias.numpy()).max() <= bound


def test_parameters_are_distinct_buffers():
    """Two layers' zero biases must not be one graph node, or backward would add their gradients."""
    a, b = nn.LayerNorm(3), nn.LayerNorm(3)
    (a(Tensor([[1.0, 2.0, 4.0]])).sum() + 2 * b(Tensor([[1.0, 2.0, 4.0]])).sum()).backward()
    assert a.bias.grad.tolist() == [1.0, 1.0, 1.0] and b.bias.grad.tolist() == [2.0, 2.0, 2.0]


def test_dropout_in_training_zeros_about_p_and_scales_the_rest():
    Tensor.manual_seed(0)
    x = Tensor.ones(200, 50, requires_grad=True)
    with Tensor.train():
        y = nn.Dropout(0.25)(x)
    y.sum().backward()
    out, grad = y.numpy(), x.grad.numpy()
    assert set(np.unique(out).tolist()) == {0.0, float(np.float32(1 / 0.75))}
    assert abs((out == 0).mean() - 0.25) < 0.02
    np.testing.assert_array_equal(grad, out)  # d(x * mask / (1-p)) / dx = mask / (1-p)


def test_dropout_outside_training_is_identity():
    x = Tensor([1.0, 2.0, 3.0])
    assert nn.Dropout(0.9)(x) is x


def test_layer_shape_errors_name_the_shapes():
    with pytest.raises(ShapeError, match=r"LayerNorm\(5,\) got input of shape \(2, 4\)"):
        nn.LayerNorm(5)(Tensor.ones(2, 4))
    with pytest.raises(ShapeError, match="groups=3 must divide"):
        nn.Conv2d(4, 6, 3, groups=3)
    with pytest.raises(ShapeError, match="num_groups=3 must divide num_channels=4"):
        nn.GroupNorm(3, 4)
    with pytest.raises(ShapeError, match="BatchNorm needs"):
        nn.BatchNorm1d(3)(Tensor.ones(3))


@pytest.mark.parametrize("stride", [2, 3])
def test_strided_transposed_convolution_edges(stride):
    """Every kernel size against the stride (taps that miss a phase: k < s, k % s != 0),
    padding up to past the kernel, output_padding, groups and outputs shorter than the stride:
    the phases' convolutions and their interleaving give torch's values."""
    rng = np.random.default_rng(stride)
    for k, p, extra, size, groups in itertools.product(
        range(1, 6), range(3), range(stride), (1, 2, 3), (1, 2)
    ):
        length = (size - 1) * stride - 2 * p + k + extra
        if length < 1 or extra >= max(stride, 1) or p > k + 1:
            continue
        x = rng.standard_normal((2, 4, size, size + 1)).astype(np.float32)
        w = rng.standard_normal((4, 3, k, k)).astype(np.float32)
        args = {"stride": stride, "padding": p, "output_padding": extra, "groups": groups}
        want = torch.nn.functional.conv_transpose2d(
            torch.from_numpy(x), torch.from_numpy(w), **args
        ).numpy()
        got = Tensor(x).conv_transpose2d(Tensor(w), **args).numpy()
        assert got.shape == want.shape, (k, p, extra, size, groups)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(args | {"k": k}))


def test_num_batches_tracked_is_int64():
    assert nn.BatchNorm2d(2).num_batches_tracked.dtype == dtypes.int64


@pytest.mark.parametrize("kernel, stride", [(4, 2), (2, 2), (3, 2), (5, 3), (1, 2), (3, 3)])
def test_strided_transposed_convolution_does_no_work_on_zeros(kernel, stride):
    """A transposed convolution with a stride computes each phase of its output from that
    phase's own taps: about the multiply-adds the output needs (each input element times each
    of its k * k taps), not stride**2 times them as a convolution of the input spread with
    zeros, nor the kernel padded with zero taps to a multiple of the stride (3x3 stride 2: 16
    taps for 9; 1x1: 4 for 1); values and gradients as torch's."""
    from fusegrad.engine.realize import GlobalCounters

    rng = np.random.default_rng(kernel)
    x = rng.standard_normal((2, 16, 12, 13)).astype(np.float32)
    w = rng.standard_normal((16, 8, kernel, kernel)).astype(np.float32)
    t, tw = Tensor(x, requires_grad=True).realize(), Tensor(w, requires_grad=True).realize()
    GlobalCounters.reset()
    out = t.conv_transpose2d(tw, stride=stride, padding=1).realize()
    needed = 2 * x.size * 8 * kernel * kernel  # each input element times each of its taps
    assert GlobalCounters.global_ops < 1.4 * needed, GlobalCounters.global_ops / needed
    tx, tww = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    want = torch.nn.functional.conv_transpose2d(tx, tww, stride=stride, padding=1)
    np.testing.assert_allclose(out.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-4)
    seed = rng.standard_normal(want.shape).astype(np.float32)
    (out * Tensor(seed)).sum().backward()
    (want * torch.from_numpy(seed)).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(tw.grad.numpy(), tww.grad.numpy(), rtol=1e-4, atol=1e-3)
