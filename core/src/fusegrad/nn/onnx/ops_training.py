"""The optimizer steps of the ``ai.onnx.preview.training`` domain: Adagrad, Momentum, Adam.

Each takes the learning rate R and the step count T (scalars, read on the host), then n
tensors X, their gradients G and their optimizer state, and returns the new X's followed by
the new state, one list after the other, as the spec's pseudo code says.
"""

from __future__ import annotations

import numpy as np

from fusegrad.nn.onnx.registry import Node, onnx_op
from fusegrad.tensor import Tensor

TRAINING = "ai.onnx.preview.training"


def _scalars(n: Node, rate: Tensor, step: Tensor) -> tuple[float, int]:
    return float(n.scalar(0, rate)), int(n.scalar(1, step))


def _groups(tensors: tuple[Tensor, ...], count: int) -> list[tuple[Tensor, ...]]:
    """(X_i, G_i, state_i...) for each of the tensors being optimized."""
    k = len(tensors) // count
    return [tuple(tensors[j * k + i] for j in range(count)) for i in range(k)]


@onnx_op("Adagrad", domain=TRAINING)
def adagrad(n: Node, rate: Tensor, step: Tensor, *tensors: Tensor) -> tuple[Tensor, ...]:
    r, t = _scalars(n, rate, step)
    r = r / (1 + t * n.attr("decay_factor", 0.0))
    news, states = [], []
    for x, g, h in _groups(tensors, 3):
        g = x * n.attr("norm_coefficient", 0.0) + g
        h = h + g * g
        news.append((x - r * g / (h.sqrt() + n.attr("epsilon", 1e-6))).cast(x.dtype))
        states.append(h.cast(x.dtype))
    return (*news, *states)


@onnx_op("Momentum", domain=TRAINING)
def momentum(n: Node, rate: Tensor, step: Tensor, *tensors: Tensor) -> tuple[Tensor, ...]:
    """Standard or Nesterov momentum; beta is 1 on the first step (T = 0)."""
    r, t = _scalars(n, rate, step)
    alpha, beta = n.attr("alpha"), n.attr("beta") if t > 0 else 1.0
    nesterov = n.attr("mode") == "nesterov"
    news, states = [], []
    for x, g, v in _groups(tensors, 3):
        g = x * n.attr("norm_coefficient") + g
        v = v * alpha + g * beta
        news.append((x - r * (g + v * alpha if nesterov else v)).cast(x.dtype))
        states.append(v.cast(x.dtype))
    return (*news, *states)


@onnx_op("Adam", domain=TRAINING)
def adam(n: Node, rate: Tensor, step: Tensor, *tensors: Tensor) -> tuple[Tensor, ...]:
    r, t = _scalars(n, rate, step)
    alpha, beta = n.attr("alpha", 0.9), n.attr("beta", 0.999)
    if t > 0:
        r = r * np.sqrt(1 - beta**t) / (1 - alpha**t)
    news, firsts, seconds = [], [], []
    for x, g, v, h in _groups(tensors, 4):
        g = x * n.attr("norm_coefficient", 0.0) + g
        v = v * alpha + g * (1 - alpha)
        h = h * beta + g * g * (1 - beta)
        x_new = x - r * v / (h.sqrt() + n.attr("epsilon", 1e-6))
        news.append((x_new * (1 - n.attr("norm_coefficient_post", 0.0))).cast(x.dtype))
        firsts.append(v.cast(x.dtype))
        seconds.append(h.cast(x.dtype))
    return (*news, *firsts, *seconds)
