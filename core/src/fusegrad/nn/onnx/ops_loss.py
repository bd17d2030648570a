"""ONNX's classification losses: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

The value at each target class is picked with a one-hot comparison against the class axis (a
fused reduction, no gather kernel). A target equal to ``ignore_index`` weighs 0 and is left out
of the mean's denominator.
"""

from __future__ import annotations

from typing import Any

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.ops_nn import bad_choice, text
from fusegrad.nn.onnx.registry import Node, onnx_op
from fusegrad.nn.onnx.runner import onnx_check
from fusegrad.tensor import Tensor


def _one_hot(target: Tensor, classes: int, ndim: int) -> Tensor:
    """(N, C, d...) bool: target's class along axis 1."""
    shape = (1, classes) + (1,) * (ndim - 2)
    ids = Tensor.arange(classes, device=target.device, dtype=dtypes.int64).reshape(shape)
    return target.cast(dtypes.int64).unsqueeze(1) == ids


def _nll(node: Node, logp: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
    """The reduced negative log likelihood of log-probabilities ``logp`` (N, C, d...)."""
    classes, ignore = logp.shape[1], node.attr("ignore_index")
    hot = _one_hot(target, classes, logp.ndim)
    loss = -(hot.where(logp, 0.0).sum(1))
    if weight is not None:  # a class out of range takes the nearest class's weight (as numpy clip)
        clipped = target.cast(dtypes.int64).clip(0, classes - 1)
        weights = (
            _one_hot(clipped, classes, logp.ndim)
            .where(weight.reshape((1, classes) + (1,) * (logp.ndim - 2)), 0.0)
            .sum(1)
            .cast(logp.dtype)
        )
    else:
        weights = Tensor.ones(target.shape, dtype=logp.dtype, device=logp.device)
    if ignore is not None:
        keep = target.cast(dtypes.int64) != int(ignore)
        weights = keep.where(weights, 0.0).cast(logp.dtype)
        loss = keep.where(loss, 0.0)
    loss = (loss * weights).cast(logp.dtype)
    reduction = text(node.attr("reduction", "mean"))
    if reduction == "none":
        return loss
    if reduction == "sum":
        return loss.sum()
    if weight is None and ignore is None:
        return loss.mean()
    return (loss.sum() / weights.sum()).cast(logp.dtype)


@onnx_op("NegativeLogLikelihoodLoss", since=12)
def negative_log_likelihood_loss(
    node: Node, logp: Tensor, target: Tensor, weight: Tensor | None = None
) -> Tensor:
    return _nll(node, logp, target, weight)


@onnx_op("SoftmaxCrossEntropyLoss", since=12)
def softmax_cross_entropy_loss(
    node: Node, scores: Tensor, labels: Tensor, weight: Tensor | None = None
) -> Any:
    """NLL of log_softmax(scores) over axis 1; the second output is the log-probabilities."""
    logp = scores.log_softmax(1)
    loss = _nll(node, logp, labels, weight)
    return [loss, logp] if len(node.outputs) > 1 and node.outputs[1] else loss


@onnx_check("NegativeLogLikelihoodLoss")
@onnx_check("SoftmaxCrossEntropyLoss")
def check_reduction(node: Node) -> str | None:
    return bad_choice(node, {"reduction": ("mean", ("none", "sum", "mean"))})
