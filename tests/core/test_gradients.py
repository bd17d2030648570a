"""Gradients against torch: every differentiable op, forward and backward, on random inputs.

Each case takes the gradient of a randomly weighted sum of the op's output (so the upstream
gradient is not all ones) with respect to every float input, through ``Tensor.gradient``, and
compares it and the output with torch's. Inputs mix broadcasting, size-1 axes and views
(permuted, sliced); the cases run on CPU, a few on the (slow) PYTHON interpreter too.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.errors import ShapeError
from fusegrad.uop.ops import Ops, toposort

torch = pytest.importorskip("torch")
F = torch.nn.functional

TOL = {"rtol": 1e-4, "atol": 1e-5}
pytestmark = pytest.mark.filterwarnings("ignore:Using padding=.same.:UserWarning")
KINKS = np.array([-6, -3, -1, -0.5, 0, 0.5, 1, 2, 3, 6], dtype=np.float32)


@dataclass(frozen=True)
class Arg:
    """How to make one input: float ones get gradients, ``kind`` says which values."""

    shape: tuple[int, ...]
    kind: str = "float"  # float, ties, kinks (with gradients); int, bool, const (without)
    low: float = -3.0
    high: float = 3.0

    @property
    def wants_grad(self) -> bool:
        return self.kind in ("float", "ties", "kinks")

    def make(self, rng: np.random.Generator) -> np.ndarray:
        if self.kind == "int":
            return rng.integers(int(self.low), int(self.high), self.shape).astype(np.int32)
        if self.kind == "bool":  # the first of the last axis is true: no all-masked softmax row
            mask = rng.random(self.shape) < 0.6
            mask[..., :1] = True
            return mask
        if self.kind == "ties":  # whole numbers, so maxima and minima tie
            return rng.integers(int(self.low), int(self.high) + 1, self.shape).astype(np.float32)
        if self.kind == "kinks":  # exactly where activations bend: 0, ±1, ±3, 6
            return np.resize(KINKS, self.shape)
        return rng.uniform(self.low, self.high, self.shape).astype(np.float32)


def R(*shape: int, low: float = -3.0, high: float = 3.0) -> Arg:
    """Random floats in [low, high)."""
    return Arg(shape, "float", low, high)


def P(*shape: int) -> Arg:
    """Positive floats, for log, sqrt, division and the like."""
    return Arg(shape, "float", 0.5, 3.0)


def T(*shape: int) -> Arg:
    """Whole numbers in [-2, 2] as floats: many ties."""
    return Arg(shape, "ties", -2, 2)


def Z(*shape: int) -> Arg:
    """The kinks of the piecewise activations (0, ±1, ±3, 6 ...), where subgradients differ."""
    return Arg(shape, "kinks")


def I(high: int, *shape: int, low: int = 0) -> Arg:  # noqa: E743
    """Integer indices in [low, high), no gradient."""
    return Arg(shape, "int", low, high)


def B(*shape: int) -> Arg:
    """A bool mask, no gradient."""
    return Arg(shape, "bool")


def K(*shape: int, low: float = 0.05, high: float = 0.95) -> Arg:
    """Constant floats (targets), no gradient."""
    return Arg(shape, "const", low, high)


def case(name: str, ours: Callable, *args: Arg, torch_fn: Callable | None = None, **kw: Any):
    """One row: our function, torch's (the same one if not given), and the inputs."""
    marks = kw.pop("marks", ())
    return pytest.param(ours, torch_fn or ours, args, kw or TOL, id=name, marks=marks)


def inputs(args: tuple[Arg, ...], seed: str) -> list[np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(seed.encode()))
    return [a.make(rng) for a in args]


def as_torch(array: np.ndarray, arg: Arg) -> Any:
    t = torch.from_numpy(array.copy())
    if arg.kind == "int":
        return t.long()
    return t.requires_grad_(arg.wants_grad)


def weighted(out: Any, rng: np.random.Generator) -> list[np.ndarray]:
    """Upstream gradients: one random array per output."""
    outs = out if isinstance(out, tuple) else (out,)
    return [rng.uniform(-1, 1, o.shape).astype(np.float32) for o in outs]


def run_ours(ours, args, arrays, weights, device, backward=False) -> tuple[list, list]:
    """Our outputs and d(sum(out * weight)) / d(each float input), by ``Tensor.gradient`` (or
    ``backward()`` and ``.grad``), realized together."""
    xs = [
        Tensor(a, device=device, requires_grad=backward and g.wants_grad)
        for a, g in zip(arrays, args, strict=True)
    ]
    out = ours(*xs)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o * Tensor(w, device=device)).sum() for o, w in zip(outs, weights, strict=True))
    wanted = [x for x, a in zip(xs, args, strict=True) if a.wants_grad]
    if backward:
        loss.backward()
        grads = [x.grad for x in wanted]
    else:
        grads = loss.gradient(*wanted)
    Tensor.realize(*outs, *grads)
    return [o.numpy() for o in outs], [g.numpy() for g in grads]


def run_torch(theirs, args, arrays, weights) -> tuple[list[np.ndarray], list[np.ndarray]]:
    xs = [as_torch(a, arg) for a, arg in zip(arrays, args, strict=True)]
    out = theirs(*xs)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o * torch.from_numpy(w)).sum() for o, w in zip(outs, weights, strict=True))
    wanted = [x for x, a in zip(xs, args, strict=True) if a.wants_grad]
    grads = torch.autograd.grad(loss, wanted, allow_unused=True)
    grads = [torch.zeros_like(x) if g is None else g for x, g in zip(wanted, grads, strict=True)]
    return [o.detach().numpy() for o in outs], [g.numpy() for g in grads]


