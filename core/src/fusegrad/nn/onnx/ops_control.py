"""ONNX's control flow: If, Loop and Scan.

Their bodies are subgraphs, run with ``Node.run_subgraph``. Which branch an If takes, and how
often a Loop turns, is decided on the host: from a value the runner knows without running a
kernel when it can (``Node.known``), else by reading the condition (one small kernel). A Scan
unrolls over its scan axis, whose length is always a shape, so it stays one lazy graph.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusegrad.dtype import dtypes
from fusegrad.engine import capture
from fusegrad.errors import FusegradError, InvalidValue
from fusegrad.nn.onnx.dtypes import to_dtype
from fusegrad.nn.onnx.ops_nn import host_value, read_back
from fusegrad.nn.onnx.registry import Node, onnx_op
from fusegrad.tensor import Tensor
from fusegrad.uop.ops import Ops, toposort


def host_scalar(node: Node, index: int, value: Any) -> Any:
    """Input ``index`` of ``node`` as a Python scalar: the known host value, else read back."""
    array = host_value(node, index, value, f"input {index}")
    return np.asarray(array).reshape(-1)[0].item()


def _run(node: Node, attr: str, inputs: list[Any]) -> list[Any]:
    if node.run_subgraph is None:
        raise InvalidValue(f"{node.op_type} node {node.name!r} was called without its subgraphs")
    return node.run_subgraph(attr, inputs)


@onnx_op("If")
def if_(node: Node, cond: Any) -> Any:
    """The outputs of ``then_branch`` when cond is true, else of ``else_branch``.

    Under a TinyJit capture, a condition computed from the model's activations is better not
    read back (a read waits for the device, and a guard that fails runs the model anew): where
    both branches run and give outputs of one shape and type, both are computed and ``where``
    picks each output. Otherwise, or when the condition comes from a few values only (a mode
    such as silero-vad's sample rate, whose branches are each the whole model), the condition
    is read back and guards the capture (``read_back``): replays whose condition differs run
    the model anew."""
    known = node.known_value(0)
    if known is None and isinstance(cond, Tensor) and capture.active() is not None:
        if not _from_few_values(cond) and (picked := _select_branches(node, cond)) is not None:
            return picked
    branch = "then_branch" if host_scalar(node, 0, cond) else "else_branch"
    return tuple(_run(node, branch, []))


#: a condition computed from buffers of at most this many elements is a mode, read back
MODE_ELEMENTS = 16


def _from_few_values(cond: Tensor) -> bool:
    """Whether ``cond`` is computed from buffers of at most ``MODE_ELEMENTS`` elements only."""
    leaves = [u for u in toposort([cond.uop]) if u.op is Ops.BUFFER]
    return all(u.arg.size <= MODE_ELEMENTS for u in leaves)


def _select_branches(node: Node, cond: Tensor) -> tuple[Any, ...] | None:
    """Both branches' outputs, chosen per output by the lazy condition; None where the branches
    cannot both run on these inputs or give outputs of different shapes or types."""
    try:
        then, other = _run(node, "then_branch", []), _run(node, "else_branch", [])
    except FusegradError:
        return None
    if not all(
        isinstance(a, Tensor)
        and isinstance(b, Tensor)
        and a.shape == b.shape
        and a.dtype == b.dtype
        for a, b in zip(then, other, strict=True)
    ):
        return None
    return tuple(cond.reshape(()).cast(dtypes.bool).where(a, b) for a, b in zip(then, other))


# ---- Loop ----------------------------------------------------------------------------------------


def _stack(slices: list[Tensor]) -> Tensor:
    if len(slices) == 1:
        return slices[0].unsqueeze(0)
    return Tensor.stack(slices, dim=0)


def _as_cond(value: Any) -> Tensor:
    return Tensor(np.asarray(bool(value))) if not isinstance(value, Tensor) else value


@onnx_op("Loop")
def loop(node: Node, trip_count: Any, cond: Any, *carried: Any) -> Any:
    """Run ``body`` while the iteration count is below ``trip_count`` (if given) and its
    condition holds; loop-carried values feed the next turn, scan outputs are stacked."""
    limit = None if trip_count is None else int(host_scalar(node, 0, trip_count))
    going = True if cond is None else bool(host_scalar(node, 1, cond))
    state, scans, turn = list(carried), [], 0
    cond_value = _as_cond(going) if cond is None else cond
    while going and (limit is None or turn < limit):
        count = Tensor(np.asarray(turn, dtype=np.int64))
        outs = _run(node, "body", [count, cond_value, *state])
        cond_value, state = outs[0], list(outs[1 : 1 + len(carried)])
        scans.append(outs[1 + len(carried) :])
        going = bool(np.asarray(_cond_now(node, cond_value)).reshape(-1)[0])
        turn += 1
    n_scans = len(node.outputs) - len(carried)
    stacked = [
        _stack([s[k] for s in scans]) if scans else _empty_scan(node, len(carried) + k)
        for k in range(n_scans)
    ]
    return tuple(state + stacked)


def _empty_scan(node: Node, output: int) -> Tensor:
    """The scan output of a loop that never ran: no rows, of the type onnx infers for it."""
    types = node.output_types
    elem = types[output] if output < len(types) else 0
    return Tensor.zeros((0,), dtype=to_dtype(elem) if elem else dtypes.float32)


def _cond_now(node: Node, cond: Any) -> Any:
    return read_back(node, cond, "the loop condition") if isinstance(cond, Tensor) else cond


# ---- Scan ----------------------------------------------------------------------------------------


def _axes(node: Node, key: str, n: int) -> list[int]:
    value = node.attr(key)
    return [int(v) for v in value] if value else [0] * n


def scan_once(
    node: Node, states: list[Any], inputs: list[Tensor], axes: list[int]
) -> tuple[Any, ...]:
    """Scan (opset 9 on) over ``inputs`` sliced along their ``axes``; returns the final states
    and the stacked scan outputs."""
    # opset 8 names the input directions "directions"
    dirs = _axes(node, "scan_input_directions" if node.opset >= 9 else "directions", len(inputs))
    length = inputs[0].shape[axes[0]] if inputs else 0
    collected: list[list[Tensor]] = []
    for t in range(length):
        pieces = []
        for x, axis, reverse in zip(inputs, axes, dirs, strict=True):
            index = length - 1 - t if reverse else t
            pieces.append(x[(slice(None),) * axis + (index,)])
        outs = _run(node, "body", [*states, *pieces])
        states = list(outs[: len(states)])
        collected.append(list(outs[len(states) :]))
    n_out = len(node.outputs) - len(states)
    out_axes = _axes(node, "scan_output_axes", n_out)
    out_dirs = _axes(node, "scan_output_directions", n_out)
    results = []
    for k in range(n_out):
        slices = [c[k] for c in collected]
        if out_dirs[k]:
            slices = slices[::-1]
        stacked = _stack(slices)
        axis = out_axes[k] % stacked.ndim
        results.append(stacked.permute(*_move_first_to(axis, stacked.ndim)) if axis else stacked)
    return tuple(states + results)


def _move_first_to(axis: int, ndim: int) -> list[int]:
    order = list(range(1, ndim))
    order.insert(axis, 0)
    return order


@onnx_op("Scan", since=9)
def scan(node: Node, *values: Any) -> Any:
    """States then scan inputs; the body maps (states, one slice of each input) to (new
    states, one slice of each scan output)."""
    m = int(node.attr("num_scan_inputs"))
    states, inputs = list(values[: len(values) - m]), list(values[len(values) - m :])
    axes = [a % x.ndim for a, x in zip(_axes(node, "scan_input_axes", m), inputs, strict=True)]
    return scan_once(node, states, inputs, axes)


@onnx_op("Scan", since=8)
def scan_v8(node: Node, lengths: Any, *values: Any) -> Any:
    """Opset 8: a leading batch axis on every state and input, each batch entry scanned along
    axis 1 (its sequence axis) separately, then stacked again."""
    if lengths is not None:
        raise InvalidValue(
            f"Scan node {node.name!r}: sequence_lens of opset 8 is not supported; pad the "
            "sequences to one length or convert the model to opset 9 or later"
        )
    m = int(node.attr("num_scan_inputs"))
    states, inputs = list(values[: len(values) - m]), list(values[len(values) - m :])
    batch = (states or inputs)[0].shape[0]
    per_batch = []
    for b in range(batch):
        per_batch.append(scan_once(node, [s[b] for s in states], [x[b] for x in inputs], [0] * m))
    return tuple(_stack([r[k] for r in per_batch]) for k in range(len(per_batch[0])))
