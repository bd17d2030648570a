"""Neural-network methods of ``Tensor``: convolution and pooling, resizing, normalisation,
dropout, attention and losses.

Convolution and pooling share one idea: ``_pool`` turns each spatial axis into (output, kernel)
axes of sliding windows using only movement ops (repeat the axis, reshape so each row starts
``dilation`` later, keep every ``stride``-th row), so a convolution is a multiply and a sum.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fusegrad.dtype import dtypes
from fusegrad.errors import FusegradError, ShapeError
from fusegrad.uop.ops import GroupOp, Ops, UOp

if TYPE_CHECKING:
    from fusegrad.tensor import Tensor

Size = int | Sequence[int]


def _tuple(x: Size, n: int, name: str) -> tuple[int, ...]:
    """An int repeated ``n`` times, or a sequence of exactly ``n`` ints."""
    if isinstance(x, int):
        return (x,) * n
    if len(x) != n:
        raise ShapeError(f"{name} needs {n} values (one per spatial axis), got {tuple(x)}")
    return tuple(int(v) for v in x)


def _innermost(t: Tensor, axis: int) -> Tensor:
    """``t`` copied so that ``axis`` is innermost in memory, seen in ``t``'s own axis order."""
    order = [a for a in range(t.ndim) if a != axis] + [axis]
    return t.permute(order).contiguous().permute([order.index(a) for a in range(t.ndim)])