def compare(ours, theirs, args, tol, device: str, seed: str, backward: bool = False) -> None:
    arrays = inputs(args, seed)
    weights = weighted(
        theirs(*[as_torch(a, g) for a, g in zip(arrays, args, strict=True)]),
        np.random.default_rng(1),
    )
    got_out, got_grads = run_ours(ours, args, arrays, weights, device, backward)
    want_out, want_grads = run_torch(theirs, args, arrays, weights)
    for i, (g, w) in enumerate(zip(got_out, want_out, strict=True)):
        assert g.shape == w.shape, f"output {i}: shape {g.shape}, torch {w.shape}"
        np.testing.assert_allclose(g, w, **tol, err_msg=f"output {i}")
    assert len(got_grads) == len(want_grads)
    for i, (g, w) in enumerate(zip(got_grads, want_grads, strict=True)):
        assert g.shape == w.shape, f"gradient {i}: shape {g.shape}, torch {w.shape}"
        np.testing.assert_allclose(g, w, **tol, err_msg=f"gradient of input {i}")


# fmt: off
# ---- the cases -----------------------------------------------------------------------------------

ELEMENTWISE = [
    case("add", lambda a, b: a + b, R(3, 4), R(3, 4)),
    case("add_broadcast", lambda a, b: a + b, R(3, 1), R(1, 4)),
    case("add_scalar", lambda a: 2.5 + a, R(3, 4)),
    case("sub_broadcast", lambda a, b: a - b, R(2, 3, 4), R(3, 1)),
    case("rsub_scalar", lambda a: 2 - a, R(5)),
    case("mul", lambda a, b: a * b, R(3, 4), R(4)),
    case("mul_self", lambda a: a * a * a, R(3, 4)),
    case("mul_permuted", lambda a, b: a.permute(1, 0) * b, R(4, 3), R(3, 4)),
    case("div", lambda a, b: a / b, R(3, 4), P(3, 4)),
    case("div_broadcast", lambda a, b: a / b, R(2, 3), P(2, 1)),
    case("rdiv_scalar", lambda a: 1.5 / a, P(6)),
    case("pow_int", lambda a: a**3, R(3, 4)),
    case("pow_neg_int", lambda a: a**-2, P(3, 4)),
    case("pow_float", lambda a: a**2.5, P(3, 4)),
    case("pow_half", lambda a: a**0.5, P(3, 4)),
    case("pow_tensor", lambda a, b: a**b, P(3, 4), R(3, 4)),
    case("pow_tensor_broadcast", lambda a, b: a**b, P(3, 4), R(4, low=-2, high=2)),
    case("rpow", lambda a: 2**a, R(3, 4)),
    case("neg", lambda a: -a, R(3, 4)),
    case("exp", lambda a: a.exp(), R(3, 4)),
    case("log", lambda a: a.log(), P(3, 4)),
    case("exp2", lambda a: a.exp2(), R(3, 4)),
    case("log2", lambda a: a.log2(), P(3, 4)),
    case("sqrt", lambda a: a.sqrt(), P(3, 4)),
    case("rsqrt", lambda a: a.rsqrt(), P(3, 4)),
    case("reciprocal", lambda a: a.reciprocal(), P(3, 4)),
    case("sin", lambda a: a.sin(), R(3, 4)),
    case("cos", lambda a: a.cos(), R(3, 4)),
    case("tan", lambda a: a.tan(), R(3, 4, low=-1.2, high=1.2)),
    case("relu", lambda a: a.relu(), R(3, 4)),
    case("sigmoid", lambda a: a.sigmoid(), R(3, 4)),
    case("tanh", lambda a: a.tanh(), R(3, 4)),
    case("abs", lambda a: a.abs(), R(3, 4)),
    case("square", lambda a: a.square(), R(3, 4)),
    case("maximum", lambda a, b: a.maximum(b), R(3, 4), R(4)),
    case("maximum_ties", lambda a, b: a.maximum(b), T(4, 5), T(4, 5)),
    case("maximum_scalar", lambda a: a.maximum(0.5), R(3, 4), torch_fn=lambda a: a.clamp(min=0.5)),
    case("minimum", lambda a, b: a.minimum(b), R(3, 4), R(3, 1)),
    case("minimum_ties", lambda a, b: a.minimum(b), T(4, 5), T(4, 5)),
    case("where", lambda c, a, b: c.where(a, b), B(3, 4), R(3, 4), R(4),
         torch_fn=lambda c, a, b: torch.where(c, a, b)),
    case("where_scalar", lambda c, a: c.where(a, 0.0), B(3, 4), R(1, 4),
         torch_fn=lambda c, a: torch.where(c, a, 0.0)),
    case("clip", lambda a: a.clip(-1, 1.5), R(3, 4)),
    case("clip_tensors", lambda a, lo, hi: a.clip(lo, hi), R(3, 4), R(4, high=-1), R(3, 1, low=1)),
    case("clip_min_only", lambda a: a.clip(-1), R(3, 4)),
    case("erf", lambda a: a.erf(), R(3, 4)),
    case("gelu_tanh", lambda a: a.gelu(), R(3, 4),
         torch_fn=lambda a: F.gelu(a, approximate="tanh")),
    case("gelu_erf", lambda a: a.gelu("none"), R(3, 4), torch_fn=F.gelu),
    case("quick_gelu", lambda a: a.quick_gelu(), R(3, 4),
         torch_fn=lambda a: a * (1.702 * a).sigmoid()),
    case("silu", lambda a: a.silu(), R(3, 4), torch_fn=F.silu),
    case("leaky_relu", lambda a: a.leaky_relu(0.1), R(3, 4),
         torch_fn=lambda a: F.leaky_relu(a, 0.1)),
    case("elu", lambda a: a.elu(0.5), R(3, 4), torch_fn=lambda a: F.elu(a, 0.5)),
    case("celu", lambda a: a.celu(1.5), R(3, 4), torch_fn=lambda a: F.celu(a, 1.5)),
    case("softplus", lambda a: a.softplus(), R(3, 4), torch_fn=F.softplus),
    case("softplus_beta", lambda a: a.softplus(2, 3), R(3, 4),
         torch_fn=lambda a: F.softplus(a, 2, 3)),
    case("mish", lambda a: a.mish(), R(3, 4), torch_fn=F.mish),
    case("hardswish", lambda a: a.hardswish(), R(3, 5, low=-5, high=5), torch_fn=F.hardswish),
    case("hardsigmoid", lambda a: a.hardsigmoid(), R(3, 5, low=-5, high=5), torch_fn=F.hardsigmoid),
    case("hardtanh", lambda a: a.hardtanh(-0.5, 2), R(3, 4),
         torch_fn=lambda a: F.hardtanh(a, -0.5, 2)),
    case("softsign", lambda a: a.softsign(), R(3, 4), torch_fn=F.softsign),
    case("relu6", lambda a: a.relu6(), R(3, 5, low=-2, high=8), torch_fn=F.relu6),
    case("lerp", lambda a, b, w: a.lerp(b, w), R(3, 4), R(4), R(3, 1)),
    case("lerp_scalar", lambda a, b: a.lerp(b, 0.3), R(3, 4), R(3, 4)),
    case("floor_round_zero_grad", lambda a: a.floor() + a.ceil() + a.trunc() + a.round() + a,
         R(3, 4)),
]

