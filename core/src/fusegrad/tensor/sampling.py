"""Reading a tensor at computed positions: pooling to a given size, ``fold`` (the inverse of
im2col), sampling grids (``affine_grid``, ``grid_sample``) and the CTC loss, whose alignments
are positions in the target too.

The positions are worked out on the host when they depend only on shapes (the windows of an
adaptive pool, the one-hot kernel of ``fold``), and as tensors when they depend on values (a
sampling grid), so gradients flow to the grid as well as to the sampled values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from fusegrad.errors import InvalidArgument, ShapeError, UnknownOption
from fusegrad.tensor.base import TensorBase
from fusegrad.tensor.nn_ops import Size, _check_reduction, _padding_pairs, _reduce_loss, _tuple

if TYPE_CHECKING:
    from fusegrad.tensor.tensor import Tensor


def _adaptive_windows(size: int, out: int) -> np.ndarray:
    """(out, k) indices of window j = [floor(j*size/out), ceil((j+1)*size/out)), the shorter
    windows padded by repeating their last index (which leaves a maximum unchanged)."""
    lo = [j * size // out for j in range(out)]
    hi = [-(-(j + 1) * size // out) for j in range(out)]
    k = max((h - low for low, h in zip(lo, hi, strict=True)), default=1)
    rows = [[min(low + i, h - 1) for i in range(k)] for low, h in zip(lo, hi, strict=True)]
    return np.array(rows, dtype=np.int32).reshape(out, k)


def _check_pool_dims(x: TensorBase, name: str, n: int) -> None:
    if not n + 1 <= x.ndim <= n + 2:
        raise ShapeError(
            f"{name} expects {n + 1} to {n + 2} dimensions ((C, ...) or (N, C, ...)),"
            f" got shape {x.shape}"
        )


def _logaddexp(*xs: Tensor) -> Tensor:
    """log(sum(exp(x))) elementwise, -inf (with a gradient of 0, not nan) where every x is -inf."""
    top = xs[0]
    for x in xs[1:]:
        top = top.maximum(x)
    top = top.isinf().where(0.0, top).detach()  # the shift's gradient cancels out exactly
    total = sum(((x - top).exp() for x in xs[1:]), (xs[0] - top).exp())
    some = total > 0
    return some.where(some.where(total, 1.0).log(), -math.inf) + top


def _stored_gradient(grad: Tensor, x: Tensor) -> tuple[Tensor]:
    """d stored(x) = 1, the gradient stored too."""
    return (grad.contiguous(),)


def _stored(x: Tensor) -> Tensor:
    """``x`` written to a buffer, and its gradient as well. A recurrence reads each step several
    times: as an expression, fusion would inline it, and recompute it three times more often
    with every step, forwards and backwards."""
    return x.contiguous().detach()._with_gradient(_stored_gradient, (x,))


def _host_ints(x: Tensor | Sequence[int] | int, name: str) -> list[int]:
    """Lengths given as a tensor, a sequence or an int, as Python ints (they shape the graph)."""
    values = x.tolist() if hasattr(x, "tolist") else x
    values = [values] if isinstance(values, int) else list(values)
    if any(not isinstance(v, int) for v in values):
        raise InvalidArgument(f"ctc_loss: {name} must be integers, got {values}")
    return values


class SamplingMixin(TensorBase):
    """Adaptive pooling, fold, affine grids and grid sampling, and the CTC loss."""

    __slots__ = ()

    # ---- pooling to a size -----------------------------------------------------------------------

    def adaptive_avg_pool1d(self, output_size: int) -> Tensor:
        """The mean of ``output_size`` near-equal windows over the last axis of (N?, C, L).

        >>> Tensor([[1.0, 2.0, 3.0, 5.0]]).adaptive_avg_pool1d(2).tolist()
        [[1.5, 4.0]]
        """
        _check_pool_dims(self, "adaptive_avg_pool1d", 1)
        return self.adaptive_avg_pool2d(_tuple(output_size, 1, "output_size"))

    def adaptive_max_pool1d(
        self, output_size: int, return_indices: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """The largest value of each of ``output_size`` windows over the last axis of (N?, C, L)
        (windows as ``adaptive_avg_pool1d``'s); with ``return_indices``, also where it is.

        >>> Tensor([[1.0, 2.0, 5.0, 3.0]]).adaptive_max_pool1d(2).tolist()
        [[2.0, 5.0]]
        """
        _check_pool_dims(self, "adaptive_max_pool1d", 1)
        return self._adaptive_max(_tuple(output_size, 1, "output_size"), return_indices)

    def adaptive_max_pool2d(
        self, output_size: Size, return_indices: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """The largest value of each window over the last two axes of (N?, C, H, W), sized so the
        result is ``output_size``; with ``return_indices``, also where each is in its plane
        (``h * W + w``, the first on ties, int32 as ``max_pool2d``'s)."""
        _check_pool_dims(self, "adaptive_max_pool2d", 2)
        return self._adaptive_max(_tuple(output_size, 2, "output_size"), return_indices)

    def _adaptive_max(
        self, outs: tuple[int, ...], return_indices: bool
    ) -> Tensor | tuple[Tensor, Tensor]:
        n, spatial = len(outs), self.shape[-len(outs) :]
        picks = [
            type(self)(_adaptive_windows(i, o), device=self.device)
            for i, o in zip(spatial, outs, strict=True)
        ]

        def windows(x: Tensor) -> Tensor:
            """(..., I1, I2, ...) -> (..., O1, K1, O2, K2, ...): each spatial axis as windows."""
            lead = x.ndim - n
            for j, idx in enumerate(picks):
                x = x._take([(lead + 2 * j, idx)])
            return x

        axes = tuple(range(self.ndim - n + 1, self.ndim + n, 2))
        win = windows(cast("Tensor", self))
        values = win.max(axes)
        if not return_indices:
            return values
        plane = math.prod(spatial)
        where = windows(type(self).arange(plane, device=self.device).reshape(spatial))
        kept = values.reshape(values.shape[:-n] + sum(((o, 1) for o in outs), ()))
        hit = (win == kept) | (win != win)  # (a nan is the max)
        return values, hit.where(where, plane)._min(axes, False)

    # ---- fold ------------------------------------------------------------------------------------

    def fold(
        self,
        output_size: Size,
        kernel_size: Size,
        dilation: Size = 1,
        padding: Size = 0,
        stride: Size = 1,
    ) -> Tensor:
        """Sum sliding blocks back into an image, as ``torch.nn.functional.fold``: (N?, C*kh*kw, L)
        -> (N?, C, H, W), each of the L columns a kh x kw block added at its window's place
        (overlaps add up). It is the transposed convolution with a one-hot kernel per channel.

        >>> Tensor([[[1.0, 2.0], [3.0, 4.0]]]).fold((1, 3), (1, 2)).tolist()
        [[[[1.0, 5.0, 4.0]]]]
        """
        size, ks = _tuple(output_size, 2, "output_size"), _tuple(kernel_size, 2, "kernel_size")
        dl, st = _tuple(dilation, 2, "dilation"), _tuple(stride, 2, "stride")
        pads = [b for b, _ in _padding_pairs(padding, 2)]
        if self.ndim not in (2, 3):
            raise ShapeError(f"fold expects (N, C*kh*kw, L) or (C*kh*kw, L), got {self.shape}")
        x, k = (self if self.ndim == 3 else self.unsqueeze(0)), ks[0] * ks[1]
        if x.shape[1] % k:
            raise ShapeError(
                f"fold: size {x.shape[1]} of dimension 1 of {self.shape} does not "
                f"divide by the product of kernel_size {ks}"
            )
        blocks = [
            (s + 2 * p - d * (kk - 1) - 1) // t + 1
            for s, p, d, kk, t in zip(size, pads, dl, ks, st, strict=True)
        ]
        if min(blocks) < 1 or x.shape[2] != blocks[0] * blocks[1]:
            raise ShapeError(
                f"fold: output_size={size}, kernel_size={ks}, dilation={dl}, "
                f"padding={tuple(pads)}, stride={st} give {blocks[0]} * {blocks[1]} "
                f"sliding blocks, but the input has {x.shape[2]} (shape {self.shape})"
            )
        channels = x.shape[1] // k
        one_hot = np.tile(np.eye(k, dtype=np.float32).reshape(k, 1, *ks), (channels, 1, 1, 1))
        weight = type(self)(one_hot, device=self.device).cast(x.dtype)
        extra = [
            (s + 2 * p - d * (kk - 1) - 1) % t
            for s, p, d, kk, t in zip(size, pads, dl, ks, st, strict=True)
        ]
        out = x.reshape(x.shape[0], x.shape[1], *blocks).conv_transpose2d(
            weight, None, st, pads, extra, channels, dl
        )
        return out if self.ndim == 3 else out.squeeze(0)

    # ---- sampling grids --------------------------------------------------------------------------

    def affine_grid(self, size: Sequence[int], align_corners: bool = False) -> Tensor:
        """The sampling grid (N, H, W, 2) (or (N, D, H, W, 3)) of affine matrices ``self`` (N, 2, 3)
        (or (N, 3, 4)) for an output of ``size`` (N, C, H, W) (or (N, C, D, H, W)): each output
        position's (x, y[, z]) in [-1, 1], mapped by the matrix, as ``F.affine_grid``."""
        size = tuple(size)
        if len(size) not in (4, 5):
            raise UnknownOption(
                f"affine_grid only supports 4-d and 5-d sizes (2-d and 3-d "
                f"transforms), got size {size}"
            )
        n = len(size) - 2
        if self.shape != (size[0], n, n + 1):
            raise ShapeError(
                f"affine_grid: size {size} needs a batch of affine matrices of "
                f"shape ({size[0]}, {n}, {n + 1}), got {self.shape}"
            )
        lines = [_grid_line(s, align_corners) for s in size[2:]]
        mesh = np.meshgrid(*lines, indexing="ij")  # one array per axis, varying along it
        coords = np.stack([*reversed(mesh), np.ones(size[2:], np.float32)], axis=-1)  # x first
        base = type(self)(coords.reshape(1, -1, n + 1).astype(np.float32), device=self.device)
        grid = base.cast(self.dtype).matmul(self.transpose(1, 2))
        return grid.reshape(size[0], *size[2:], n)

    def grid_sample(
        self,
        grid: Tensor,
        mode: str = "bilinear",
        padding_mode: str = "zeros",
        align_corners: bool = False,
    ) -> Tensor:
        """Read input (N, C, H, W) at the positions ``grid`` (N, Ho, Wo, 2) holds, (x, y) in
        [-1, 1] from the left/top to the right/bottom edge (the outer pixels' centres with
        ``align_corners``): (N, C, Ho, Wo), as ``F.grid_sample``. Modes bilinear and nearest;
        positions outside read 0 ("zeros") or the nearest edge pixel ("border")."""
        if mode not in ("bilinear", "nearest"):
            raise UnknownOption(
                f"grid_sample: mode must be 'bilinear' or 'nearest' here, got {mode!r}"
            )
        if padding_mode not in ("zeros", "border"):
            raise UnknownOption(
                f"grid_sample: padding_mode must be 'zeros' or 'border' here, got {padding_mode!r}"
            )
        if self.ndim != 4 or grid.shape != (self.shape[0], *grid.shape[1:3], 2):
            raise ShapeError(
                f"grid_sample needs input (N, C, H, W) and grid (N, Ho, Wo, 2) of "
                f"the same N, got {self.shape} and {grid.shape}"
            )
        h, w = self.shape[2:]
        x = _unnormalise(grid[..., 0], w, align_corners, padding_mode)
        y = _unnormalise(grid[..., 1], h, align_corners, padding_mode)
        if mode == "nearest":
            return self._read_at(y.round(), x.round())
        x0, y0 = x.floor(), y.floor()
        fx, fy = x - x0, y - y0
        return (
            self._read_at(y0, x0) * ((1 - fy) * (1 - fx)).unsqueeze(1)
            + self._read_at(y0, x0 + 1) * ((1 - fy) * fx).unsqueeze(1)
            + self._read_at(y0 + 1, x0) * (fy * (1 - fx)).unsqueeze(1)
            + self._read_at(y0 + 1, x0 + 1) * (fy * fx).unsqueeze(1)
        )

    def _read_at(self, y: Tensor, x: Tensor) -> Tensor:
        """input (N, C, H, W) at whole-number positions y, x (N, Ho, Wo): (N, C, Ho, Wo), 0 where
        a position is outside."""
        (n, c, h, w), out = self.shape, y.shape[1:]
        inside = (y >= 0) & (y <= h - 1) & (x >= 0) & (x <= w - 1)
        flat = (y.clip(0, h - 1) * w + x.clip(0, w - 1)).detach().cast("int32")
        index = flat.reshape(n, 1, -1).expand(n, c, flat[0].numel())
        values = self.reshape(n, c, h * w).gather(2, index).reshape(n, c, *out)
        return inside.unsqueeze(1).where(values, 0.0)

    # ---- CTC -------------------------------------------------------------------------------------

    def ctc_loss(
        self,
        targets: Tensor,
        input_lengths: Any,
        target_lengths: Any,
        blank: int = 0,
        reduction: str = "mean",
        zero_infinity: bool = False,
    ) -> Tensor:
        """The connectionist temporal classification loss of log-probabilities ``self`` (T, N, C)
        (or (T, C)): -log of the total probability of the alignments of each target, by the
        forward algorithm in log space, one step per time step. ``targets`` (N, S) padded or the
        targets concatenated; lengths as tensors, sequences or ints. "mean" divides each loss by
        its target length, then averages, as torch's. (torch's own gradient assumes ``self``
        came from log_softmax; this one is the true gradient: the same through log_softmax.)"""
        _check_reduction(reduction)
        lp = self if self.ndim == 3 else self.unsqueeze(1)
        steps, batch, classes = lp.shape
        in_lens = _host_ints(input_lengths, "input_lengths")
        tgt_lens = _host_ints(target_lengths, "target_lengths")
        labels = _ctc_labels(targets, tgt_lens, batch)
        if len(in_lens) != batch or any(not 0 <= t <= steps for t in in_lens):
            raise InvalidArgument(
                f"ctc_loss: input_lengths {in_lens} need one length per "
                f"sequence ({batch}), each at most T={steps}"
            )
        ext = np.full((batch, 2 * labels.shape[1] + 1), blank, dtype=np.int32)
        ext[:, 1::2] = labels
        labels_at = type(self)(ext, device=self.device).unsqueeze(0).expand(steps, *ext.shape)
        emit = lp.gather(2, labels_at)  # (T, N, 2S+1): log P(extended label s at step t)
        alpha = self._ctc_alpha(emit, ext, in_lens, blank)
        nll = -self._ctc_end(alpha, tgt_lens)
        if zero_infinity:
            nll = nll.isinf().where(0.0, nll)
        if reduction == "mean":
            return (nll / type(self)([max(t, 1) for t in tgt_lens], device=self.device)).mean()
        out = _reduce_loss(nll, reduction)
        return out.reshape(()) if self.ndim == 2 and reduction == "none" else out

    def _ctc_alpha(self, emit: Tensor, ext: np.ndarray, in_lens: list[int], blank: int) -> Tensor:
        """The forward variables after each sequence's last step: alpha[n, s] = log P(the first
        s + 1 extended labels of sequence n emitted by then)."""
        cls, (batch, size) = type(self), ext.shape
        skip = np.zeros(ext.shape, dtype=bool)  # s may follow s - 2 (two labels, not repeated)
        skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])
        skip_ok = cls(skip, device=self.device)
        lengths = cls(in_lens, device=self.device).reshape(batch, 1)
        start = cls.arange(size, device=self.device) < 2
        alpha = (start & (lengths > 0)).where(emit[0], -math.inf)
        for t in range(1, emit.shape[0]):
            one = alpha.pad((None, (1, 0)), value=-math.inf)[:, :size]
            two = skip_ok.where(alpha.pad((None, (2, 0)), value=-math.inf)[:, :size], -math.inf)
            alpha = (lengths > t).where(_logaddexp(alpha, one, two) + emit[t], alpha)
            alpha = _stored(alpha)
        return alpha

    def _ctc_end(self, alpha: Tensor, tgt_lens: list[int]) -> Tensor:
        """log P(target n) per sequence: alignments end on its last label or the blank after."""
        cls = type(self)
        last = cls([2 * t for t in tgt_lens], device=self.device).reshape(-1, 1)
        before = cls([max(2 * t - 1, 0) for t in tgt_lens], device=self.device).reshape(-1, 1)
        has_label = cls([t > 0 for t in tgt_lens], device=self.device)
        end, label = alpha.gather(1, last)[:, 0], alpha.gather(1, before)[:, 0]
        return _logaddexp(end, has_label.where(label, -math.inf))


