"""The rest of what model code takes from ``torch.nn.functional``: more losses, gated and
normalising layers, norms, unbinding and sampling, each a few lines over existing ops.

These live apart from ``tensor_nn.py`` (convolutions, pools, attention and the classic losses)
to keep both short; ``Tensor`` inherits ``FunctionalMixin`` like its other mixins.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from fusegrad.errors import InvalidArgument, ShapeError
from fusegrad.tensor_nn import _reduce_loss

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor


class FunctionalMixin:
    """Losses, layers and helpers of ``torch.nn.functional`` built from other Tensor ops."""

    def smooth_l1_loss(self: Tensor, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:
        """|d| - beta/2 where |d| >= beta, else d**2 / (2*beta), for d = self - target (beta 0: L1)."""
        d = (self - target).abs()
        if beta == 0:
            return _reduce_loss(d, reduction)
        return _reduce_loss((d < beta).where(d.square() * (0.5 / beta), d - 0.5 * beta), reduction)

    def huber_loss(self: Tensor, target: Tensor, reduction: str = "mean", delta: float = 1.0) -> Tensor:
        """d**2 / 2 where |d| < delta, else delta * (|d| - delta/2): smooth L1 scaled by delta."""
        d = (self - target).abs()
        return _reduce_loss((d < delta).where(d.square() * 0.5, (d - 0.5 * delta) * delta), reduction)

    def kl_div(self: Tensor, target: Tensor, reduction: str = "mean", log_target: bool = False) -> Tensor:
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

    def cosine_similarity(self: Tensor, other: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
        """sum(a * b) / (max(|a|, eps) * max(|b|, eps)) along ``dim``, after broadcasting."""
        a_norm = self.square().sum(dim).sqrt().maximum(eps)
        b_norm = other.square().sum(dim).sqrt().maximum(eps)
        return (self * other).sum(dim) / (a_norm * b_norm)

    def glu(self: Tensor, dim: int = -1) -> Tensor:
        """The gated linear unit: the first half of ``dim`` times the sigmoid of the second."""
        if self.shape[dim] % 2:
            raise ShapeError(f"glu halves dimension {dim}, but its size {self.shape[dim]} is odd")
        a, b = self.chunk(2, dim)
        return a * b.sigmoid()

    def instance_norm(self: Tensor, weight: Tensor | None = None, bias: Tensor | None = None,
                      eps: float = 1e-5) -> Tensor:
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

    def pixel_shuffle(self: Tensor, upscale_factor: int) -> Tensor:
        """(..., C*r*r, H, W) -> (..., C, H*r, W*r): channels become r x r blocks of pixels."""
        r = upscale_factor
        *batch, c, h, w = self.shape
        if c % (r * r):
            raise ShapeError(f"pixel_shuffle: {c} channels do not divide by upscale_factor**2 = {r * r}")
        n = len(batch)
        x = self.reshape(*batch, c // (r * r), r, r, h, w)
        x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
        return x.reshape(*batch, c // (r * r), h * r, w * r)

    def norm(self: Tensor, p: float | str = 2, dim: int | tuple[int, ...] | None = None,
             keepdim: bool = False) -> Tensor:
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

    def unbind(self: Tensor, dim: int = 0) -> tuple[Tensor, ...]:
        """The slices along ``dim``, each without that axis."""
        dim = dim + self.ndim if dim < 0 else dim
        if not 0 <= dim < self.ndim:
            raise IndexError(f"unbind: dim {dim} is out of range for a {self.ndim}-d tensor")
        return tuple(self[(slice(None),) * dim + (i,)] for i in range(self.shape[dim]))

    def multinomial(self: Tensor, num_samples: int = 1, replacement: bool = False) -> Tensor:
        """``num_samples`` category indices per row of weights (1-d or 2-d, need not sum to 1),
        drawn by inverting the cumulative distribution. Without replacement only one sample can be
        drawn here (torch removes each drawn category; that needs a loop)."""
        if self.ndim not in (1, 2):
            raise ShapeError(f"multinomial wants 1-d or 2-d weights, got shape {self.shape}")
        if not replacement and num_samples > 1:
            raise InvalidArgument("multinomial draws several samples only with replacement=True here")
        weights = self.reshape(1, -1) if self.ndim == 1 else self
        cdf = weights.cumsum(1)
        cdf = cdf / cdf[:, -1:]
        u = self.rand(weights.shape[0], num_samples, 1, device=self.device)
        picked = (cdf.unsqueeze(1) < u).sum(2).cast("int32").minimum(weights.shape[1] - 1)
        return picked.reshape(num_samples) if self.ndim == 1 else picked