AT_KINKS = [  # torch's choice of subgradient at each kink
    case("relu_at_kinks", lambda a: a.relu(), Z(10)),
    case("abs_at_kinks", lambda a: a.abs(), Z(10)),
    case("clip_at_kinks", lambda a: a.clip(-1, 3), Z(10)),
    case("hardtanh_at_kinks", lambda a: a.hardtanh(), Z(10), torch_fn=F.hardtanh),
    case("relu6_at_kinks", lambda a: a.relu6(), Z(10), torch_fn=F.relu6),
    case("hardsigmoid_at_kinks", lambda a: a.hardsigmoid(), Z(10), torch_fn=F.hardsigmoid),
    case("hardswish_at_kinks", lambda a: a.hardswish(), Z(10), torch_fn=F.hardswish),
    case("leaky_relu_at_kinks", lambda a: a.leaky_relu(0.2), Z(10),
         torch_fn=lambda a: F.leaky_relu(a, 0.2)),
    case("elu_at_kinks", lambda a: a.elu(), Z(10), torch_fn=F.elu),
    case("celu_at_kinks", lambda a: a.celu(2.0), Z(10), torch_fn=lambda a: F.celu(a, 2.0)),
    case("softplus_at_kinks", lambda a: a.softplus(), Z(10), torch_fn=F.softplus),
    case("mish_at_kinks", lambda a: a.mish(), Z(10), torch_fn=F.mish),
    case("erf_at_kinks", lambda a: a.erf(), Z(10)),
    case("gelu_erf_at_kinks", lambda a: a.gelu("none"), Z(10), torch_fn=F.gelu),
    case("bce_logits_at_kinks", lambda x, y: x.binary_crossentropy_logits(y), Z(10), K(10),
         torch_fn=F.binary_cross_entropy_with_logits),
    case("pow_float_at_zero", lambda a: a.abs() ** 2.5, Z(10)),
    case("pow_tensor_at_zero", lambda a, b: a.abs() ** b, Z(10), P(10)),
]

REDUCTIONS = [
    case("sum", lambda a: a.sum(), R(3, 4)),
    case("sum_axis", lambda a: a.sum(1), R(3, 4, 2)),
    case("sum_axes_keepdim", lambda a: a.sum((0, 2), keepdim=True), R(3, 4, 2)),
    case("sum_size1", lambda a: a.sum(1), R(3, 1, 2)),
    case("sum_sliced", lambda a: a[1:, ::2].sum(0), R(4, 5)),
    case("mean", lambda a: a.mean(), R(3, 4)),
    case("mean_axis", lambda a: a.mean(-1, keepdim=True), R(2, 3, 4)),
    case("max", lambda a: a.max(), R(3, 4), torch_fn=lambda a: a.amax()),
    case("max_axis", lambda a: a.max(1), R(3, 4, 2), torch_fn=lambda a: a.amax(1)),
    case("max_ties", lambda a: a.max(1), T(3, 6), torch_fn=lambda a: a.amax(1)),
    case("max_all_ties", lambda a: a.max(), T(3, 6), torch_fn=lambda a: a.amax()),
    case("min_axis", lambda a: a.min(0, keepdim=True), R(3, 4), torch_fn=lambda a: a.amin(0, True)),
    case("min_ties", lambda a: a.min((0, 1)), T(3, 4, 2), torch_fn=lambda a: a.amin((0, 1))),
    case("prod", lambda a: a.prod(), R(2, 3, low=0.5, high=1.5)),
    case("prod_axis", lambda a: a.prod(1), R(3, 5)),
    case("prod_keepdim", lambda a: a.prod(0, keepdim=True), R(3, 4)),
    case("var", lambda a: a.var(1), R(3, 5)),
    case("var_correction0", lambda a: a.var(0, correction=0), R(4, 3)),
    case("var_all", lambda a: a.var(), R(3, 4)),
    case("std", lambda a: a.std(-1, keepdim=True), R(2, 3, 5)),
    case("std_correction0", lambda a: a.std((0, 1), correction=0), R(3, 4, 2)),
    case("logsumexp", lambda a: a.logsumexp(1), R(3, 5), torch_fn=lambda a: a.logsumexp(1)),
    case("logsumexp_all", lambda a: a.logsumexp(), R(3, 5), torch_fn=lambda a: a.logsumexp((0, 1))),
    case("softmax", lambda a: a.softmax(-1), R(3, 5)),
    case("softmax_axis0", lambda a: a.softmax(0), R(3, 5)),
    case("softmax_permuted", lambda a: a.permute(1, 0, 2).softmax(1), R(3, 2, 4)),
    case("log_softmax", lambda a: a.log_softmax(-1), R(3, 5)),
    case("log_softmax_axis1", lambda a: a.log_softmax(1), R(2, 4, 3)),
    case("cumsum", lambda a: a.cumsum(1), R(3, 5)),
    case("cumsum_axis0", lambda a: a.cumsum(0), R(4, 3)),
    case("cumprod", lambda a: a.cumprod(1), R(3, 5)),
    case("cummax", lambda a: a.cummax(1).values, R(3, 5), torch_fn=lambda a: a.cummax(1).values),
    case("cummin", lambda a: a.cummin(0).values, R(4, 3), torch_fn=lambda a: a.cummin(0).values),
    case("topk_values", lambda a: a.topk(2)[0], R(3, 5), torch_fn=lambda a: a.topk(2).values),
    case("sort_values", lambda a: a.sort(0)[0], R(4, 3), torch_fn=lambda a: a.sort(0).values),
]


