"""Neural-network methods of ``Tensor``: convolution and pooling, resizing, normalisation,
dropout, attention and losses.

Convolution and pooling share one idea: ``_pool`` turns each spatial axis into (output, kernel)
axes of sliding windows using only movement ops (repeat the axis, reshape so each row starts
``dilation`` later, keep every ``stride``-th row), so a convolution is a multiply and a sum.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from fusegrad import caches
from fusegrad.dtype import dtypes
from fusegrad.errors import (
    FusegradError,
    InvalidArgument,
    InvalidIndex,
    InvalidType,
    InvalidValue,
    ShapeError,
    UnknownOption,
)
from fusegrad.tensor import bounds
from fusegrad.tensor.base import TensorBase, is_tensor
from fusegrad.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from fusegrad.tensor.tensor import Tensor

Size = int | Sequence[int]


def _tuple(x: Size, n: int, name: str) -> tuple[int, ...]:
    """An int repeated ``n`` times, or a sequence of exactly ``n`` ints; a kernel size, stride
    or dilation below 1 is refused here (it would divide by zero further in)."""
    if isinstance(x, int):
        out: tuple[int, ...] = (x,) * n
    elif len(x) != n:
        raise ShapeError(f"{name} needs {n} values (one per spatial axis), got {tuple(x)}")
    else:
        out = tuple(int(v) for v in x)
    if name in ("kernel_size", "stride", "dilation") and any(v < 1 for v in out):
        raise InvalidValue(f"{name} must be at least 1 on every axis, got {x}")
    return out


def _innermost(t: Tensor, axis: int) -> Tensor:
    """``t`` copied so that ``axis`` is innermost in memory, seen in ``t``'s own axis order."""
    order = [a for a in range(t.ndim) if a != axis] + [axis]
    return t.permute(order).contiguous().permute([order.index(a) for a in range(t.ndim)])


