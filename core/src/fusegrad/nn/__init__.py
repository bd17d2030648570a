"""Layers: small classes that own parameter Tensors and are called like functions.

Constructor arguments follow tinygrad (which follows PyTorch), and so do the initial values:
Linear and the convolutions draw weights and biases from U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
PyTorch's ``kaiming_uniform_(a=sqrt(5))``. Parameters are Tensors with ``requires_grad=True``
that already hold their values in a buffer of their own (made on the host, no kernel runs),
so two parameters are never the same graph node. The arithmetic is in the Tensor methods
(``conv2d``, ``batchnorm``, ``layernorm``, ``dropout``...); a layer only holds the weights.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from fusegrad.errors import InvalidArgument, InvalidType, InvalidValue, ShapeError
from fusegrad.helpers import prod
from fusegrad.tensor import Tensor, bounds

__all__ = [
    "BatchNorm",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv1d",
    "Conv2d",
    "ConvTranspose2d",
    "Dropout",
    "Embedding",
    "GroupNorm",
    "LayerNorm",
    "Linear",
    "RMSNorm",
    "optim",
    "state",
]

IntOrTuple = int | Sequence[int]


def _uniform(shape: tuple[int, ...], bound: float) -> Tensor:
    """A parameter drawn from U(-bound, bound), with Tensor's seeded generator."""
    values = Tensor.rand(*shape).numpy() * (2 * bound) - bound
    return Tensor(values, requires_grad=True)


def _filled(shape: tuple[int, ...], value: float, requires_grad: bool = True) -> Tensor:
    """A parameter (or, with ``requires_grad=False``, a statistic) holding ``value``."""
    return Tensor(np.full(shape, value, np.float32), requires_grad=requires_grad)


def _positive(layer: str, **sizes: IntOrTuple) -> None:
    """Refuse a size below 1 (or not an int) when the layer is made, not in a division later."""
    for name, size in sizes.items():
        for v in (size,) if isinstance(size, (int, float)) else tuple(size):
            if not isinstance(v, int):
                raise InvalidType(f"{layer}: {name}={size!r} must be an int; write int(...)")
            if v < 1:
                raise InvalidValue(f"{layer}: {name}={size!r} must be a positive size (>= 1)")


def _tuple(x: IntOrTuple, n: int) -> tuple[int, ...]:
    return (x,) * n if isinstance(x, int) else tuple(x)