def neg_step(a):
    """torch has no negative slice steps: a[::-2] and a[4:0:-2] of a 6-long axis by flips."""
    return a.flip(0)[::2], a.flip(0)[1:5:2]


MOVEMENT = [
    case("reshape", lambda a: a.reshape(4, 3), R(3, 4)),
    case("reshape_permuted", lambda a: a.permute(1, 0).reshape(-1), R(3, 4)),
    case("permute", lambda a: a.permute(2, 0, 1), R(2, 3, 4)),
    case("transpose", lambda a: a.transpose(0, 2), R(2, 3, 4)),
    case("T", lambda a: a.T, R(3, 4)),
    case("expand", lambda a: a.expand(3, 4), R(3, 1)),
    case("expand_new_axes", lambda a: a.expand(2, 3, 4), R(3, 1)),
    case("pad", lambda a: a.pad(((1, 2), (0, 1))), R(3, 4),
         torch_fn=lambda a: F.pad(a, (0, 1, 1, 2))),
    case("pad_value", lambda a: a.pad((None, (2, 1)), value=2.0), R(3, 4),
         torch_fn=lambda a: F.pad(a, (2, 1), value=2.0)),
    case("pad_negative", lambda a: a.pad(((-1, 2), (1, -2))), R(3, 4),
         torch_fn=lambda a: F.pad(a, (1, -2, -1, 2))),
    case("shrink", lambda a: a.shrink(((1, 3), None)), R(4, 3), torch_fn=lambda a: a[1:3]),
    case("slice_steps", lambda a: a[1:, ::2], R(4, 5)),
    case("slice_step3", lambda a: a[:, 1::3], R(2, 8)),
    case("slice_neg_step", lambda a: (a[::-2], a[4:0:-2]), R(6, 2), torch_fn=neg_step),
    case("index_int", lambda a: a[..., -1], R(3, 4)),
    case("index_none", lambda a: a[None, 1, :], R(3, 4)),
    case("flip", lambda a: a.flip(0), R(3, 4)),
    case("flip_axes", lambda a: a.flip((0, 2)), R(2, 3, 4)),
    case("squeeze", lambda a: a.squeeze(1), R(3, 1, 4)),
    case("squeeze_all", lambda a: a.squeeze(), R(1, 3, 1)),
    case("unsqueeze", lambda a: a.unsqueeze(-1), R(3, 4)),
    case("flatten", lambda a: a.flatten(1), R(2, 3, 4)),
    case("repeat", lambda a: a.repeat(2, 1, 3), R(3, 4)),
    case("tile", lambda a: a.tile((2, 1)), R(3, 4)),
    case("roll", lambda a: a.roll(1, 0), R(3, 4)),
    case("roll_dims", lambda a: a.roll((1, -2), (0, 1)), R(3, 4)),
    case("roll_flat", lambda a: a.roll(5), R(3, 4)),
    case("cat", lambda a, b, c: a.cat(b, c, dim=1), R(2, 3), R(2, 1), R(2, 4),
         torch_fn=lambda a, b, c: torch.cat([a, b, c], 1)),
    case("cat_permuted", lambda a, b: a.T.cat(b), R(4, 3), R(2, 4),
         torch_fn=lambda a, b: torch.cat([a.T, b])),
    case("stack", lambda a, b: a.stack(b, dim=1), R(2, 3), R(2, 3),
         torch_fn=lambda a, b: torch.stack([a, b], 1)),
    case("split", lambda a: a.split(2, 1), R(3, 5)),
    case("split_sizes", lambda a: a.split([1, 3], 0), R(4, 2)),
    case("chunk", lambda a: a.chunk(3, 1), R(2, 7)),
    case("gather", lambda a, i: a.gather(1, i), R(3, 5), I(5, 3, 4)),
    case("gather_dim0_smaller", lambda a, i: a.gather(0, i), R(4, 5), I(4, 6, 3)),
    case("getitem_tensor", lambda a, i: a[i], R(5, 3), I(5, 2, 4)),
    case("getitem_tensor_axis1", lambda a, i: a[:, i], R(3, 5), I(5, 6)),
    case("getitem_two_tensors", lambda a, i, j: a[i, :, j], R(4, 2, 5), I(4, 3), I(5, 3)),
    case("getitem_negative", lambda a, i: a[i], R(5, 3), I(0, 4, low=-5)),
    case("getitem_list", lambda a: a[[0, 2, 2]], R(4, 3)),
    case("masked_fill", lambda a, m: a.masked_fill(m, 2.0), R(3, 4), B(3, 4)),
    case("tril", lambda a: a.tril(), R(4, 4)),
    case("triu_diagonal", lambda a: a.triu(1), R(2, 3, 4), torch_fn=lambda a: a.triu(1)),
    case("one_hot_times", lambda a, i: a * i.one_hot(4), R(3, 4), I(4, 3),
         torch_fn=lambda a, i: a * F.one_hot(i, 4)),
]

LINALG = [
    case("matmul", lambda a, b: a @ b, R(3, 4), R(4, 5)),
    case("matmul_batched", lambda a, b: a @ b, R(2, 3, 4), R(2, 4, 5)),
    case("matmul_broadcast", lambda a, b: a @ b, R(2, 1, 3, 4), R(3, 4, 2)),
    case("matmul_vec_mat", lambda a, b: a @ b, R(4), R(4, 3)),
    case("matmul_mat_vec", lambda a, b: a @ b, R(3, 4), R(4)),
    case("matmul_transposed", lambda a, b: a.T @ b.T, R(4, 3), R(5, 4)),
    case("dot", lambda a, b: a.dot(b), R(5), R(5)),
    case("einsum_matmul", lambda a, b: Tensor.einsum("ij,jk->ik", a, b), R(3, 4), R(4, 2),
         torch_fn=lambda a, b: torch.einsum("ij,jk->ik", a, b)),
    case("einsum_batched", lambda a, b: Tensor.einsum("bhqd,bhkd->bhqk", a, b), R(2, 2, 3, 4),
         R(2, 2, 5, 4),
         torch_fn=lambda a, b: torch.einsum("bhqd,bhkd->bhqk", a, b)),
    case("einsum_outer", lambda a, b: Tensor.einsum("i,j", a, b), R(3), R(4),
         torch_fn=lambda a, b: torch.einsum("i,j", a, b)),
    case("linear", lambda x, w, b: x.linear(w, b), R(2, 3, 4), R(4, 5), R(5),
         torch_fn=lambda x, w, b: F.linear(x, w.T, b)),
]

