"""The rest of what model code takes from ``torch.nn.functional``: more losses, gated and
normalising layers, norms, unbinding and sampling, each a few lines over existing ops.

These live apart from ``tensor/nn_ops.py`` (convolutions, pools, attention and the classic losses)
to keep both short; ``Tensor`` inherits ``FunctionalMixin`` like its other mixins.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

from fusegrad.errors import InvalidArgument, InvalidIndex, InvalidValue, ShapeError
from fusegrad.tensor.base import TensorBase
from fusegrad.tensor.nn_ops import _check_reduction, _reduce_loss

if TYPE_CHECKING:
    from fusegrad.tensor.tensor import Tensor


class FunctionalMixin(TensorBase):
    """Losses, layers and helpers of ``torch.nn.functional`` built from other Tensor ops."""

    def smooth_l1_loss(self, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
        """|d| - beta/2 where |d| >= beta, else d**2 / (2*beta), for d = self - target (beta 0:
        L1)."""
        d = (self - target).abs()
        if beta == 0:
            return _reduce_loss(d, reduction)
        return _reduce_loss((d < beta).where(d.square() * (0.5 / beta), d - 0.5 * beta), reduction)

    def huber_loss(self, target: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:
        """d**2 / 2 where |d| < delta, else delta * (|d| - delta/2): smooth L1 scaled by delta."""
        d = (self - target).abs()
        return _reduce_loss(
            (d < delta).where(d.square() * 0.5, (d - 0.5 * delta) * delta), reduction
        )

    def kl_div(self, target: Tensor, reduction: str = "mean", log_target: bool = False) -> Tensor:
        """KL(target || exp(self)) per element, ``self`` holding log-probabilities: target *
        (log(target) - self), 0 where target is 0. ``reduction="batchmean"`` divides the sum by
        the batch size (the true KL divergence; "mean" divides by every element, as torch does)."""
        if log_target:
            loss = target.exp() * (target - self)
        else:
            loss = (target == 0).where(0, target * target.log()) - target * self  # 0 log 0 = 0
        if reduction == "batchmean":
            return loss.sum() / (self.shape[0] if self.ndim else 1)
        return _reduce_loss(loss, reduction)

    def cosine_similarity(self, other: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
        """sum(a * b) / (max(|a|, eps) * max(|b|, eps)) along ``dim``, after broadcasting."""
        a_norm = self.square().sum(dim).sqrt().maximum(eps)
        b_norm = other.square().sum(dim).sqrt().maximum(eps)
        return (self * other).sum(dim) / (a_norm * b_norm)

    def glu(self, dim: int = -1) -> Tensor:
        """The gated linear unit: the first half of ``dim`` times the sigmoid of the second."""
        if self.shape[dim] % 2:
            raise ShapeError(f"glu halves dimension {dim}, but its size {self.shape[dim]} is odd")
        a, b = self.chunk(2, dim)
        return a * b.sigmoid()

    def instance_norm(
        self, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
    ) -> Tensor:
        """Normalise each channel of each sample over its spatial axes (N, C, ...), then scale by
        ``weight`` and shift by ``bias`` per channel."""
        if self.ndim < 3:
            raise ShapeError(f"instance_norm wants (N, C, spatial...), got shape {self.shape}")
        axes = tuple(range(2, self.ndim))
        centred = self - self.mean(axes, keepdim=True)
        out = centred * (centred.square().mean(axes, keepdim=True) + eps).rsqrt()
        per_channel = (1, -1, *([1] * len(axes)))
        if weight is not None:
            out = out * weight.reshape(per_channel)
        return out if bias is None else out + bias.reshape(per_channel)

    def pixel_shuffle(self, upscale_factor: int) -> Tensor:
        """(..., C*r*r, H, W) -> (..., C, H*r, W*r): channels become r x r blocks of pixels."""
        r = upscale_factor
        *batch, c, h, w = self.shape
        if c % (r * r):
            raise ShapeError(
                f"pixel_shuffle: {c} channels do not divide by upscale_factor**2 = {r * r}"
            )
        n = len(batch)
        x = self.reshape(*batch, c // (r * r), r, r, h, w)
        x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
        return x.reshape(*batch, c // (r * r), h * r, w * r)

    def norm(
        self,
        p: float | str = 2,
        dim: int | tuple[int, ...] | None = None,
        keepdim: bool = False,
    ) -> Tensor:
        """The vector p-norm over ``dim`` (every axis by default): (sum |x|**p)**(1/p); "fro" is 2,
        inf the largest |x|, -inf the smallest, 0 the count of nonzeros."""
        x = self.abs() if self.dtype.is_float else self.abs().float()
        if p in ("fro", 2):
            return x.square().sum(dim, keepdim=keepdim).sqrt()
        if p == math.inf:
            return x.max(dim, keepdim=keepdim)
        if p == -math.inf:
            return x.min(dim, keepdim=keepdim)
        if p == 0:
            return (x != 0).cast(x.dtype).sum(dim, keepdim=keepdim)
        if isinstance(p, str):
            raise InvalidArgument(f"norm: p={p!r} is not a number, inf or 'fro'")
        return x.pow(p).sum(dim, keepdim=keepdim).pow(1 / p)

    def unbind(self, dim: int = 0) -> tuple[Tensor, ...]:
        """The slices along ``dim``, each without that axis."""
        dim = dim + self.ndim if dim < 0 else dim
        if not 0 <= dim < self.ndim:
            raise InvalidIndex(f"unbind: dim {dim} is out of range for a {self.ndim}-d tensor")
        return tuple(self[(slice(None),) * dim + (i,)] for i in range(self.shape[dim]))

    def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Tensor:
        """``num_samples`` category indices per row of weights (1-d or 2-d, need not sum to 1),
        drawn by inverting the cumulative distribution; without replacement (torch's default),
        several samples are the ``num_samples`` first categories of an exponential race, each
        category's time Exp(1) / weight: drawn in that order, they are distributed as torch's
        draws one at a time, each removing the category drawn."""
        if self.ndim not in (1, 2):
            raise ShapeError(f"multinomial wants 1-d or 2-d weights, got shape {self.shape}")
        if not isinstance(num_samples, int) or num_samples < 1:
            raise InvalidValue(f"multinomial needs num_samples >= 1, got {num_samples!r}")
        weights = self.reshape(1, -1) if self.ndim == 1 else self
        if not replacement and num_samples > 1:
            picked = weights._raced(num_samples)
            return picked.reshape(num_samples) if self.ndim == 1 else picked
        cdf = weights.cumsum(1)
        cdf = cdf / cdf[:, -1:]
        u = self.rand(weights.shape[0], num_samples, 1, device=self.device)
        picked = (cdf.unsqueeze(1) < u).sum(2).cast("int32").minimum(weights.shape[1] - 1)
        return picked.reshape(num_samples) if self.ndim == 1 else picked

    def _raced(self, count: int) -> Tensor:
        """``count`` categories of each row of these (rows, n) weights without replacement: the
        first ``count`` to finish a race in which category i takes -log(1 - U) / w_i (an
        exponential time of rate w_i; a weight of 0 never finishes). The weights are read to
        check, as torch does, that each row has ``count`` positive ones."""
        n = self.shape[1]
        if count > n:
            raise InvalidArgument(
                f"multinomial cannot draw {count} samples without replacement from {n} "
                "categories; draw at most that many, or pass replacement=True"
            )
        positive = int((self > 0).sum(1).min().item()) if self.shape[0] else count
        if positive < count:
            raise InvalidArgument(
                f"multinomial without replacement: a row has only {positive} categories of "
                f"positive weight, fewer than the {count} samples asked for"
            )
        finish = -(1 - self.rand(*self.shape, device=self.device)).log() / self
        return finish.topk(count, 1, largest=False)[1].cast("int32")

    # ---- activations -----------------------------------------------------------------------------

    def prelu(self, weight: Tensor) -> Tensor:
        """x where x > 0, else weight * x, ``weight`` one slope or one per channel (axis 1).

        >>> Tensor([-2.0, 3.0]).prelu(Tensor([0.25])).tolist()
        [-0.5, 3.0]
        """
        channels = self.shape[1] if self.ndim >= 2 else 1
        if weight.numel() not in (1, channels):
            raise ShapeError(
                f"prelu: mismatch of parameter numbers and input channel size: "
                f"{weight.numel()} slopes for {channels} channels of {self.shape}; "
                "give one slope, or one per channel (axis 1)"
            )
        if weight.numel() > 1:
            weight = weight.reshape((1, channels) + (1,) * (self.ndim - 2))
        elif weight.ndim:
            weight = weight.reshape(())
        return (self > 0).where(cast("Tensor", self), weight * self)

    def threshold(self, threshold: float, value: float) -> Tensor:
        """x where x > threshold, else ``value``.

        >>> Tensor([0.5, 2.0]).threshold(1.0, -1.0).tolist()
        [-1.0, 2.0]
        """
        return (self > threshold).where(cast("Tensor", self), value).cast(self.dtype)

    def softshrink(self, lambd: float = 0.5) -> Tensor:
        """x moved ``lambd`` towards 0, and 0 within ``lambd`` of it.

        >>> Tensor([-2.0, 0.25, 1.0]).softshrink().tolist()
        [-1.5, 0.0, 0.5]
        """
        if lambd < 0:
            raise InvalidArgument(f"softshrink: lambda must be >= 0, got {lambd}")
        return (self > lambd).where(self - lambd, (self < -lambd).where(self + lambd, 0.0))

    def logit(self, eps: float | None = None) -> Tensor:
        """log(p / (1 - p)), the inverse of sigmoid; with ``eps``, p is first clamped to
        [eps, 1 - eps] (and the gradient is 0 outside it, as torch's).

        >>> round(Tensor([0.75]).logit().item(), 4)
        1.0986
        """
        p = self._float_operand()
        if eps is not None:
            inside = (p >= eps) & (p <= 1 - eps)
            p = inside.where(p, p.clip(eps, 1 - eps).detach())
        return (p / (1 - p)).log()

    def gumbel_softmax(
        self, tau: float = 1.0, hard: bool = False, eps: float = 1e-10, dim: int = -1
    ) -> Tensor:
        """A differentiable sample from the categorical distribution of logits ``self``: the
        softmax of (logits + Gumbel noise) / tau. ``hard`` gives one-hot samples whose gradient
        is the soft sample's (the straight-through estimator). ``eps`` is unused, as in torch."""
        u = type(self).rand(self.shape, device=self.device)
        exponential = (-(1 - u).log()).maximum(1e-30)  # -log(1 - U) ~ Exp(1), kept above 0
        soft = ((self - exponential.log()) / tau).softmax(dim)
        if not hard:
            return soft
        hot = soft.argmax(dim, keepdim=True) == type(self).arange(
            self.shape[dim], device=self.device
        ).reshape([-1 if a == self._axis(dim) else 1 for a in range(self.ndim)])
        return hot.cast(soft.dtype) - soft.detach() + soft

    def dropout2d(self, p: float = 0.5, training: bool | None = None) -> Tensor:
        """Zero whole channels (axis 1 of (N, C, ...)) with probability ``p``, scaling the rest by
        1/(1-p). ``training`` None follows ``Tensor.training``, as ``dropout`` does."""
        if not 0 <= p <= 1:
            raise InvalidValue(f"dropout probability has to be between 0 and 1, but got {p}")
        if self.ndim < 2:
            raise ShapeError(f"dropout2d needs (N, C, ...) input, got shape {self.shape}")
        if not (type(self).training if training is None else training) or p == 0:
            return cast("Tensor", self)
        keep = type(self).rand(self.shape[:2] + (1,) * (self.ndim - 2), device=self.device) >= p
        return keep.where(self * (1 / (1 - p)) if p < 1 else 0, 0).cast(self.dtype)

    def pixel_unshuffle(self, downscale_factor: int) -> Tensor:
        """(..., C, H*r, W*r) -> (..., C*r*r, H, W), the inverse of ``pixel_shuffle``: each r x r
        block of pixels becomes r*r channels."""
        r = downscale_factor
        *batch, c, h, w = self.shape
        for name, size in (("height", h), ("width", w)):
            if size % r:
                raise ShapeError(
                    f"pixel_unshuffle: the {name} {size} of {self.shape} does not "
                    f"divide by downscale_factor {r}"
                )
        n = len(batch)
        x = self.reshape(*batch, c, h // r, r, w // r, r)
        x = x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
        return x.reshape(*batch, c * r * r, h // r, w // r)

    # ---- distances -------------------------------------------------------------------------------

    def pairwise_distance(
        self, other: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False
    ) -> Tensor:
        """The p-norm of self - other + eps along the last axis, after broadcasting."""
        return (self - other + eps).norm(p, -1, keepdim)

    def cdist(self, other: Tensor, p: float = 2.0, compute_mode: str | None = None) -> Tensor:
        """The p-norm distance of each row of self (..., P, M) to each row of other (..., R, M):
        (..., P, R). The gradient at a distance of 0 is 0, as torch's. ``compute_mode`` is
        accepted for torch's signature; the distance is always taken directly."""
        if self.ndim < 2 or other.ndim < 2:
            raise ShapeError(
                f"cdist only supports at least 2-d tensors, got shapes {self.shape} "
                f"and {other.shape}"
            )
        if self.shape[-1] != other.shape[-1]:
            raise ShapeError(
                f"cdist: X1 and X2 must have the same number of columns, got "
                f"{self.shape[-1]} and {other.shape[-1]}"
            )
        if p < 0:
            raise InvalidArgument(f"cdist only supports non-negative p values, got {p}")
        diff = self.unsqueeze(-2) - other.unsqueeze(-3)  # (..., P, R, M)
        if p not in (1, 2):
            return diff.norm(p, -1)
        total = diff.abs().sum(-1) if p == 1 else diff.square().sum(-1)
        if p == 1:
            return total
        positive = total > 0  # sqrt's slope at 0 is infinite; torch's gradient there is 0
        return positive.where(positive.where(total, 1.0).sqrt(), 0.0)

    # ---- losses ----------------------------------------------------------------------------------

    def margin_ranking_loss(
        self, other: Tensor, target: Tensor, margin: float = 0.0, reduction: str = "mean"
    ) -> Tensor:
        """max(0, margin - target * (self - other)): ``target`` 1 wants self ranked higher, -1
        lower."""
        return _reduce_loss((margin - target * (self - other)).maximum(0), reduction)

    def triplet_margin_loss(
        self,
        positive: Tensor,
        negative: Tensor,
        margin: float = 1.0,
        p: float = 2,
        eps: float = 1e-6,
        swap: bool = False,
        reduction: str = "mean",
    ) -> Tensor:
        """max(0, margin + d(anchor, positive) - d(anchor, negative)), d the p-norm
        ``pairwise_distance``; ``swap`` uses d(positive, negative) when it is smaller."""
        if not self.ndim == positive.ndim == negative.ndim:
            raise ShapeError(
                f"triplet_margin_loss: the anchor, positive and negative need the "
                f"same number of dimensions, got shapes {self.shape}, "
                f"{positive.shape} and {negative.shape}"
            )
        if margin <= 0:
            raise InvalidValue(f"triplet_margin_loss: margin must be greater than 0, got {margin}")
        d_pos = self.pairwise_distance(positive, p, eps)
        d_neg = self.pairwise_distance(negative, p, eps)
        if swap:
            d_neg = d_neg.minimum(positive.pairwise_distance(negative, p, eps))
        return _reduce_loss((margin + d_pos - d_neg).maximum(0), reduction)

    def gaussian_nll_loss(
        self,
        target: Tensor,
        var: Tensor | float,
        full: bool = False,
        eps: float = 1e-6,
        reduction: str = "mean",
    ) -> Tensor:
        """The negative log likelihood of ``target`` under normal distributions of mean ``self``
        and variance ``var``: (log(var) + (self - target)**2 / var) / 2 (+ log(2 pi) / 2 if
        ``full``). ``var`` has self's shape, or lacks (or has 1 as) its last axis; it is clamped
        to ``eps`` without changing its gradient, as torch does. A negative var raises."""
        if not isinstance(var, type(self)):
            var = type(self).full(self.shape, var, device=self.device)
        if var.shape != self.shape:
            if var.shape == self.shape[:-1]:
                var = var.unsqueeze(-1)
            elif not (var.shape[:-1] == self.shape[:-1] and var.ndim and var.shape[-1] == 1):
                raise ShapeError(
                    f"gaussian_nll_loss: var is of incorrect size {var.shape} "
                    f"for input {self.shape}; give the input's shape, or it "
                    "without (or with 1 as) its last axis"
                )
        _check_reduction(reduction)
        if var.numel() and (var < 0).any().item():
            raise InvalidValue("gaussian_nll_loss: var has negative entry/entries")
        var = var + (var.maximum(eps) - var).detach()
        loss = 0.5 * (var.log() + (self - target).square() / var)
        return _reduce_loss(loss + 0.5 * math.log(2 * math.pi) if full else loss, reduction)

    def poisson_nll_loss(
        self,
        target: Tensor,
        log_input: bool = True,
        full: bool = False,
        eps: float = 1e-8,
        reduction: str = "mean",
    ) -> Tensor:
        """The negative log likelihood of ``target`` under Poisson distributions of rate
        exp(self) (``log_input``) or self: rate - target * log(rate), the constant log(target!)
        left out unless ``full`` (Stirling's approximation, for targets above 1)."""
        _check_reduction(reduction)
        loss = self.exp() - target * self if log_input else self - target * (self + eps).log()
        if full:
            stirling = target * target.log() - target + 0.5 * (2 * math.pi * target).log()
            loss = loss + (target > 1).where(stirling, 0.0)
        return _reduce_loss(loss, reduction)