class Linear:
    """``y = x @ weight.T + bias``, with weight of shape (out_features, in_features).

    >>> from fusegrad import Tensor
    >>> Linear(3, 2)(Tensor.ones(4, 3)).shape
    (4, 2)
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True):
        _positive("Linear", in_features=in_features, out_features=out_features)
        bound = 1 / math.sqrt(in_features)
        self.weight = _uniform((out_features, in_features), bound)
        self.bias = _uniform((out_features,), bound) if bias else None

    def __call__(self, x: Tensor) -> Tensor:
        y = x @ self.weight.T
        return y + self.bias if self.bias is not None else y


class Conv2d:
    """2-d convolution (cross-correlation, as PyTorch); weight (out, in // groups, *kernel_size).

    ``padding`` is an int, one int per axis, ``"same"`` or ``"valid"``.

    >>> from fusegrad import Tensor
    >>> Conv2d(1, 4, 3, padding=1)(Tensor.ones(2, 1, 5, 5)).shape
    (2, 4, 5, 5)
    """

    spatial_dims = 2

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: IntOrTuple,
        stride: IntOrTuple = 1,
        padding: IntOrTuple = 0,
        dilation: IntOrTuple = 1,
        groups: int = 1,
        bias: bool = True,
    ):
        _positive(
            type(self).__name__,
            in_channels=in_channels,
            out_channels=out_channels,
            kernel_size=kernel_size,
            stride=stride,
            dilation=dilation,
            groups=groups,
        )
        if isinstance(padding, str) and padding not in ("same", "valid"):
            raise InvalidValue(
                f"padding={padding!r} is not a padding; use an int, 'same' or 'valid'"
            )
        if in_channels % groups or out_channels % groups:
            raise ShapeError(
                f"groups={groups} must divide in_channels={in_channels} and "
                f"out_channels={out_channels}"
            )
        self.kernel_size = _tuple(kernel_size, self.spatial_dims)
        self.in_channels, self.out_channels = in_channels, out_channels
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.weight = self._init_weight((out_channels, in_channels // groups, *self.kernel_size))
        bound = 1 / math.sqrt(prod(self.weight.shape[1:]))
        self.bias = _uniform((out_channels,), bound) if bias else None

    @staticmethod
    def _init_weight(shape: tuple[int, ...]) -> Tensor:
        """kaiming_uniform(a=sqrt(5)): bound = gain * sqrt(3 / fan_in) = 1 / sqrt(fan_in)."""
        return _uniform(shape, 1 / math.sqrt(prod(shape[1:])))

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv2d(
            self.weight,
            self.bias,
            groups=self.groups,
            stride=self.stride,
            dilation=self.dilation,
            padding=self.padding,
        )


class Conv1d(Conv2d):
    """1-d convolution over (batch, channels, length); weight (out, in // groups, kernel_size).

    ``Tensor.conv2d`` takes the number of spatial axes from the weight, so only the shapes differ.
    """

    spatial_dims = 1


class ConvTranspose2d(Conv2d):
    """The gradient of a Conv2d with respect to its input; weight (in, out // groups, *kernel)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: IntOrTuple,
        stride: IntOrTuple = 1,
        padding: IntOrTuple = 0,
        output_padding: IntOrTuple = 0,
        dilation: IntOrTuple = 1,
        groups: int = 1,
        bias: bool = True,
    ):
        super().__init__(
            in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias
        )
        self.output_padding = output_padding
        # the weight is stored transposed; fan_in is counted on the stored layout, as in PyTorch
        self.weight = self._init_weight((in_channels, out_channels // groups, *self.kernel_size))
        if bias:
            self.bias = _uniform((out_channels,), 1 / math.sqrt(prod(self.weight.shape[1:])))

    def __call__(self, x: Tensor) -> Tensor:
        return x.conv_transpose2d(
            self.weight,
            self.bias,
            groups=self.groups,
            stride=self.stride,
            dilation=self.dilation,
            padding=self.padding,
            output_padding=self.output_padding,
        )


class BatchNorm:
    """Batch normalization over every axis but 1 (the channels).

    While ``Tensor.training``, it normalizes with the batch's mean and (biased) variance and
    moves the running statistics towards them: ``running = (1 - momentum) * running +
    momentum * batch``, with the unbiased variance, as PyTorch. Otherwise it normalizes with
    the running statistics (or the batch's, if ``track_running_stats=False``).
    """

    def __init__(
        self,
        sz: int,
        eps: float = 1e-5,
        affine: bool = True,
        track_running_stats: bool = True,
        momentum: float = 0.1,
    ):
        _positive("BatchNorm", num_features=sz)
        self.eps, self.track_running_stats, self.momentum = eps, track_running_stats, momentum
        self.weight = _filled((sz,), 1.0) if affine else None
        self.bias = _filled((sz,), 0.0) if affine else None
        if track_running_stats:
            self.running_mean = _filled((sz,), 0.0, requires_grad=False)
            self.running_var = _filled((sz,), 1.0, requires_grad=False)
            self.num_batches_tracked = Tensor(np.zeros((), np.int64), requires_grad=False)

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2:
            raise ShapeError(f"BatchNorm needs (batch, channels, ...) input, got shape {x.shape}")
        if self.track_running_stats and not Tensor.training:
            mean, var = self.running_mean, self.running_var
        else:
            mean, var = self._batch_stats(x)
        return x.batchnorm(self.weight, self.bias, mean, (var + self.eps).rsqrt())

    def _batch_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
        # the spatial axes as one: each channel's sums run over long contiguous rows
        x = x.reshape(x.shape[0], x.shape[1], -1)
        mean = x.mean((0, 2))
        # d var / d mean = 0, so the mean inside the variance may be detached: a smaller backward
        centered = x - mean.detach().reshape(1, -1, 1)
        var = (centered * centered).mean((0, 2))
        if self.track_running_stats and Tensor.training:
            n = x.numel() // x.shape[1]
            unbiased = var.detach() * (n / max(n - 1, 1))
            m = self.momentum
            self.running_mean.assign((1 - m) * self.running_mean + m * mean.detach())
            self.running_var.assign((1 - m) * self.running_var + m * unbiased)
            self.num_batches_tracked.assign(self.num_batches_tracked + 1)
        return mean, var


BatchNorm1d = BatchNorm2d = BatchNorm


class LayerNorm:
    """Normalize over the last ``len(normalized_shape)`` axes, then scale and shift."""

    def __init__(
        self, normalized_shape: IntOrTuple, eps: float = 1e-5, elementwise_affine: bool = True
    ):
        _positive("LayerNorm", normalized_shape=normalized_shape)
        self.normalized_shape = _tuple(normalized_shape, 1)
        self.axis = tuple(-1 - i for i in range(len(self.normalized_shape)))
        self.eps, self.elementwise_affine = eps, elementwise_affine
        self.weight = _filled(self.normalized_shape, 1.0) if elementwise_affine else None
        self.bias = _filled(self.normalized_shape, 0.0) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        if x.shape[-len(self.normalized_shape) :] != self.normalized_shape:
            raise ShapeError(
                f"LayerNorm{self.normalized_shape} got input of shape {x.shape}; its last "
                f"axes must be {self.normalized_shape}"
            )
        y = x.layernorm(axis=self.axis, eps=self.eps)
        if self.weight is None or self.bias is None:
            return y
        return y * self.weight + self.bias


class GroupNorm:
    """Split the channels into ``num_groups`` and normalize each group of each sample."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True):
        _positive("GroupNorm", num_groups=num_groups, num_channels=num_channels)
        if num_channels % num_groups:
            raise ShapeError(f"num_groups={num_groups} must divide num_channels={num_channels}")
        self.num_groups, self.num_channels, self.eps, self.affine = (
            num_groups,
            num_channels,
            eps,
            affine,
        )
        self.weight = _filled((num_channels,), 1.0) if affine else None
        self.bias = _filled((num_channels,), 0.0) if affine else None

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim < 2 or x.shape[1] != self.num_channels:
            raise ShapeError(
                f"GroupNorm of {self.num_channels} channels got input of shape {x.shape}"
            )
        y = (
            x.reshape(x.shape[0], self.num_groups, -1)
            .layernorm(axis=-1, eps=self.eps)
            .reshape(x.shape)
        )
        if self.weight is None or self.bias is None:
            return y
        per_channel = (1, -1, *(1,) * (x.ndim - 2))
        return y * self.weight.reshape(per_channel) + self.bias.reshape(per_channel)


class RMSNorm:
    """``x / sqrt(mean(x**2) + eps) * weight`` over the last ``len(normalized_shape)`` axes."""

    def __init__(self, dim: IntOrTuple, eps: float = 1e-6, elementwise_affine: bool = True):
        self.normalized_shape = _tuple(dim, 1)
        self.axis = tuple(-1 - i for i in range(len(self.normalized_shape)))
        self.eps = eps
        self.weight = _filled(self.normalized_shape, 1.0) if elementwise_affine else None

    def __call__(self, x: Tensor) -> Tensor:
        y = x * ((x * x).mean(self.axis, keepdim=True) + self.eps).rsqrt()
        return y * self.weight if self.weight is not None else y


class Embedding:
    """Row ``i`` of ``weight`` for each index ``i``; weight (vocab_size, embed_size),
    glorot-uniform."""

    def __init__(self, vocab_size: int, embed_size: int):
        _positive("Embedding", vocab_size=vocab_size, embed_size=embed_size)
        self.vocab_size, self.embed_size = vocab_size, embed_size
        self.weight = _uniform((vocab_size, embed_size), math.sqrt(6 / (vocab_size + embed_size)))

    def __call__(self, idx: Tensor) -> Tensor:
        if idx.dtype.is_float:
            raise InvalidArgument(
                f"Embedding needs integer indices, got {idx.dtype.name}; cast them with .long()"
            )
        rows = f"the {self.vocab_size} rows of the embedding"
        bounds.check_later("Embedding", idx, 0, self.vocab_size, rows)
        return idx._rows_of(self.weight)  # one load per element (Ops.GATHER)


class Dropout:
    """Zero each element with probability ``p`` while ``Tensor.training`` (scaling the rest)."""

    def __init__(self, p: float = 0.5):
        if not 0 <= p <= 1:
            raise InvalidValue(f"Dropout probability has to be between 0 and 1, but got {p}")
        self.p = p

    def __call__(self, x: Tensor) -> Tensor:
        return x.dropout(self.p)


from fusegrad.nn import optim, state  # noqa: E402  (nn.optim.Adam, nn.state.get_parameters)