CONVS = [  # (id, input shape, weight shape, keyword arguments)
    ("conv2d", (2, 2, 5, 6), (3, 2, 3, 3), {}),
    ("conv2d_stride_pad", (1, 2, 6, 5), (2, 2, 3, 2), {"stride": 2, "padding": 1}),
    ("conv2d_dilation", (1, 2, 7, 6), (2, 2, 3, 2), {"dilation": 2, "padding": (2, 1)}),
    ("conv2d_groups", (2, 4, 5, 5), (4, 2, 3, 3), {"groups": 2, "stride": (1, 2)}),
    ("conv2d_depthwise", (1, 3, 5, 5), (3, 1, 3, 3), {"groups": 3, "padding": 1}),
    ("conv2d_same", (1, 2, 5, 5), (2, 2, 4, 4), {"padding": "same"}),
    ("conv1d", (2, 3, 8), (4, 3, 3), {"stride": 2, "padding": 2, "dilation": 2}),
    ("conv3d", (1, 2, 3, 4, 4), (2, 2, 2, 3, 2), {"padding": 1, "stride": (1, 2, 1)}),
]
CONV_TRANSPOSES = [
    ("conv_transpose2d", (1, 2, 4, 4), (2, 3, 3, 3), {}),
    ("conv_transpose2d_stride", (2, 4, 3, 4), (4, 1, 3, 2),
     {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2}),
    ("conv_transpose2d_dilation", (1, 2, 3, 3), (2, 2, 2, 3), {"stride": (2, 1), "dilation": 2}),
    ("conv_transpose1d", (1, 3, 5), (3, 2, 4), {"stride": 3, "padding": 1}),
]
TORCH_CONV = {3: F.conv1d, 4: F.conv2d, 5: F.conv3d}
OUR_CONV = {3: Tensor.conv1d, 4: Tensor.conv2d, 5: Tensor.conv3d}
TORCH_CONV_T = {3: F.conv_transpose1d, 4: F.conv_transpose2d}


def conv_case(name, xs, ws, kw):
    ours, theirs = OUR_CONV[len(ws)], TORCH_CONV[len(ws)]
    return case(name, lambda x, w, b: ours(x, w, b, **kw), R(*xs), R(*ws), R(ws[0]),
                torch_fn=lambda x, w, b: theirs(x, w, b, **kw))


def conv_transpose_case(name, xs, ws, kw):
    theirs, cout = TORCH_CONV_T[len(ws)], ws[1] * kw.get("groups", 1)
    return case(name, lambda x, w, b: x.conv_transpose2d(w, b, **kw), R(*xs), R(*ws), R(cout),
                torch_fn=lambda x, w, b: theirs(x, w, b, **kw))


def batchnorm_ours(x, w, b):
    """Training-mode batch norm: the statistics are the batch's, so gradients flow into them."""
    mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3), correction=0)
    return x.batchnorm(w, b, mean, (var + 1e-5).rsqrt())


def batchnorm_torch(x, w, b, mean, var):
    """F.batch_norm gives running statistics no gradient; the formula does."""
    w, b, mean, var = (t.reshape(1, -1, 1, 1) for t in (w, b, mean, var))
    return (x - mean) * w / (var + 1e-5).sqrt() + b


def cross_entropy_probs(x, p):
    return x.cross_entropy(p.softmax(1), label_smoothing=0.2)