def _conv_gradient(g: UOp, inputs: tuple[UOp, ...], params: tuple) -> tuple[UOp, UOp]:
    """d conv / d (padded input, weight), given the gradient ``g`` of the output.

    Taken through the window ops, the input's gradient would be one value per window element
    written out (for a 5x5 kernel, 25 times the input's size) and then summed back. It is the
    transposed convolution of ``g`` instead: a reduction of the same shape as the forward one.
    """
    from fusegrad.tensor import Tensor

    stride, dilation, groups, device = params
    grad, xp, weight = (Tensor._wrap(u, device) for u in (g, *inputs))
    if g.op is not Ops.BUFFER:  # computed once: both gradients below read it in other layouts
        grad = grad.contiguous()
    n, (cout, cin_g, *ks) = weight.ndim - 2, weight.shape
    batch, outs = grad.shape[0], grad.shape[2:]
    dx = grad.conv_transpose2d(weight, stride=stride, dilation=dilation, groups=groups)
    # positions after the last window are read by no window: their gradient is 0
    dx = dx.pad([None, None] + [(0, p - d) for p, d in zip(xp.shape[2:], dx.shape[2:], strict=True)])
    # The weight gradient sums over the whole batch for each of few outputs: every register tile
    # of outputs would stream all the data from memory. Summing chunks of 8 samples first keeps
    # a chunk's data in cache across tiles; the partial sums are small.
    chunks = batch // 8 if batch % 8 == 0 and batch >= 16 else 1
    win = xp._pool(tuple(ks), stride, dilation)
    win = win.reshape((chunks, batch // chunks, groups, 1, cin_g) + outs + tuple(ks))
    if (cout // groups) % 8 == 0:  # C_out innermost in memory (a copy): it runs as vectors
        grad = _innermost(grad, 1)
    g_win = grad.reshape((chunks, batch // chunks, groups, cout // groups, 1) + outs + (1,) * n)
    dw = (win * g_win).sum([1] + list(range(5, 5 + n))).reshape(chunks, -1).sum(0).reshape(weight.shape)
    return dx.uop, dw.uop


#: (shape, kernel, stride, dilation) -> the movement ops ``_pool`` applies, as (op, arg) pairs
_POOL_MOVES: dict[tuple, tuple[tuple[Ops, Any], ...]] = {}


def _pool_moves(x: Tensor, kernel: tuple[int, ...], stride: tuple[int, ...],
                dilation: tuple[int, ...]) -> tuple[tuple[Ops, Any], ...]:
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


def _reduce_loss(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if reduction == "mean":
        return loss.mean()
    raise FusegradError(f"reduction must be 'none', 'mean' or 'sum', got {reduction!r}")


class NNMixin:
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
            moves = _POOL_MOVES[key] = _pool_moves(self, kernel, stride, dilation)
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
        (C_out, C_in / groups, *kernel); ``padding`` may be an int, one per axis, 'same' or 'valid'.
        The number of spatial axes is taken from ``weight``, so this is conv1d and conv3d too."""
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
        # The weight is read with C_out innermost in memory (a small copy), so that the kernel
        # can load C_out filters as one vector and reuse each input element for all of them.
        w = _innermost(weight.reshape((groups, cout // groups, cin_g) + tuple(ks)), 1)
        w = w.reshape((1, groups, cout // groups, cin_g) + (1,) * n + tuple(ks))
        out = (win * w).sum([3] + list(range(4 + n, 4 + 2 * n))).reshape((batch, cout) + outs)
        out = out._with_gradient(_conv_gradient, (xp, weight), (stride, dilation, groups, x.device))
        if bias is not None:
            # over the spatial axes merged: the bias gradient then sums long contiguous rows
            out = (out.reshape(batch, cout, -1) + bias.reshape(1, cout, 1)).reshape(out.shape)
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
        padded by ``dilation * (kernel - 1) - padding``, with the kernel flipped and transposed."""
        n = weight.ndim - 2
        x = self.unsqueeze(0) if self.ndim == n + 1 else self
        cin, cout_g, *ks = weight.shape
        stride, dilation = _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation")
        padding, output_padding = (
            _tuple(padding, n, "padding"),
            _tuple(output_padding, n, "output_padding"),
        )
        for j, s in enumerate(stride):
            if s > 1:
                a, size = 2 + j, x.shape[2 + j]
                spread = x.unsqueeze(a + 1).pad(
                    [(0, s - 1) if i == a + 1 else None for i in range(x.ndim + 1)]
                )
                x = spread.reshape(x.shape[:a] + (size * s,) + x.shape[a + 1 :])
                x = x.shrink([(0, (size - 1) * s + 1) if i == a else None for i in range(x.ndim)])
        edge = [d * (k - 1) - p for d, k, p in zip(dilation, ks, padding, strict=False)]
        x = x.pad([None, None] + [(e, e + op) for e, op in zip(edge, output_padding, strict=False)])
        # Written out once (a small copy), so that the convolution's inner loop reads plain
        # memory instead of testing every tap for the zeros around and between the elements.
        x = x.contiguous()
        w = weight.reshape((groups, cin // groups, cout_g) + tuple(ks)).transpose(1, 2)
        w = w.reshape((groups * cout_g, cin // groups) + tuple(ks)).flip(list(range(2, 2 + n)))
        out = x.conv2d(w, bias, 1, 0, dilation, groups)
        return out if self.ndim == n + 2 else out.squeeze(0)

    def conv_transpose1d(self, weight: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return self.conv_transpose2d(weight, *args, **kwargs)

    def conv_transpose3d(self, weight: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return self.conv_transpose2d(weight, *args, **kwargs)

    # ---- pooling ---------------------------------------------------------------------------------

    def _pool_setup(
        self, kernel_size: Size, stride: Size | None, padding: Size, dilation: Size, ceil_mode: bool
    ) -> tuple:
        n = 2 if isinstance(kernel_size, int) else len(kernel_size)
        ks = _tuple(kernel_size, n, "kernel_size")
        st = ks if stride is None or stride == () else _tuple(stride, n, "stride")
        pd, dl = _tuple(padding, n, "padding"), _tuple(dilation, n, "dilation")
        extra = []
        for i, k, s, p, d in zip(self.shape[-n:], ks, st, pd, dl, strict=False):
            span = d * (k - 1) + 1
            o = (-(-(i + 2 * p - span) // s) if ceil_mode else (i + 2 * p - span) // s) + 1
            if ceil_mode and (o - 1) * s >= i + p:  # the last window must start inside the input
                o -= 1
            extra.append(max(0, (o - 1) * s + span - (i + 2 * p)))
        return n, ks, st, pd, dl, extra

    def max_pool2d(
        self,
        kernel_size: Size = (2, 2),
        stride: Size | None = None,
        padding: Size = 0,
        dilation: Size = 1,
        ceil_mode: bool = False,
    ) -> Tensor:
        """The largest value of each window over the last len(kernel_size) axes (padding never wins)."""
        n, ks, st, pd, dl, extra = self._pool_setup(
            kernel_size, stride, padding, dilation, ceil_mode
        )
        lead = [None] * (self.ndim - n)
        x = self.pad(
            lead + [(p, p + e) for p, e in zip(pd, extra, strict=False)], value=self.dtype.min
        )
        return x._pool(ks, st, dl).max(tuple(range(x.ndim, x.ndim + n)))

    def avg_pool2d(
        self,
        kernel_size: Size = (2, 2),
        stride: Size | None = None,
        padding: Size = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
    ) -> Tensor:
        """The mean of each window; ``count_include_pad`` counts the explicit padding, never the
        extra cells ``ceil_mode`` adds (as PyTorch)."""
        n, ks, st, pd, dl, extra = self._pool_setup(kernel_size, stride, padding, 1, ceil_mode)
        lead = [None] * (self.ndim - n)
        x = self._float_operand().pad(lead + [(p, p + e) for p, e in zip(pd, extra, strict=False)])
        total = x._pool(ks, st, dl).sum(tuple(range(x.ndim, x.ndim + n)))
        ones = type(self).ones(self.shape[-n:], device=self.device)
        if count_include_pad:
            ones = ones.pad([(p, p) for p in pd], value=1.0)
            ones = ones.pad([(0, e) for e in extra])
        else:
            ones = ones.pad([(p, p + e) for p, e in zip(pd, extra, strict=False)])
        count = ones._pool(ks, st, dl).sum(tuple(range(n, 2 * n)))
        return total / count

    def adaptive_avg_pool2d(self, output_size: Size) -> Tensor:
        """Average over windows [floor(j*I/O), ceil((j+1)*I/O)) so the last axes become ``output_size``."""
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

    def _apply_on_axis(self, axis: int, matrix: np.ndarray) -> Tensor:
        """Contract ``axis`` (size I) with an (I, O) matrix: a weighted sum along one axis."""
        m = type(self)(matrix, device=self.device).cast(self.dtype)
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

        Modes: nearest, nearest-exact, linear, bilinear, trilinear (linear along each axis)."""
        n = self.ndim - 2
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
        x = self
        for j, (o, scale) in enumerate(zip(outs, scales, strict=False)):
            axis, i = 2 + j, self.shape[2 + j]
            dst = np.arange(o, dtype=np.float64)
            if mode in ("nearest", "nearest-exact"):
                offset = 0.5 if mode == "nearest-exact" else 0.0
                src = np.minimum(np.floor((dst + offset) * scale), i - 1).astype(np.int32)
                x = x._take([(axis, type(self)(src, device=self.device))])
                continue
            if mode not in ("linear", "bilinear", "trilinear"):
                raise FusegradError(
                    f"interpolate mode {mode!r} is not supported; use nearest or linear"
                )
            if align_corners:
                pos = dst * ((i - 1) / (o - 1)) if o > 1 else np.zeros(o)
            else:
                pos = np.maximum((dst + 0.5) * scale - 0.5, 0)
            lo = np.minimum(np.floor(pos).astype(np.int64), i - 1)
            hi, frac = np.minimum(lo + 1, i - 1), pos - lo
            weights = np.zeros((i, o), dtype=np.float64)
            np.add.at(weights, (lo, np.arange(o)), 1 - frac)
            np.add.at(weights, (hi, np.arange(o)), frac)
            x = x._float_operand()._apply_on_axis(axis, weights.astype(np.float32))
        return x

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
        if not type(self).training or p == 0:
            return self
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
    ) -> Tensor:
        """softmax(q @ k^T * scale + mask) @ v; a bool mask marks what may be attended to."""
        scale = 1 / math.sqrt(self.shape[-1]) if scale is None else scale
        scores = self.matmul(key.transpose(-2, -1)) * scale
        if is_causal:
            rows, cols = scores.shape[-2:]
            allowed = type(self).ones(rows, cols, dtype=dtypes.bool, device=self.device).tril()
            scores = allowed.where(scores, -math.inf)
        if attn_mask is not None:
            scores = (
                attn_mask.where(scores, -math.inf)
                if attn_mask.dtype == dtypes.bool
                else scores + attn_mask
            )
        return scores.softmax(-1).dropout(dropout_p).matmul(value)

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
        """``torch.nn.functional.nll_loss``: self holds log-probabilities, classes on axis 1."""
        return self._nll(target, 1 if self.ndim > 1 else 0, ignore_index, 0.0, reduction, weight)

    def cross_entropy(
        self,
        target: Tensor,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
        ignore_index: int = -100,
        weight: Tensor | None = None,
    ) -> Tensor:
        """``torch.nn.functional.cross_entropy`` of logits (classes on axis 1); ``target`` is class
        indices or class probabilities."""
        axis = 1 if self.ndim > 1 else 0
        logp = self.log_softmax(axis)
        if target.dtype.is_int:
            return logp._nll(target, axis, ignore_index, label_smoothing, reduction, weight)
        classes = self.shape[axis]
        target = target * (1 - label_smoothing) + label_smoothing / classes
        if weight is not None:
            target = target * weight.reshape(
                tuple(classes if i == axis else 1 for i in range(self.ndim))
            )
        return _reduce_loss(-(target * logp).sum(axis), reduction)

    def sparse_categorical_crossentropy(
        self,
        target: Tensor,
        ignore_index: int = -1,
        label_smoothing: float = 0.0,
        reduction: str = "mean",
    ) -> Tensor:
        """tinygrad's cross entropy of logits with classes on the last axis and index targets."""
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
            raise FusegradError("padding='same' needs stride 1, as in PyTorch")
        totals = [d * (k - 1) for d, k in zip(dilation, ks, strict=False)]
        return [(t // 2, t - t // 2) for t in totals]
    if isinstance(padding, str):
        raise FusegradError(f"padding must be an int, ints, 'same' or 'valid', got {padding!r}")
    return [(p, p) for p in _tuple(padding, len(ks), "padding")]