def _conv_gradient(
    grad: Tensor,
    x: Tensor,
    weight: Tensor,
    stride: tuple,
    dilation: tuple,
    groups: int,
    pads: tuple[tuple[int, int], ...] | None = None,
) -> tuple[Tensor, Tensor]:
    """d conv / d (input, weight), given the gradient ``g`` of the output; ``x`` is the input
    padded by ``pads`` (before, after) per spatial axis, or already padded when ``pads`` is None
    (a crop: its gradient is the padded input's).

    Taken through the window ops, the input's gradient would be one value per window element
    written out (for a 5x5 kernel, 25 times the input's size) and then summed back. It is the
    transposed convolution of ``g`` instead: a reduction of the same shape as the forward one.
    With ``pads`` that convolution is cropped by them (its padding), so it computes the input's
    own positions only: the padded input's gradient, cut back by the pad's rule, was realized
    uncut where a batch norm's gradient read it (a 4x4 map's 6x6: 2.25x the work).
    """
    if (
        grad.uop.op is not Ops.BUFFER
    ):  # computed once: both gradients below read it in other layouts
        grad = grad.contiguous()
    n, (cout, cin_g, *ks) = weight.ndim - 2, weight.shape
    batch, outs = grad.shape[0], grad.shape[2:]
    if pads is None:
        xp = x
        dx = grad.conv_transpose2d(weight, stride=stride, dilation=dilation, groups=groups)
        # positions after the last window are read by no window: their gradient is 0
        dx = dx.pad(
            [None, None] + [(0, p - d) for p, d in zip(xp.shape[2:], dx.shape[2:], strict=True)]
        )
    else:
        xp = x.pad([None, None] + list(pads))
        # positions after the last window (a stride's remainder) through output_padding
        spans = [d * (k - 1) + 1 for d, k in zip(dilation, ks, strict=True)]
        rest = [(p - span) % s for p, span, s in zip(xp.shape[2:], spans, stride, strict=True)]
        flat = [v for b, a in reversed(pads) for v in (b, a)]  # (F.pad's order: last axis first)
        dx = grad.conv_transpose2d(
            weight,
            stride=stride,
            padding=flat,
            output_padding=rest,
            dilation=dilation,
            groups=groups,
        )
    # The weight gradient sums over the whole batch for each of few outputs: every register tile
    # of outputs would stream all the data from memory. Summing chunks of 8 samples first keeps
    # a chunk's data in cache across tiles; the partial sums are small. A small map's whole
    # batch stays in cache anyway (``CHUNK_POSITIONS``).
    chunked = batch % 8 == 0 and batch >= 16 and math.prod(outs) >= CHUNK_POSITIONS
    chunks = batch // 8 if chunked else 1
    win = xp._pool(tuple(ks), stride, dilation)
    win = win.reshape((chunks, batch // chunks, groups, 1, cin_g) + outs + tuple(ks))
    if (cout // groups) % 8 == 0:  # C_out innermost in memory (a copy): it runs as vectors
        grad = _innermost(grad, 1)
    g_win = grad.reshape((chunks, batch // chunks, groups, cout // groups, 1) + outs + (1,) * n)
    partial = (win * g_win).sum([1] + list(range(5, 5 + n)))  # (chunks, groups, C_out/g, ...)
    if chunks == 1:  # (a sum over the one chunk would be a kernel of its own)
        return dx, partial.reshape(weight.shape)
    return dx, partial.reshape(chunks, -1).sum(0).reshape(weight.shape)


#: a convolution's weight gradient sums chunks of 8 samples first (``_conv_gradient``) when its
#: output map has this many positions or more. Below, the chunks' partial sums (and the kernel
#: adding them up) cost more than the cache they save: a ResNet's 256-channel 3x3 on 4x4 maps,
#: batch 32, 4.35 -> 3.59 ms; MNIST's 64-channel 3x3 on 6x6, batch 128, 2.21 -> 2.05 ms; on
#: 16x16 even, on 32x32 the chunks 3% faster (2 cores, AMD EPYC, AVX-512)
CHUNK_POSITIONS = 256

#: (shape, kernel, stride, dilation) -> the movement ops ``_pool`` applies, as (op, arg) pairs
_POOL_MOVES: dict[tuple, tuple[tuple[Ops, Any], ...]] = {}
caches.register("pool moves", _POOL_MOVES.clear)


#: (rows, cols, device) -> the graph of attention's causal mask (``_causal_mask``), at most
#: ``CAUSAL_MASKS_KEPT`` of them (each holds its two ``arange`` buffers, rows + cols integers;
#: only graphs read them, no tensor a user holds, so nothing writes into them)
_CAUSAL_MASKS: dict[tuple, UOp] = {}
caches.register("causal masks", _CAUSAL_MASKS.clear)
CAUSAL_MASKS_KEPT = 64


def _pool_moves(
    x: Tensor, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]
) -> tuple[tuple[Ops, Any], ...]:
    """The chain of movement ops that ``_pool_windows`` puts on a tensor of ``x``'s shape, found
    by applying it to a placeholder and walking back from the result."""
    base = UOp(Ops.PARAM, x.dtype, (), (0, x.numel()))
    base = UOp(Ops.RESHAPE, x.dtype, (base,), x.shape)
    node = type(x)._wrap(base, x.device)._pool_windows(kernel, stride, dilation).uop
    moves = []
    while node is not base:
        assert node.op in GroupOp.Movement and len(node.src) == 1, f"_pool made a {node.op}"
        moves.append((node.op, node.arg))
        node = node.src[0]
    return tuple(reversed(moves))


def _unpool_gradient(grad: Tensor, values: Tensor, index: Tensor) -> tuple[Tensor, None]:
    """d max_unpool / d values: the output's gradient at each value's position (all of it to
    every value sent to one position, as PyTorch; the scatter keeps only the last one's)."""
    return grad.gather(-1, index), None


def _check_target(name: str, target: Any) -> None:
    """A loss's target must be a tensor (as in PyTorch): a numpy array or a list would fail
    deep inside with an unrelated AttributeError."""
    if not isinstance(target, TensorBase):
        raise InvalidType(
            f"{name}: target must be a Tensor, got {type(target).__name__}; "
            "wrap it first: Tensor(target)"
        )


def _check_reduction(reduction: str) -> None:
    if reduction not in ("none", "mean", "sum"):
        raise UnknownOption(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


def _reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    _check_reduction(reduction)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    return loss.mean()


class NNMixin(TensorBase):
    """Convolution, pooling, resizing, normalisation, dropout, attention and losses."""

    __slots__ = ()

    # ---- sliding windows -------------------------------------------------------------------------

    def _windows(self, axis: int, kernel: int, stride: int, dilation: int) -> Tensor:
        """Replace ``axis`` (size i) by (o, kernel) axes: [a, b] = x[a * stride + b * dilation]."""
        i = self.shape[axis]
        span = dilation * (kernel - 1) + 1
        if i < span:
            raise ShapeError(
                f"a window of {span} does not fit in an axis of size {i} (shape {self.shape})"
            )
        o = (i - span) // stride + 1
        before, after = self.shape[:axis], self.shape[axis + 1 :]
        if dilation == 1 and stride == kernel:  # windows that tile the axis: a plain reshape
            x = self.shrink([(0, o * kernel) if a == axis else None for a in range(self.ndim)])
            return x.reshape(before + (o, kernel) + after)
        # rows of length i + dilation over the axis repeated: row b starts at b * dilation
        row = i + dilation
        times = -(-kernel * row // i)
        x = (
            self.unsqueeze(axis)
            .expand(before + (times, i) + after)
            .reshape(before + (times * i,) + after)
        )
        x = x.shrink([(0, kernel * row) if a == axis else None for a in range(x.ndim)])
        x = x.reshape(before + (kernel, row) + after)[
            (slice(None),) * (axis + 1) + (slice(0, (o - 1) * stride + 1, stride),)
        ]
        return x.transpose(axis, axis + 1)

    def _pool(
        self, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]
    ) -> Tensor:
        """(..., *spatial) to (..., *out, *kernel): sliding windows over the last len(kernel) axes.

        The movement ops depend only on the shape and the window, so they are worked out once
        per shape (``_pool_moves``) and replayed on the tensor's node: a training step pools
        the same shapes every time, and the ops' checks are the slow part."""
        key = (self.shape, kernel, stride, dilation)
        if (moves := _POOL_MOVES.get(key)) is None:
            moves = _POOL_MOVES[key] = _pool_moves(cast("Tensor", self), kernel, stride, dilation)
        node = self.uop
        for op, arg in moves:
            node = UOp(op, node.dtype, (node,), arg)
        return self._wrap(node, self.device)

    def _pool_windows(
        self, kernel: tuple[int, ...], stride: tuple[int, ...], dilation: tuple[int, ...]
    ) -> Tensor:
        n, lead = len(kernel), self.ndim - len(kernel)
        x = self
        for j in range(n):
            x = x._windows(lead + 2 * j, kernel[j], stride[j], dilation[j])
        outs = [lead + 2 * j for j in range(n)]
        return x.permute(list(range(lead)) + outs + [o + 1 for o in outs])

    # ---- convolution -----------------------------------------------------------------------------

    def conv2d(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        stride: Size = 1,
        padding: Size | str = 0,
        dilation: Size = 1,
        groups: int = 1,
    ) -> Tensor:
        """N-d convolution (cross-correlation) as PyTorch's: input (N, C_in, *spatial), weight
        (C_out, C_in / groups, *kernel); ``padding`` may be an int, one per axis, 2n ints (before
        and after each axis, the last axis first, as ``F.pad``), 'same' or 'valid'; negative
        padding crops. The number of spatial axes is taken from ``weight``, so this is conv1d and
        conv3d too."""
        n = weight.ndim - 2
        x = self.unsqueeze(0) if self.ndim == n + 1 else self
        cout, cin_g, *ks = weight.shape
        batch, cin = x.shape[0], x.shape[1]
        if x.ndim != n + 2 or cin != cin_g * groups or cout % groups:
            raise ShapeError(
                f"conv of input {self.shape} with weight {weight.shape} and groups={groups}: "
                f"need input (N, {cin_g * groups}, ...) with {n} spatial axes"
            )
        stride, dilation = _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation")
        pads = _conv_padding(padding, tuple(ks), dilation, stride)
        xp = x.pad([None, None] + pads)
        win = xp._pool(tuple(ks), stride, dilation)  # (N, C_in, *o, *k)
        outs = win.shape[2 : 2 + n]
        win = win.reshape((batch, groups, 1, cin_g) + outs + tuple(ks))
        # (schedule/layout.py finds this shape and reads the weight with C_out innermost)
        w = weight.reshape((groups, cout // groups, cin_g) + tuple(ks))
        w = w.reshape((1, groups, cout // groups, cin_g) + (1,) * n + tuple(ks))
        out = (win * w).sum([3] + list(range(4 + n, 4 + 2 * n))).reshape((batch, cout) + outs)
        if all(b >= 0 and a >= 0 for b, a in pads):  # (the input's own gradient: see below)
            params = (stride, dilation, groups, tuple(pads))
            out = out._with_gradient(_conv_gradient, (x, weight), params)
        else:  # (a crop: the padded input's gradient, cut and padded back by the pad's rule)
            out = out._with_gradient(_conv_gradient, (xp, weight), (stride, dilation, groups))
        if bias is not None:
            # over the spatial axes merged: the bias gradient then sums long contiguous rows
            merged = (batch, cout, math.prod(outs))  # (not -1: it cannot be inferred for batch 0)
            out = (out.reshape(merged) + bias.reshape(1, cout, 1)).reshape(out.shape)
        return out if self.ndim == n + 2 else out.squeeze(0)

    def conv1d(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        stride: Size = 1,
        padding: Size | str = 0,
        dilation: Size = 1,
        groups: int = 1,
    ) -> Tensor:
        return self._conv_n(1, weight, bias, stride, padding, dilation, groups)

    def conv3d(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        stride: Size = 1,
        padding: Size | str = 0,
        dilation: Size = 1,
        groups: int = 1,
    ) -> Tensor:
        return self._conv_n(3, weight, bias, stride, padding, dilation, groups)

    def _conv_n(self, n: int, weight: Tensor, *args: Any) -> Tensor:
        if weight.ndim != n + 2:
            raise ShapeError(f"conv{n}d needs a {n + 2}-d weight, got shape {weight.shape}")
        return self.conv2d(weight, *args)

    def conv_transpose2d(
        self,
        weight: Tensor,
        bias: Tensor | None = None,
        stride: Size = 1,
        padding: Size = 0,
        output_padding: Size = 0,
        groups: int = 1,
        dilation: Size = 1,
    ) -> Tensor:
        """N-d transposed convolution as PyTorch's; weight (C_in, C_out / groups, *kernel).

        It is the convolution of the input spread out by ``stride`` (zeros between elements),
        padded by ``dilation * (kernel - 1) - padding``, with the kernel flipped and transposed.
        ``padding`` takes conv2d's forms but the strings."""
        n = weight.ndim - 2
        x = self.unsqueeze(0) if self.ndim == n + 1 else self
        cin, cout_g, *ks = weight.shape
        if n < 1 or x.ndim != n + 2 or x.shape[1] != cin or groups < 1 or cin % groups:
            raise ShapeError(
                f"conv_transpose of input {self.shape} with weight {weight.shape} and "
                f"groups={groups}: the weight is (C_in, C_out / groups, *kernel), so the input "
                f"needs shape (N, {cin}, ...) with {n} spatial axes, and C_in a multiple of groups"
            )
        stride, dilation = _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation")
        pads = _padding_pairs(padding, n)
        output_padding = _tuple(output_padding, n, "output_padding")
        if max(stride) > 1 and max(dilation) == 1:
            out = x._phased_transpose(weight, stride, pads, output_padding, groups)
            if bias is not None:
                cout = out.shape[1]
                out = out + bias.reshape((1, cout) + (1,) * n)
            return out if self.ndim == n + 2 else out.squeeze(0)
        for j, s in enumerate(stride):
            if s > 1:
                a, size = 2 + j, x.shape[2 + j]
                spread = x.unsqueeze(a + 1).pad(
                    [(0, s - 1) if i == a + 1 else None for i in range(x.ndim + 1)]
                )
                x = spread.reshape(x.shape[:a] + (size * s,) + x.shape[a + 1 :])
                x = x.shrink([(0, (size - 1) * s + 1) if i == a else None for i in range(x.ndim)])
        # padding crops the output: the input is padded that much less than a full convolution's
        span = [d * (k - 1) for d, k in zip(dilation, ks, strict=True)]
        edges = zip(span, pads, output_padding, strict=True)
        x = x.pad([None, None] + [(e - b, e - a + op) for e, (b, a), op in edges])
        # Written out once (a small copy), so that the convolution's inner loop reads plain
        # memory instead of testing every tap for the zeros around and between the elements.
        x = x.contiguous()
        w = weight.reshape((groups, cin // groups, cout_g) + tuple(ks)).transpose(1, 2)
        w = w.reshape((groups * cout_g, cin // groups) + tuple(ks)).flip(list(range(2, 2 + n)))
        out = x.conv2d(w, bias, 1, 0, dilation, groups)
        return out if self.ndim == n + 2 else out.squeeze(0)

    def _phased_transpose(
        self,
        weight: Tensor,
        stride: tuple[int, ...],
        pads: list[tuple[int, int]],
        output_padding: tuple[int, ...],
        groups: int,
    ) -> Tensor:
        """``conv_transpose2d`` with a stride (no dilation) as stride-1 convolutions. An output
        position z (in the frame before ``padding`` crops it) is q * s + r, and phase r sums
        x[q - m] * w[r + s * m] over its own taps m: ceil((k - r) / s) of them, none when r >= k
        (those outputs are 0). Phases with the same number of taps are one convolution of the
        input, their taps as extra output channels, and the phases are interleaved into the
        output. Spreading the input with zeros instead does stride**n times the work; all phases
        as one convolution with the kernel padded by zero taps to a multiple of the stride did
        16 taps for 9 for a 3x3 kernel of stride 2, and 4 for 1 for a 1x1 (a ResNet's strided
        input gradients)."""
        n, (_, cout_g, *ks) = len(stride), weight.shape
        batch, sizes, cout = self.shape[0], self.shape[2:], groups * weight.shape[1]
        lengths = [
            (size - 1) * s - b - a + k + extra
            for size, k, s, (b, a), extra in zip(
                sizes, ks, stride, pads, output_padding, strict=True
            )
        ]
        by_taps: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for phase in itertools.product(*(range(s) for s in stride)):
            taps = tuple(len(range(r, k, s)) for r, k, s in zip(phase, ks, stride, strict=True))
            if 0 not in taps:  # (else no tap lands on this phase: its outputs are 0)
                by_taps.setdefault(taps, []).append(phase)
        if len(by_taps) == 1 and len(phases := next(iter(by_taps.values()))) == math.prod(stride):
            # (k a multiple of s) one convolution over the q of every output: a view of it
            # interleaves the phases, which the scheduler can store in place.
            low = [b // s for (b, _), s in zip(pads, stride, strict=True)]
            high = [(b + length - 1) // s + 1 for (b, _), s, length in zip(pads, stride, lengths)]
            span = [h - lo for h, lo in zip(high, low, strict=True)]
            (taps,) = by_taps
            y = self._phase_convolution(weight, stride, phases, taps, low, span, groups)
            y = y.reshape((batch, groups, *stride, cout_g, *span))
            order = [0, 1, 2 + n] + [a for j in range(n) for a in (3 + n + j, 2 + j)]
            full = y.permute(order).reshape((batch, cout, *(v * s for v, s in zip(span, stride))))
            ends = zip(low, stride, pads, lengths, strict=True)
            return full.shrink(
                [None, None] + [(b - lo * s, b - lo * s + ln) for lo, s, (b, _), ln in ends]
            )
        # Else slot j of the output, z = u * s + j (u < count), holds phase r = (j + b) % s from
        # q = (j + b) // s on: each phase's convolution computes its own slot's outputs only.
        count = [-(-length // s) for length, s in zip(lengths, stride, strict=True)]
        slots = list(itertools.product(*(range(s) for s in stride)))
        out: Tensor | None = None  # (N, C_out, slots, *count)
        for taps, phases in by_taps.items():
            at = [tuple((r - b) % s for r, (b, _), s in zip(p, pads, stride)) for p in phases]
            firsts = [tuple((j + b) // s for j, (b, _), s in zip(js, pads, stride)) for js in at]
            low = [min(f[a] for f in firsts) for a in range(n)]
            span = [c + max(f[a] for f in firsts) - lo for a, (c, lo) in enumerate(zip(count, low))]
            y = self._phase_convolution(weight, stride, phases, taps, low, span, groups)
            y = y.reshape((batch, groups, len(phases), cout_g, *span))
            for m, (js, first) in enumerate(zip(at, firsts)):
                part = y[:, :, m].reshape((batch, cout, *span))
                edges = zip(first, low, count)
                part = part.shrink([None, None] + [(f - lo, f - lo + c) for f, lo, c in edges])
                i = slots.index(js)
                placed = part.unsqueeze(2).pad([None, None, (i, len(slots) - 1 - i)] + [None] * n)
                out = placed if out is None else out + placed
        assert out is not None  # (phase 0 has a tap: k >= 1)
        out = out.reshape((batch, cout, *stride, *count))
        order = [0, 1] + [a for j in range(n) for a in (2 + n + j, 2 + j)]
        out = out.permute(order).reshape((batch, cout, *(c * s for c, s in zip(count, stride))))
        return out.shrink([None, None] + [(0, length) for length in lengths])

    def _phase_convolution(
        self,
        weight: Tensor,
        stride: tuple[int, ...],
        phases: list[tuple[int, ...]],
        taps: tuple[int, ...],
        low: list[int],
        span: list[int],
        groups: int,
    ) -> Tensor:
        """Transposed-convolution phases with ``taps`` each at q in [low, low + span), as one
        stride-1 convolution: (N, groups * phases * C_out / groups, *span), each group's
        channels phase-major. For q = low + v, y[v] sums x[q - t + 1 + i] * flipped w[i]."""
        n, (cin, cout_g, *ks) = len(taps), weight.shape
        # w[r + s * m] as (C_in, C_out / g, *stride, *most): the kernel padded to a multiple of
        # the stride on each axis, its axes split (m, r) and the phases' axes moved ahead
        most = [-(-k // s) for k, s in zip(ks, stride, strict=True)]
        split = weight.pad([None, None] + [(0, m * s - k) for m, s, k in zip(most, stride, ks)])
        split = split.reshape((cin, cout_g, *(d for m, s in zip(most, stride) for d in (m, s))))
        split = split.permute(
            [0, 1, *(3 + 2 * a for a in range(n)), *(2 + 2 * a for a in range(n))]
        )
        if len(phases) == math.prod(stride):  # (every phase, k a multiple of s: all their taps)
            w = split.reshape((cin, cout_g, len(phases), *most))
        else:
            cuts = [
                split.shrink([None, None, *((r, r + 1) for r in p), *((0, t) for t in taps)])
                for p in phases
            ]
            w = cuts[0].cat(*cuts[1:], dim=2) if len(cuts) > 1 else cuts[0]
            w = w.reshape((cin, cout_g, len(phases), *taps))
        # (groups, phases, C_out / g, C_in / g, *taps): each group's output channels phase-major
        w = w.reshape((groups, cin // groups, cout_g, len(phases), *taps)).permute(
            0, 3, 2, 1, *range(4, 4 + n)
        )
        w = w.reshape((-1, cin // groups, *taps)).flip(list(range(2, 2 + n)))
        edges = zip(taps, low, span, self.shape[2:], strict=True)
        x = self.pad([None, None] + [(t - 1 - lo, lo + v - size) for t, lo, v, size in edges])
        return x.conv2d(w, None, 1, 0, 1, groups)

    def conv_transpose1d(self, weight: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return self.conv_transpose2d(weight, *args, **kwargs)

    def conv_transpose3d(self, weight: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return self.conv_transpose2d(weight, *args, **kwargs)

    # ---- pooling ---------------------------------------------------------------------------------

    def _pool_setup(
        self, kernel_size: Size, stride: Size | None, padding: Size, dilation: Size, ceil_mode: bool
    ) -> tuple:
        """(n, kernel, stride, dilation, pads): ``pads`` the (before, after) of each spatial axis,
        ``after`` grown by the cells ``ceil_mode`` adds for a last, partial window."""
        n = 2 if isinstance(kernel_size, int) else len(kernel_size)
        ks = _tuple(kernel_size, n, "kernel_size")
        st = ks if stride is None or stride == () else _tuple(stride, n, "stride")
        dl, given = _tuple(dilation, n, "dilation"), _padding_pairs(padding, n)
        pads = []
        for i, k, s, (b, a), d in zip(self.shape[-n:], ks, st, given, dl, strict=True):
            span, total = d * (k - 1) + 1, i + b + a
            if max(b, a) > span // 2:
                raise InvalidValue(
                    f"pool padding {padding} must be at most half the window ({span // 2} for "
                    f"kernel {k}, dilation {d}), as in PyTorch; pad the input with .pad() first"
                )
            o = (-(-(total - span) // s) if ceil_mode else (total - span) // s) + 1
            if ceil_mode and (o - 1) * s >= i + b:  # the last window must start inside the input
                o -= 1
            pads.append((b, a + max(0, (o - 1) * s + span - total)))
        return n, ks, st, dl, pads

    def max_pool2d(
        self,
        kernel_size: Size = (2, 2),
        stride: Size | None = None,
        padding: Size = 0,
        dilation: Size = 1,
        ceil_mode: bool = False,
        return_indices: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """The largest value of each window over the last len(kernel_size) axes (padding never
        wins); ``padding`` as conv2d's. With ``return_indices``, also where each maximum is in its
        plane (``h * W + w``; the first on ties, as PyTorch; int32, as ``argmax``).

        >>> Tensor([[1, 5, 2, 0]]).max_pool1d(2, return_indices=True)[1].tolist()
        [[1, 2]]
        """
        n, ks, st, dl, pads = self._pool_setup(kernel_size, stride, padding, dilation, ceil_mode)
        x = self.pad([None] * (self.ndim - n) + pads, value=self.dtype.min)
        axes = tuple(range(x.ndim, x.ndim + n))
        values = x._pool(ks, st, dl).max(axes)
        if not return_indices:
            return values
        spatial = self.shape[-n:]
        plane = math.prod(spatial)
        # each cell's position in its plane; the padding's lies past them all, so it never wins
        where = type(self).arange(plane, device=self.device).reshape(spatial).pad(pads, value=plane)
        win = x._pool(ks, st, dl)
        hit = (win == values.reshape(values.shape + (1,) * n)) | (win != win)  # (a nan is the max)
        return values, hit.where(where._pool(ks, st, dl), plane)._min(axes, False)

    def max_unpool2d(
        self,
        indices: Tensor,
        kernel_size: Size = (2, 2),
        stride: Size | None = None,
        padding: Size = 0,
        output_size: Sequence[int] | None = None,
    ) -> Tensor:
        """Each value put at its position ``indices`` (``max_pool2d(..., return_indices=True)``'s)
        in planes of zeros, as ``F.max_unpool2d``. A plane is ``(in - 1) * stride - padding +
        kernel`` along each axis (padding before and after summed), or ``output_size``'s last axes.

        >>> Tensor([[5, 2]]).max_unpool1d(Tensor([[1, 2]]), 2).tolist()
        [[0, 5, 2, 0]]
        """
        n = 2 if isinstance(kernel_size, int) else len(kernel_size)
        ks = _tuple(kernel_size, n, "kernel_size")
        st = ks if stride is None or stride == () else _tuple(stride, n, "stride")
        if indices.shape != self.shape:
            raise ShapeError(
                f"max_unpool needs indices of the values' shape {self.shape}, got {indices.shape}"
            )
        zipped = zip(self.shape[-n:], st, _padding_pairs(padding, n), ks, strict=True)
        outs = tuple((i - 1) * s - b - a + k for i, s, (b, a), k in zipped)
        if output_size is not None:  # any size that pools back to this one, as PyTorch checks
            given = tuple(output_size)[-n:]
            if len(output_size) not in (n, n + 2) or any(
                not o - s < g < o + s for g, o, s in zip(given, outs, st, strict=True)
            ):
                raise ShapeError(
                    f"max_unpool output_size {tuple(output_size)}: needs {n} (or {n + 2}) sizes, "
                    f"each within stride of {outs}, exclusive (sizes that pool to {self.shape})"
                )
            outs = given
        lead, count = self.shape[:-n], math.prod(self.shape[-n:])
        values, index = self.reshape(lead + (count,)), indices.reshape(lead + (count,))
        planes = type(self).zeros(lead + (math.prod(outs),), dtype=self.dtype, device=self.device)
        out = planes.scatter(-1, index, values)._with_gradient(_unpool_gradient, (values, index))
        return out.reshape(lead + outs)

    def avg_pool2d(
        self,
        kernel_size: Size = (2, 2),
        stride: Size | None = None,
        padding: Size = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> Tensor:
        """The mean of each window; ``padding`` as conv2d's. ``count_include_pad`` counts the
        explicit padding, never the extra cells ``ceil_mode`` adds (as PyTorch)."""
        n, ks, st, dl, pads = self._pool_setup(kernel_size, stride, padding, 1, ceil_mode)
        x = self._float_operand().pad([None] * (self.ndim - n) + pads)
        total = x._pool(ks, st, dl).sum(tuple(range(x.ndim, x.ndim + n)))
        ones = type(self).ones(self.shape[-n:], device=self.device)
        if count_include_pad:
            given = _padding_pairs(padding, n)
            ones = ones.pad(given, value=1.0)
            ones = ones.pad([(0, a - g) for (_, a), (_, g) in zip(pads, given, strict=True)])
        else:
            ones = ones.pad(pads)
        count = ones._pool(ks, st, dl).sum(tuple(range(n, 2 * n)))
        return total / count

    def max_pool1d(self, kernel_size: Size, *args: Any, **kwargs: Any) -> Any:
        return self.max_pool2d(_tuple(kernel_size, 1, "kernel_size"), *args, **kwargs)

    def max_pool3d(self, kernel_size: Size, *args: Any, **kwargs: Any) -> Any:
        return self.max_pool2d(_tuple(kernel_size, 3, "kernel_size"), *args, **kwargs)

    def avg_pool1d(self, kernel_size: Size, *args: Any, **kwargs: Any) -> Tensor:
        return self.avg_pool2d(_tuple(kernel_size, 1, "kernel_size"), *args, **kwargs)

    def avg_pool3d(self, kernel_size: Size, *args: Any, **kwargs: Any) -> Tensor:
        return self.avg_pool2d(_tuple(kernel_size, 3, "kernel_size"), *args, **kwargs)

    def max_unpool1d(self, indices: Tensor, kernel_size: Size, *args: Any, **kwargs: Any) -> Tensor:
        return self.max_unpool2d(indices, _tuple(kernel_size, 1, "kernel_size"), *args, **kwargs)

    def max_unpool3d(self, indices: Tensor, kernel_size: Size, *args: Any, **kwargs: Any) -> Tensor:
        return self.max_unpool2d(indices, _tuple(kernel_size, 3, "kernel_size"), *args, **kwargs)

    def adaptive_avg_pool2d(self, output_size: Size) -> Tensor:
        """Average over windows [floor(j*I/O), ceil((j+1)*I/O)) so the last axes become
        ``output_size``."""
        n = 2 if isinstance(output_size, int) else len(output_size)
        outs = _tuple(output_size, n, "output_size")
        x = self._float_operand()
        for j, o in enumerate(outs):
            axis = self.ndim - n + j
            i = x.shape[axis]
            weights = np.zeros((i, o), dtype=np.float32)
            for k in range(o):
                lo, hi = (k * i) // o, -(-((k + 1) * i) // o)
                weights[lo:hi, k] = 1.0 / (hi - lo)
            x = x._apply_on_axis(axis, weights)
        return x

    def _apply_on_axis(self, axis: int, matrix: np.ndarray | Tensor) -> Tensor:
        """Contract ``axis`` (size I) with an (I, O) matrix: a weighted sum along one axis."""
        m = matrix if is_tensor(matrix) else type(self)(matrix, device=self.device)
        m = m.cast(self.dtype)
        return self.transpose(axis, -1).matmul(m).transpose(axis, -1)

    # ---- resizing --------------------------------------------------------------------------------

    def interpolate(
        self,
        size: Size | None = None,
        scale_factor: float | Sequence[float] | None = None,
        mode: str = "nearest",
        align_corners: bool | None = None,
    ) -> Tensor:
        """Resize the spatial axes (all but the first two), as ``torch.nn.functional.interpolate``.

        Modes: nearest, nearest-exact, linear, bilinear, trilinear (linear along each axis),
        bicubic (torch's cubic convolution, a = -0.75, edges repeated) and area (the mean of
        each output's window, as ``adaptive_avg_pool2d``)."""
        n = self.ndim - 2
        if mode not in RESIZE_MODES:
            raise FusegradError(
                f"interpolate mode {mode!r} is not supported; use one of {', '.join(RESIZE_MODES)}"
            )
        if size is None:
            if scale_factor is None:
                raise FusegradError("interpolate needs size or scale_factor")
            factors = scale_factor if isinstance(scale_factor, Sequence) else (scale_factor,) * n
            outs = tuple(
                int(math.floor(i * f)) for i, f in zip(self.shape[2:], factors, strict=False)
            )
            scales = [1 / f for f in factors]
        else:
            outs = _tuple(size, n, "size")
            scales = [i / o for i, o in zip(self.shape[2:], outs, strict=False)]
        if mode == "area":
            return self.adaptive_avg_pool2d(outs)
        x = cast("Tensor", self)
        for j in reversed(range(n)):  # the last axis first, as PyTorch (uint8 rounds each pass)
            axis, i, o, scale = 2 + j, self.shape[2 + j], outs[j], scales[j]
            dst = np.arange(o, dtype=np.float64)
            if mode in ("nearest", "nearest-exact"):
                offset = 0.5 if mode == "nearest-exact" else 0.0
                src = np.minimum(np.floor((dst + offset) * scale), i - 1).astype(np.int32)
                x = x._take([(axis, type(self)(src, device=self.device))])
                continue
            corners, cubic = bool(align_corners), mode == "bicubic"
            if x.dtype == dtypes.uint8:  # an image stays one
                x = x._resample_uint8(axis, _resize_weights(i, o, scale, corners, cubic))
            else:
                weights = _resize_weights(i, o, scale, corners, cubic, np.float32)
                x = x._float_operand()._resampled(axis, weights)
        return x

    def _resampled(self, axis: int, weights: np.ndarray) -> Tensor:
        """The weighted sum along ``axis`` of ``weights`` (I, O), each output reading a few taps
        (2 linear, 4 cubic). Up to ``GATHERED_TAPS`` input elements per tap it is the
        (I, O) matmul (``_apply_on_axis``); past that each tap is a gather of a column of
        positions, weighted, so the work is the taps' and not I per output: (8, 64, 64, 64)
        resized bilinearly to 100 x 100 took 16 ms as matmuls (torch 4). The gradient is
        the matmul with the weights' transpose either way."""
        i, o = weights.shape
        taps = max(int((weights != 0).sum(0).max()), 1)
        if i <= GATHERED_TAPS * taps:
            return self._apply_on_axis(axis, weights.astype(np.float32))
        # each output's taps (k, o), nonzero ones first, and their weights (0 past the last)
        order = np.argsort(weights == 0, axis=0, kind="stable")[:taps]
        picked = np.take_along_axis(weights, order, 0).astype(np.float32)
        along = (o,) + (1,) * (self.ndim - 1 - axis)
        x, out = self.detach(), None
        for k in range(taps):
            where = type(self)(order[k].astype(np.int32), device=self.device)
            w = type(self)(picked[k].reshape(along), device=self.device).cast(self.dtype)
            term = x._take([(axis, where)]) * w
            out = term if out is None else out + term
        back = type(self)(weights.T.astype(np.float32), device=self.device).cast(self.dtype)
        source = cast("Tensor", self)
        return cast("Tensor", out)._with_gradient(_resample_gradient, (source, back), (axis,))

    def _resample_uint8(self, axis: int, weights: np.ndarray) -> Tensor:
        """A weighted sum along ``axis`` of uint8 values, to uint8 as PyTorch computes it: the
        (I, O) weights in fixed point with as many fraction bits as keep the largest in int16
        (at most 22), summed in int32, rounded half up and clamped to 0..255."""
        top = float(weights.max())
        bits = next(b for b in range(23) if b == 22 or int(0.5 + top * (2 << b)) >= 1 << 15)
        fixed = np.floor(weights * (1 << bits) + 0.5).astype(np.int32)  # (weights are >= 0)
        total = self.cast(dtypes.int32)._apply_on_axis(axis, fixed)
        return ((total + (1 << (bits - 1))) >> bits).clip(0, 255).cast(dtypes.uint8)

    # ---- normalisation, dropout, attention -------------------------------------------------------

    def batchnorm(
        self,
        weight: Tensor | None,
        bias: Tensor | None,
        mean: Tensor,
        invstd: Tensor,
        axis: int = 1,
    ) -> Tensor:
        """(x - mean) * weight * invstd + bias, the per-channel tensors laid along ``axis``."""
        axis = self._axis(axis)
        shape = tuple(self.shape[axis] if i == axis else 1 for i in range(self.ndim))
        x = self - mean.reshape(shape)
        if weight is not None:
            x = x * weight.reshape(shape)
        x = x * invstd.reshape(shape)
        return x + bias.reshape(shape) if bias is not None else x

    def layernorm(self, axis: int | Sequence[int] = -1, eps: float = 1e-5) -> Tensor:
        """(x - mean) / sqrt(var + eps) over ``axis`` (no weight or bias, as tinygrad)."""
        x = self - self.mean(axis, keepdim=True)
        return x * ((x * x).mean(axis, keepdim=True) + eps).rsqrt()

    def dropout(self, p: float = 0.5) -> Tensor:
        """Zero each element with probability ``p`` and scale the rest by 1/(1-p), while
        ``Tensor.training``; otherwise the tensor itself."""
        if not 0 <= p <= 1:
            raise InvalidValue(f"dropout probability has to be between 0 and 1, but got {p}")
        if not type(self).training or p == 0:
            return cast("Tensor", self)
        if p == 1:
            return self.zeros_like()
        keep = type(self).rand(self.shape, device=self.device) >= p
        return keep.where(self * (1 / (1 - p)), 0).cast(self.dtype)

    def scaled_dot_product_attention(
        self,
        key: Tensor,
        value: Tensor,
        attn_mask: Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> Tensor:
        """softmax(q @ k^T * scale + mask) @ v, as PyTorch's: a bool mask marks what may be
        attended to, a float mask is added; both broadcast. ``is_causal`` lets query i see keys
        0..i (aligned top-left when there are more keys than queries). ``enable_gqa`` repeats each
        key and value head (axis -3) for its group of query heads."""
        if is_causal and attn_mask is not None:
            raise InvalidArgument(
                "scaled_dot_product_attention takes attn_mask or is_causal=True, "
                "not both (as PyTorch); put the causal mask into attn_mask"
            )
        if enable_gqa:
            key, value = self._grouped(key, "key"), self._grouped(value, "value")
        scale = 1 / math.sqrt(self.shape[-1]) if scale is None else scale
        scores = self.matmul(key.transpose(-2, -1)) * scale
        if is_causal:
            attn_mask = self._causal_mask(*scores.shape[-2:])
        if attn_mask is not None:
            scores = (
                attn_mask.where(scores, -math.inf)
                if attn_mask.dtype == dtypes.bool
                else scores + attn_mask
            )
        return scores.softmax(-1).dropout(dropout_p).matmul(value)

    def _causal_mask(self, rows: int, cols: int) -> Tensor:
        """True where query ``i`` may see key ``j`` (``j <= i``), built once per size and device
        (the ops that build it took ~90 us of Python at each attention call)."""
        key = (rows, cols, self.device)
        if (mask := _CAUSAL_MASKS.get(key)) is None:
            if len(_CAUSAL_MASKS) >= CAUSAL_MASKS_KEPT:  # (a decode step's sizes change)
                _CAUSAL_MASKS.clear()
            ones = type(self).ones(rows, cols, dtype=dtypes.bool, device=self.device)
            mask = _CAUSAL_MASKS[key] = ones.tril().uop
        return self._wrap(mask, self.device)

    def _grouped(self, kv: Tensor, name: str) -> Tensor:
        """``kv`` with each head (axis -3) repeated for the query heads of its group."""
        if self.ndim < 3 or kv.ndim < 3:
            raise InvalidIndex(
                f"enable_gqa needs heads on axis -3 of the query {self.shape} and "
                f"the {name} {kv.shape}"
            )
        heads, kv_heads = self.shape[-3], kv.shape[-3]
        if kv_heads == 0 or heads % kv_heads:
            raise ShapeError(
                f"enable_gqa: the {name}'s {kv_heads} heads must divide the query's "
                f"{heads} (shapes {kv.shape} and {self.shape})"
            )
        group, lead = heads // kv_heads, kv.shape[:-3]
        x = kv.unsqueeze(-3).expand(lead + (kv_heads, group) + kv.shape[-2:])
        return x.reshape(lead + (heads,) + kv.shape[-2:])

    # ---- losses ----------------------------------------------------------------------------------

    def _class_mask(self, target: Tensor, axis: int) -> Tensor:
        """target (indices, the class axis missing) as a bool one-hot along ``axis``."""
        classes = self.shape[axis]
        shape = tuple(classes if i == axis else 1 for i in range(self.ndim))
        return target.unsqueeze(axis) == type(self).arange(classes, device=self.device).reshape(
            shape
        )

    def _nll(
        self,
        target: Tensor,
        axis: int,
        ignore_index: int,
        label_smoothing: float,
        reduction: str,
        weight: Tensor | None = None,
    ) -> Tensor:
        """The negative log likelihood of log-probabilities ``self`` at class indices ``target``."""
        shape = tuple(self.shape[axis] if i == axis else 1 for i in range(self.ndim))
        w = self.ones_like() if weight is None else weight.reshape(shape)._broadcast_to(self.shape)
        picked = self._class_mask(target, axis).where(w, 0.0)  # weight of the target class, one-hot
        valid = target != ignore_index
        loss = -(picked * self).sum(axis) * (1 - label_smoothing)
        if label_smoothing:
            loss = loss - label_smoothing * (self * w).mean(axis)
        loss = valid.where(loss, 0.0)
        if reduction != "mean":
            return _reduce_loss(loss, reduction)
        return loss.sum() / valid.where(picked.sum(axis), 0.0).sum()

    def nll_loss(
        self,
        target: Tensor,
        weight: Tensor | None = None,
        ignore_index: int = -100,
        reduction: str = "mean",
    ) -> Tensor:
        """``torch.nn.functional.nll_loss``: self holds log-probabilities, classes on axis 1;
        ``target`` holds class indices (an index outside the classes raises IndexError)."""
        _check_target("nll_loss", target)
        axis = self._check_loss_args("nll_loss", target, weight, reduction, 0.0, indices=True)
        self._check_classes("nll_loss", target, ignore_index, axis)
        return self._nll(target, axis, ignore_index, 0.0, reduction, weight)

    def cross_entropy(
        self,
        target: Tensor,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
        ignore_index: int = -100,
        weight: Tensor | None = None,
    ) -> Tensor:
        """``torch.nn.functional.cross_entropy`` of logits (classes on axis 1); ``target`` is class
        indices (an int tensor; one outside the classes raises IndexError) or class probabilities
        (a float tensor of the logits' shape)."""
        _check_target("cross_entropy", target)
        indices = target.dtype.is_int
        axis = self._check_loss_args(
            "cross_entropy", target, weight, reduction, label_smoothing, indices
        )
        logp = self.log_softmax(axis)
        if indices:
            self._check_classes("cross_entropy", target, ignore_index, axis)
            return logp._nll(target, axis, ignore_index, label_smoothing, reduction, weight)
        classes = self.shape[axis]
        target = target * (1 - label_smoothing) + label_smoothing / classes
        if weight is not None:
            target = target * weight.reshape(
                tuple(classes if i == axis else 1 for i in range(self.ndim))
            )
        return _reduce_loss(-(target * logp).sum(axis), reduction)

    def _check_loss_args(
        self,
        name: str,
        target: Tensor,
        weight: Tensor | None,
        reduction: str,
        label_smoothing: float,
        indices: bool,
    ) -> int:
        """The class axis of ``self``, after PyTorch's checks of a classification loss's
        arguments."""
        _check_reduction(reduction)
        if not 0.0 <= label_smoothing <= 1.0:
            raise InvalidArgument(
                f"label_smoothing must be between 0.0 and 1.0, got {label_smoothing}"
            )
        if self.ndim == 0:
            raise ShapeError(f"{name} needs scores of shape (C,) or (N, C, ...), got ()")
        axis = 1 if self.ndim > 1 else 0
        classes, expected = self.shape[axis], self.shape[:axis] + self.shape[axis + 1 :]
        if weight is not None and weight.shape != (classes,):
            raise ShapeError(
                f"{name} weight needs one value per class, shape ({classes},); got {weight.shape}"
            )
        if indices and not target.dtype.is_int:
            raise InvalidArgument(
                f"{name} needs class indices as an int tensor, got {target.dtype.name}"
            )
        if indices and target.shape != expected:
            raise ShapeError(
                f"{name} of scores {self.shape} needs class indices of shape "
                f"{expected}, got {target.shape}"
            )
        if not indices and target.shape != self.shape:
            raise ShapeError(
                f"{name} of scores {self.shape}: a float target holds class probabilities and "
                f"needs that shape, got {target.shape}; pass class indices ({expected}) as an "
                "int tensor"
            )
        return axis

    def _check_classes(self, name: str, target: Tensor, ignore_index: int, axis: int) -> None:
        """Have the class indices (but ``ignore_index``) checked to lie among the ``axis``
        classes: an IndexError at the next read, as PyTorch's at once (``tensor/bounds.py``)."""
        classes = self.shape[axis]
        kept = (target != ignore_index).where(target, 0)
        what = f"the {classes} classes (or ignore_index={ignore_index})"
        bounds.check_later(name, kept, 0, classes, what)

    def sparse_categorical_crossentropy(
        self,
        target: Tensor,
        ignore_index: int = -1,
        label_smoothing: float = 0.0,
        reduction: str = "mean",
    ) -> Tensor:
        """tinygrad's cross entropy of logits with classes on the last axis and index targets
        (one outside the classes raises IndexError at the next read, as cross_entropy's)."""
        self._check_classes("sparse_categorical_crossentropy", target, ignore_index, -1)
        return self.log_softmax(-1)._nll(
            target, self.ndim - 1, ignore_index, label_smoothing, reduction
        )

    def binary_crossentropy(self, target: Tensor, reduction: str = "mean") -> Tensor:
        """-(y log p + (1 - y) log(1 - p)) of probabilities, the logs clamped at -100 (PyTorch)."""
        loss = -(target * self.log().maximum(-100) + (1 - target) * (1 - self).log().maximum(-100))
        return _reduce_loss(loss, reduction)

    def binary_crossentropy_logits(
        self, target: Tensor, reduction: str = "mean", pos_weight: Tensor | None = None
    ) -> Tensor:
        """Binary cross entropy of logits: (1 - y) x + (1 + (w - 1) y) log(1 + e**-x), stably."""
        # log(1 + e**-x); maximum, not relu, so the slope at 0 is -1/2
        log_sigmoid_neg = (1 + (-self.abs()).exp()).log() + (-self).maximum(0)
        scale = 1 if pos_weight is None else 1 + (pos_weight - 1) * target
        return _reduce_loss((1 - target) * self + scale * log_sigmoid_neg, reduction)

    binary_cross_entropy = binary_crossentropy
    binary_cross_entropy_with_logits = binary_crossentropy_logits

    def mse_loss(self, target: Tensor, reduction: str = "mean") -> Tensor:
        """The mean squared error."""
        return _reduce_loss((self - target).square(), reduction)

    def l1_loss(self, target: Tensor, reduction: str = "mean") -> Tensor:
        """The mean absolute error."""
        return _reduce_loss((self - target).abs(), reduction)


def _conv_padding(
    padding: Size | str, ks: tuple[int, ...], dilation: tuple[int, ...], stride: tuple[int, ...]
) -> list[tuple[int, int]]:
    """(before, after) per spatial axis from an int, ints, 'valid' or 'same'."""
    if padding == "valid":
        return [(0, 0)] * len(ks)
    if padding == "same":
        if any(s != 1 for s in stride):
            raise InvalidArgument("padding='same' needs stride 1, as in PyTorch; pad explicitly")
        totals = [d * (k - 1) for d, k in zip(dilation, ks, strict=False)]
        return [(t // 2, t - t // 2) for t in totals]
    if isinstance(padding, str):
        raise UnknownOption(f"padding must be an int, ints, 'same' or 'valid', got {padding!r}")
    return _padding_pairs(padding, len(ks))


#: a resize reads each output's taps by gathers, not as a matmul over the whole axis, once the
#: axis is longer than this many times the taps (``_resampled``)
GATHERED_TAPS = 8


def _resample_gradient(g: Tensor, x: Tensor, back: Tensor, axis: int) -> tuple[Tensor, None]:
    """The gradient of ``x._resampled(axis, W)``: g along ``axis`` times W's transpose, ``back``
    (O, I)."""
    return g._apply_on_axis(axis, back), None


RESIZE_MODES = ("nearest", "nearest-exact", "linear", "bilinear", "trilinear", "bicubic", "area")
#: torch's cubic convolution coefficient (``upsample_bicubic2d``)
CUBIC_A = -0.75


def _resize_weights(
    i: int, o: int, scale: float, align_corners: bool, cubic: bool, dtype: type = np.float64
) -> np.ndarray:
    """(i, o): how much input element k adds to output element j when resizing an axis of ``i``
    to ``o`` linearly (2 taps) or by cubic convolution (4), as PyTorch places the taps: output j
    reads position j * (i - 1) / (o - 1) with ``align_corners``, else (j + 0.5) * ``scale`` -
    0.5 (not below 0 for linear); taps past the ends read the edge element. Computed in
    ``dtype``: PyTorch computes a float tensor's positions and weights in float32, a uint8
    image's fixed-point weights from float64."""
    dst: np.ndarray = np.arange(o, dtype=dtype)
    if align_corners:
        pos = dst * dtype((i - 1) / (o - 1)) if o > 1 else np.zeros(o, dtype)
    else:
        pos = (dst + dtype(0.5)) * dtype(scale) - dtype(0.5)
        pos = pos if cubic else np.maximum(pos, dtype(0))
    base = np.floor(pos)
    t = pos - base
    if cubic:
        a = dtype(CUBIC_A)
        taps = [(shift, cubic_kernel(t - shift, a)) for shift in (-1, 0, 1, 2)]
    else:
        taps = [(0, 1 - t), (1, t)]
    weights: np.ndarray = np.zeros((i, o), dtype=dtype)
    for shift, w in taps:
        k = np.clip(base.astype(np.int64) + shift, 0, i - 1)
        np.add.at(weights, (k, np.arange(o)), w)
    return weights


def cubic_kernel(x: np.ndarray, a: Any) -> np.ndarray:
    """Keys' cubic convolution kernel with parameter ``a`` at offsets ``x`` (0 from 2 on), in
    their dtype: ``interpolate``'s bicubic taps, and ONNX Resize's cubic ones."""
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x <= 1, near, np.where(x < 2, far, 0.0))


def _padding_pairs(padding: Size, n: int) -> list[tuple[int, int]]:
    """(before, after) for each of ``n`` spatial axes from an int, one int per axis, or ``2n``
    ints in ``F.pad``'s order, the last axis first: (left, right, top, bottom, ...), as tinygrad
    reads them. Negative amounts crop."""
    if isinstance(padding, int):
        return [(padding, padding)] * n
    p = tuple(int(v) for v in padding)
    if len(p) == n:
        return [(v, v) for v in p]
    if len(p) == 2 * n:
        return [(p[2 * j], p[2 * j + 1]) for j in reversed(range(n))]
    raise ShapeError(
        f"padding needs 1, {n} (one per spatial axis) or {2 * n} values ((left, right, top, "
        f"bottom, ...) as F.pad), got {p}"
    )