NN = [
    *(conv_case(*c) for c in CONVS),
    case("conv2d_no_bias_permuted", lambda x, w: x.transpose(2, 3).conv2d(w, padding=1),
         R(1, 2, 5, 4), R(2, 2, 3, 3),
         torch_fn=lambda x, w: F.conv2d(x.transpose(2, 3), w, padding=1)),
    *(conv_transpose_case(*c) for c in CONV_TRANSPOSES),
    case("max_pool2d", lambda x: x.max_pool2d(2), R(2, 2, 4, 6),
         torch_fn=lambda x: F.max_pool2d(x, 2)),
    case("max_pool2d_overlap", lambda x: x.max_pool2d(3, 1, 1), R(1, 2, 5, 5),
         torch_fn=lambda x: F.max_pool2d(x, 3, 1, 1)),
    case("max_pool2d_ceil", lambda x: x.max_pool2d(3, 2, ceil_mode=True), R(1, 2, 6, 7),
         torch_fn=lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True)),
    case("avg_pool2d", lambda x: x.avg_pool2d((3, 2), (2, 1)), R(2, 2, 5, 4),
         torch_fn=lambda x: F.avg_pool2d(x, (3, 2), (2, 1))),
    case("avg_pool2d_pad", lambda x: x.avg_pool2d(3, 2, 1, count_include_pad=False), R(1, 2, 5, 6),
         torch_fn=lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False)),
    case("avg_pool2d_ceil", lambda x: x.avg_pool2d(2, 3, ceil_mode=True), R(1, 1, 7, 5),
         torch_fn=lambda x: F.avg_pool2d(x, 2, 3, ceil_mode=True)),
    case("adaptive_avg_pool2d", lambda x: x.adaptive_avg_pool2d((3, 2)), R(2, 2, 7, 5),
         torch_fn=lambda x: F.adaptive_avg_pool2d(x, (3, 2))),
    case("interpolate_bilinear", lambda x: x.interpolate((5, 7), mode="bilinear"), R(1, 2, 3, 4),
         torch_fn=lambda x: F.interpolate(x, (5, 7), mode="bilinear")),
    case("interpolate_bilinear_corners", lambda x: x.interpolate((2, 7), None, "bilinear", True),
         R(1, 2, 4, 3), torch_fn=lambda x: F.interpolate(x, (2, 7), None, "bilinear", True)),
    case("interpolate_nearest", lambda x: x.interpolate(scale_factor=2), R(1, 2, 3, 2),
         torch_fn=lambda x: F.interpolate(x, scale_factor=2)),
    case("batchnorm_inference", lambda x, w, b, m, v: x.batchnorm(w, b, m, (v + 1e-5).rsqrt()),
         R(2, 3, 2, 2), R(3), R(3), R(3), P(3), torch_fn=batchnorm_torch),
    case("batchnorm_training", batchnorm_ours, R(2, 3, 3, 2), R(3), R(3),
         torch_fn=lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True)),
    case("layernorm", lambda x: x.layernorm(), R(3, 5), torch_fn=lambda x: F.layer_norm(x, (5,))),
    case("layernorm_2axes", lambda x: x.transpose(0, 2).layernorm((-2, -1), eps=1e-3), R(4, 3, 2),
         torch_fn=lambda x: F.layer_norm(x.transpose(0, 2), (3, 4), eps=1e-3)),
    case("sdpa", lambda q, k, v: q.scaled_dot_product_attention(k, v), R(2, 2, 3, 4), R(2, 2, 5, 4),
         R(2, 2, 5, 3), torch_fn=F.scaled_dot_product_attention),
    case("sdpa_bool_mask", lambda q, k, v, m: q.scaled_dot_product_attention(k, v, m),
         R(1, 2, 3, 4),
         R(1, 2, 5, 4), R(1, 2, 5, 3), B(3, 5), torch_fn=F.scaled_dot_product_attention),
    case("sdpa_float_mask", lambda q, k, v, m: q.scaled_dot_product_attention(k, v, m),
         R(1, 2, 3, 4),
         R(1, 2, 5, 4), R(1, 2, 5, 3), R(1, 3, 5), torch_fn=F.scaled_dot_product_attention),
    case("sdpa_causal", lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
         R(2, 4, 4), R(2, 4, 4), R(2, 4, 3),
         torch_fn=lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)),
    case("embedding", lambda i, w: i.embedding(w), I(6, 2, 3), R(6, 4), torch_fn=F.embedding),
]

LOSSES = [
    case("cross_entropy", lambda x, t: x.cross_entropy(t), R(4, 5), I(5, 4),
         torch_fn=F.cross_entropy),
    case("cross_entropy_smoothing", lambda x, t: x.cross_entropy(t, label_smoothing=0.1), R(4, 5),
         I(5, 4),
         torch_fn=lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1)),
    case("cross_entropy_spatial_sum", lambda x, t: x.cross_entropy(t, reduction="sum"),
         R(2, 3, 2, 2),
         I(3, 2, 2, 2), torch_fn=lambda x, t: F.cross_entropy(x, t, reduction="sum")),
    case("cross_entropy_weight_ignore",
         lambda x, t, w: x.cross_entropy(t, weight=w, ignore_index=1, label_smoothing=0.1), R(6, 4),
         I(4, 6), K(4, low=0.5, high=2),
         torch_fn=lambda x, t, w: F.cross_entropy(x, t, w, ignore_index=1, label_smoothing=0.1)),
    case("cross_entropy_none", lambda x, t: x.cross_entropy(t, reduction="none"), R(4, 3), I(3, 4),
         torch_fn=lambda x, t: F.cross_entropy(x, t, reduction="none")),
    case("cross_entropy_probs", cross_entropy_probs, R(4, 5), R(4, 5),
         torch_fn=lambda x, p: F.cross_entropy(x, p.softmax(1), label_smoothing=0.2)),
    case("sparse_categorical_crossentropy", lambda x, t: x.sparse_categorical_crossentropy(t),
         R(2, 3, 5),
         I(5, 2, 3), torch_fn=lambda x, t: F.cross_entropy(x.permute(0, 2, 1), t)),
    case("sparse_categorical_smoothing_ignore",
         lambda x, t: x.sparse_categorical_crossentropy(t, label_smoothing=0.2), R(6, 4),
         I(4, 6, low=-1),
         torch_fn=lambda x, t: F.cross_entropy(x, t, ignore_index=-1, label_smoothing=0.2)),
    case("binary_crossentropy", lambda p, y: p.binary_crossentropy(y), R(3, 4, low=0.05, high=0.95),
         K(3, 4), torch_fn=F.binary_cross_entropy),
    case("binary_crossentropy_logits", lambda x, y: x.binary_crossentropy_logits(y), R(3, 4),
         R(3, 4, low=0, high=1),
         torch_fn=F.binary_cross_entropy_with_logits),
    case("binary_crossentropy_logits_pos_weight",
         lambda x, y, w: x.binary_crossentropy_logits(y, "sum", w), R(3, 4), K(3, 4),
         K(4, low=0.5, high=2),
         torch_fn=lambda x, y, w: F.binary_cross_entropy_with_logits(x, y, reduction="sum",
                                                                    pos_weight=w)),
    case("mse", lambda x, y: x.mse_loss(y), R(3, 4), R(3, 4), torch_fn=F.mse_loss),
    case("mse_sum_broadcast", lambda x, y: x.mse_loss(y, "sum"), R(3, 4), R(4),
         torch_fn=lambda x, y: F.mse_loss(x, y.expand(3, 4), reduction="sum")),
    case("l1", lambda x, y: x.l1_loss(y), R(3, 4), R(3, 4), torch_fn=F.l1_loss),
    case("nll", lambda x, t: x.log_softmax(1).nll_loss(t), R(4, 5), I(5, 4),
         torch_fn=lambda x, t: F.nll_loss(x.log_softmax(1), t)),
    case("nll_weight_ignore", lambda x, t, w: x.nll_loss(t, w, ignore_index=2), R(5, 3), I(3, 5),
         K(3, low=0.5, high=2),
         torch_fn=lambda x, t, w: F.nll_loss(x, t, w, ignore_index=2)),
]