def _grid_line(size: int, align_corners: bool) -> np.ndarray:
    """The normalised coordinates of ``size`` positions along one axis, as torch places them."""
    if size <= 1:
        return np.zeros(size, np.float32)
    line = np.linspace(-1, 1, size, dtype=np.float64)
    return (line if align_corners else line * (size - 1) / size).astype(np.float32)


def _unnormalise(coord: Tensor, size: int, align_corners: bool, padding_mode: str) -> Tensor:
    """A grid coordinate in [-1, 1] as a pixel position along an axis of ``size``."""
    pos = (coord + 1) * ((size - 1) / 2) if align_corners else ((coord + 1) * size - 1) / 2
    return pos.clip(0, size - 1) if padding_mode == "border" else pos


def _ctc_labels(targets: Tensor, lengths: list[int], batch: int) -> np.ndarray:
    """The targets as (N, S) labels, from (N, S) padded or the concatenated targets."""
    flat = np.asarray(targets.numpy(), dtype=np.int64)
    if len(lengths) != batch:
        raise InvalidArgument(
            f"ctc_loss: target_lengths {lengths} need one length per sequence ({batch})"
        )
    if flat.ndim == 2 or (flat.ndim == 1 and batch == 1 and len(flat) != sum(lengths)):
        rows = flat.reshape(batch, -1)
        if any(not 0 <= t <= rows.shape[1] for t in lengths):
            raise InvalidArgument(
                f"ctc_loss: target_lengths {lengths} exceed the targets' length {rows.shape[1]}"
            )
        return rows
    if flat.ndim != 1 or len(flat) != sum(lengths):
        raise ShapeError(
            f"ctc_loss: targets {flat.shape} are neither (N, S) nor the "
            f"{sum(lengths)} targets of lengths {lengths} concatenated"
        )
    rows = np.zeros((batch, max(lengths, default=0)), dtype=np.int64)
    for n, (start, t) in enumerate(zip(np.cumsum([0, *lengths[:-1]]), lengths, strict=True)):
        rows[n, :t] = flat[start : start + t]
    return rows