# fmt: on

ALL = ELEMENTWISE + AT_KINKS + REDUCTIONS + MOVEMENT + LINALG + NN + LOSSES


@pytest.mark.parametrize("ours, theirs, args, tol", ALL)
def test_gradient_matches_torch(request, ours, theirs, args, tol):
    compare(ours, theirs, args, tol, "CPU", request.node.callspec.id)


#: The interpreter is slow: a few cases covering each kind of derivative rule.
ON_PYTHON = {
    "mul_permuted",
    "div_broadcast",
    "pow_tensor",
    "sin",
    "maximum_ties",
    "where",
    "max_ties",
    "softmax_permuted",
    "slice_neg_step",
    "pad_value",
    "getitem_tensor",
    "matmul_broadcast",
    "conv2d_stride_pad",
    "cross_entropy_smoothing",
}


@pytest.mark.parametrize("ours, theirs, args, tol", [p for p in ALL if p.id in ON_PYTHON])
def test_gradient_matches_torch_python_device(request, ours, theirs, args, tol):
    compare(ours, theirs, args, tol, "PYTHON", request.node.callspec.id)


#: ``backward()`` and ``.grad`` share ``Tensor.gradient``'s rules; a few cases check the plumbing.
BY_BACKWARD = {
    "mul_permuted",
    "pow_tensor_broadcast",
    "where",
    "matmul_broadcast",
    "split",
    "conv2d_groups",
    "batchnorm_training",
    "cross_entropy_weight_ignore",
}


@pytest.mark.parametrize("ours, theirs, args, tol", [p for p in ALL if p.id in BY_BACKWARD])
def test_backward_matches_torch(request, ours, theirs, args, tol):
    compare(ours, theirs, args, tol, "CPU", request.node.callspec.id, backward=True)


# ---- what backward() does with .grad -------------------------------------------------------------

X = [1.0, -2.0, 0.5]


def leaf(requires_grad: bool | None = True) -> tuple[Tensor, Any]:
    """The same leaf in fusegrad and torch."""
    theirs = torch.tensor(X, requires_grad=bool(requires_grad))
    return Tensor(X, requires_grad=requires_grad), theirs


def test_grad_accumulates_across_backward_calls():
    (x, tx) = leaf()
    for t in (x, tx):
        (t * t).sum().backward()
        (t * 3).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())  # 2x + 3


def test_gradient_does_not_touch_grad():
    x, _ = leaf()
    (g,) = (x * x).sum().gradient(x)
    assert x.grad is None and g.tolist() == [2.0, -4.0, 1.0]
    (x * 3).sum().backward()
    before = x.grad
    (x * x).sum().gradient(x)[0].realize()
    assert x.grad is before and x.grad.tolist() == [3.0, 3.0, 3.0]


def test_detach_stops_gradient():
    x, tx = leaf()
    (g,) = (x.detach() * x).sum().gradient(x)  # d(c * x) = c, not 2x
    (tg,) = torch.autograd.grad((tx.detach() * tx).sum(), tx)
    np.testing.assert_allclose(g.numpy(), tg.numpy())
    assert g.tolist() == X


@pytest.mark.parametrize("flag", [False, None])
def test_input_without_requires_grad_gets_no_grad(flag):
    x, _ = leaf()
    w = Tensor([2.0, 3.0, 4.0], requires_grad=flag)
    (x * w).sum().backward()
    assert w.grad is None and x.grad.tolist() == [2.0, 3.0, 4.0]


def test_backward_of_non_scalar_needs_gradient():
    x, _ = leaf()
    with pytest.raises(ShapeError, match=r"shape \(3,\) needs gradient="):
        (x * x).backward()


def test_backward_of_non_scalar_with_gradient():
    x, tx = leaf()
    g = [0.5, -1.0, 2.0]
    (x * x).backward(gradient=Tensor(g))
    (tx * tx).backward(gradient=torch.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_backward_after_item():
    x, tx = leaf()
    loss, tloss = (x * x).sum(), (tx * tx).sum()
    assert loss.item() == pytest.approx(tloss.item())  # realizes the loss first
    loss.backward()
    tloss.backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_backward_through_realized_intermediate():
    x, tx = leaf()
    y, ty = x * 2, tx * 2
    y.numpy()
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    assert x.grad is not None
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy())


def test_conv_input_gradient_is_a_transposed_convolution():
    """Taken through the window ops, d conv / d input writes every window element (25x the
    input for a 5x5 kernel) before summing; the conv's own rule keeps every buffer small."""
    x = Tensor.rand(2, 3, 12, 12, requires_grad=True)
    w = Tensor.rand(4, 3, 5, 5, requires_grad=True)
    (gx,) = x.conv2d(w).sum().gradient(x)
    written = [step.ast.src[0].src[0].arg[1] for step in gx.schedule()]
    assert written and max(written) < 4 * x.numel()


def test_conv_input_gradient_computes_the_input_positions_only():
    """The gradient of a padded convolution's input is the transposed convolution cropped by
    the padding, not the padded input's gradient cut afterwards: read twice (a batch norm's
    gradient), that one was realized uncut, a 4x4 map's as 6x6 (2.25x the work). With a stride
    the phases' convolution computes only the positions of phases that land in the input:
    (4, 4) for an 8x8 input through a 5x5 kernel of stride 2 and padding 2, not (6, 6)."""
    for size, kernel, stride, padding, want in ((4, 3, 1, 1, (4, 4)), (8, 5, 2, 2, (4, 4))):
        x = Tensor.rand(4, 8, size, size, requires_grad=True)
        w = Tensor.rand(8, 8, kernel, kernel, requires_grad=True)
        (gx,) = x.conv2d(w, stride=stride, padding=padding).sum().gradient(x)
        both = gx.sum((0, 2, 3)) + (gx * gx).sum((0, 2, 3))  # (gx realized, read twice)
        convs = [
            step.ast.src[0].src[1].shape
            for step in both.schedule()
            if any(u.op is Ops.REDUCE_AXIS for u in toposort([step.ast]))
            and len(step.ast.src[0].src[1].shape) > 2
        ]
        assert convs and all(shape[4:6] == want for shape in convs), convs


def test_conv_weight_gradient_sums_chunks_of_the_batch_on_large_maps_only():
    """A batch of 32 on a 16x16 map sums chunks of 8 samples first, then the chunks (two
    reductions); on a 4x4 map the whole batch stays in cache and one reduction sums it all
    (``nn_ops.CHUNK_POSITIONS``). The values match either way."""
    from fusegrad.tensor.nn_ops import CHUNK_POSITIONS

    for size, reductions in ((4, 1), (16, 2)):
        assert (size * size >= CHUNK_POSITIONS) == (reductions == 2)
        rng = np.random.default_rng(size)
        x_np = rng.standard_normal((32, 8, size, size)).astype(np.float32)
        w_np = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
        x, w = Tensor(x_np), Tensor(w_np, requires_grad=True)
        (gw,) = x.conv2d(w, padding=1).sum().gradient(w)
        steps = gw.schedule()
        assert sum(any(u.op is Ops.REDUCE_AXIS for u in toposort([s.ast])) for s in steps) == (
            reductions
        )
        tx, tw = torch.from_numpy(x_np), torch.from_numpy(w_np).requires_grad_()
        torch.nn.functional.conv2d(tx, tw, padding=1).sum().backward()
        np.testing.assert_allclose(gw.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-3)


CONV_CASES = [  # (input, weight, stride, padding, dilation, groups)
    ((2, 4, 7, 7), (6, 4, 3, 3), 1, 1, 1, 1),
    ((2, 4, 8, 8), (6, 4, 3, 3), 2, 1, 1, 1),
    ((2, 4, 9, 9), (6, 2, 3, 3), 2, 1, 1, 2),
    ((1, 3, 10, 7), (4, 3, 5, 5), 3, 2, 1, 1),
    ((2, 4, 8, 8), (4, 4, 3, 3), 1, 2, 2, 1),
    ((2, 6, 11, 9), (6, 2, 3, 3), 2, (1, 0), 1, 3),
    ((1, 2, 6, 6), (2, 2, 3, 3), 1, 3, 1, 1),
    ((1, 2, 7, 8), (3, 2, 4, 4), 3, 1, 1, 1),
    ((1, 2, 12, 12), (2, 2, 3, 3), 2, 1, 3, 1),
    ((1, 2, 9, 9), (2, 2, 3, 3), 2, (2, 1, 0, 1), 1, 1),
]


def _matches_torch(shape, wshape, seed, theirs, ours) -> None:
    """``ours(x, w)`` against ``theirs(x, w)`` (torch), values and both gradients, for random
    inputs of ``shape`` and ``wshape`` and a random output gradient."""
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal(shape, np.float32), rng.standard_normal(wshape, np.float32)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    out = theirs(tx, tw)
    g = rng.standard_normal(out.shape).astype(np.float32)
    (out * torch.from_numpy(g)).sum().backward()
    ox, ow = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    value = ours(ox, ow)
    assert value.shape == tuple(out.shape)
    (value * Tensor(g)).sum().backward()
    np.testing.assert_allclose(value.numpy(), out.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ox.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ow.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape, wshape, stride, padding, dilation, groups", CONV_CASES)
def test_conv_gradients_through_padding_match_torch(
    shape, wshape, stride, padding, dilation, groups
):
    def theirs(x, w):
        if isinstance(padding, tuple) and len(padding) == 4:  # (F.pad's order: pad first)
            return F.conv2d(F.pad(x, padding), w, None, stride, 0, dilation, groups)
        return F.conv2d(x, w, None, stride, padding, dilation, groups)

    _matches_torch(
        shape, wshape, 0, theirs, lambda x, w: x.conv2d(w, None, stride, padding, dilation, groups)
    )


TRANSPOSED_CASES = [  # (input, weight, stride, padding, output_padding, groups)
    ((2, 4, 4, 4), (4, 6, 3, 3), 2, 1, 1, 1),
    ((2, 4, 5, 5), (4, 6, 4, 4), 2, 1, 0, 1),
    ((1, 4, 3, 5), (4, 3, 3, 3), 3, 0, 2, 2),
    ((1, 2, 6, 6), (2, 4, 5, 5), 2, 2, 1, 1),
    ((1, 2, 4, 4), (2, 2, 3, 3), 2, 3, 0, 1),
    ((2, 3, 7, 6), (3, 4, 4, 4), 3, (2, 1), (1, 2), 1),
    ((1, 2, 3, 3), (2, 2, 1, 1), 2, 0, 1, 1),
]


@pytest.mark.parametrize("shape, wshape, stride, padding, extra, groups", TRANSPOSED_CASES)
def test_strided_conv_transpose_and_gradients_match_torch(
    shape, wshape, stride, padding, extra, groups
):
    _matches_torch(
        shape,
        wshape,
        1,
        lambda x, w: F.conv_transpose2d(x, w, None, stride, padding, extra, groups),
        lambda x, w: x.conv_transpose2d(w, None, stride, padding, extra, groups),
    )


def test_conv_second_order_gradient_matches_torch():
    rng = np.random.default_rng(0)
    x, w = (
        rng.standard_normal((2, 3, 7, 7), np.float32),
        rng.standard_normal((4, 3, 3, 3), np.float32),
    )
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    out = torch.nn.functional.conv2d(tx, tw, stride=2, padding=1)
    (tgx,) = torch.autograd.grad((out * out).sum(), tx, create_graph=True)
    tgx.sum().backward()
    ours_x, ours_w = Tensor(x, requires_grad=True), Tensor(w, requires_grad=True)
    y = ours_x.conv2d(ours_w, stride=2, padding=1)
    (gx,) = (y * y).sum().gradient(ours_x)
    gx.sum().backward()
    np.testing.assert_allclose(gx.numpy(), tgx.detach().numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ours_w.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-4)
