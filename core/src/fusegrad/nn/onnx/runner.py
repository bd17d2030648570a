"""``OnnxRunner``: an ONNX model as one lazy fusegrad graph.

Building a runner parses the model (with the ``onnx`` package), turns every node into a
``Node`` and checks that each op, in every subgraph too, has an implementation at the model's
opset: an unsupported op is an ``OnnxUnsupported`` now, not halfway through a run. A call
walks the nodes in order, calling each op's Tensor code: nothing runs until the caller reads an
output, so ops fuse across node boundaries, and the call works under ``TinyJit``.

Values are Tensors, lists of Tensors (sequences), None (an absent optional) or numpy arrays of
strings (fusegrad has no string dtype). A stored value of a sub-byte type (an initializer, a
Constant, an input) is ``Packed`` (dtypes.py): each op receives its codes, unpacked lazily.
Alongside, the runner keeps the host value of each name it can know without running a kernel:
initializers, Constant outputs, input shapes and the small integer arithmetic on them (Shape ->
Gather -> Concat -> Reshape chains), which it folds on the host (``folding.py``); an op reads
these through ``Node.known`` (never for a narrow type: its host value is codes, not numbers).
"""

from __future__ import annotations

import difflib
import os
from collections import ChainMap
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import inliner

from fusegrad.device import Device
from fusegrad.errors import FileFormatError, InvalidArgument
from fusegrad.nn.onnx import dtypes as onnx_dtypes
from fusegrad.nn.onnx.errors import OnnxUnsupported
from fusegrad.nn.onnx.folding import fold
from fusegrad.nn.onnx.registry import DEFAULT_DOMAIN, OPS, Node, lookup
from fusegrad.nn.onnx.values import (
    Value,
    ValueSpec,
    attribute_value,
    bind_input,
    load_model,
    sparse_value,
    tensor_value,
)
from fusegrad.tensor import Tensor
from fusegrad.uop.ops import Ops


@dataclass
class Step:
    """A node ready to run: the op's function, its Node, its input names and subgraphs."""

    fn: Any
    node: Node
    inputs: list[str]
    subgraphs: dict[str, Graph] = field(default_factory=dict)
    #: whether the node computes only from the model's weights (``static_steps``)
    static: bool = False
    #: whether one of its outputs is read by a node that is not static, or is a graph output
    frontier: set[str] = field(default_factory=set)
    #: device -> a static node's values and host arrays (None when it was not folded on the
    #: host), made at the first call: later calls skip the node
    constants: dict[str, tuple[list[Value], list[np.ndarray] | None]] = field(default_factory=dict)


class Graph:
    """A graph (the model's or a subgraph) with its nodes checked and ready to run."""

    def __init__(
        self,
        proto: onnx.GraphProto,
        opsets: dict[str, int],
        outer: set[str],
        path: str,
        types: dict[str, int],
    ):
        self.name = proto.name or path
        self.types = types
        self.initializers = {t.name: tensor_value(t) for t in proto.initializer}
        for sparse in proto.sparse_initializer:
            self.initializers[sparse.values.name] = sparse_value(sparse)
        self.inputs = [ValueSpec.of(i) for i in proto.input if i.name not in self.initializers]
        self.defaults = [i.name for i in proto.input if i.name in self.initializers]
        self.outputs = [ValueSpec.of(o) for o in proto.output]
        #: device -> the initializers as values there (made once, not on every run of a Loop or
        #: Scan body)
        self._weights: dict[str, dict[str, Value]] = {}
        defined = set(outer) | {i.name for i in proto.input} | set(self.initializers)
        steps = [self._step(n, i, opsets, defined, path) for i, n in enumerate(proto.node)]
        #: every name a node here or in a subgraph reads (a subgraph may read the outer scope)
        self.reads = {name for s in steps for name in s.inputs if name}
        self.reads |= {name for s in steps for g in s.subgraphs.values() for name in g.reads}
        self.steps = live_steps(steps, {o.name for o in self.outputs})
        for out in self.outputs:
            if out.name not in defined:
                raise FileFormatError(
                    f"graph {self.name!r} outputs {out.name!r}, which no node, input or "
                    "initializer defines: the model is truncated or broken; export it again"
                )

    def weights(self, device: str) -> dict[str, Value]:
        """The initializers as values on ``device``: Tensors, or numpy arrays of strings."""
        if device not in self._weights:
            self._weights[device] = {
                name: _weight_tensor(array, device, self.types.get(name, 0))
                for name, array in self.initializers.items()
            }
        return self._weights[device]

    def _step(
        self,
        proto: onnx.NodeProto,
        index: int,
        opsets: dict[str, int],
        defined: set[str],
        path: str,
    ) -> Step:
        node_name = proto.name or f"{proto.op_type}_{index}"
        where = f"{path}/{node_name}" if path else node_name
        domain = DEFAULT_DOMAIN if proto.domain in ("", "ai.onnx") else proto.domain
        if domain not in opsets:
            raise OnnxUnsupported(
                f"node {where!r} ({proto.op_type}) is in domain {proto.domain!r}, which the model "
                f"does not import (it imports {', '.join(repr(d) for d in opsets)}); the model is "
                "broken: export it again"
            )
        opset = opsets[domain]
        fn = lookup(domain, proto.op_type, opset)
        if fn is None:
            raise OnnxUnsupported(unsupported_message(where, domain, proto.op_type, opset))
        for name in proto.input:
            if name and name not in defined:
                raise FileFormatError(
                    f"node {where!r} ({proto.op_type}) reads {name!r}, which no earlier node, "
                    "input or initializer defines: the model is truncated or not sorted; "
                    "export it again"
                )
        attrs = {a.name: attribute_value(a) for a in proto.attribute}
        node = Node(node_name, proto.op_type, domain, opset, attrs, list(proto.output))
        node.input_types = [self.types.get(name, 0) for name in proto.input]
        node.output_types = [self.types.get(name, 0) for name in proto.output]
        step = Step(fn, node, list(proto.input))
        inner = defined | set(proto.output)
        for a in proto.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                step.subgraphs[a.name] = Graph(
                    a.g, opsets, defined, f"{where}/{a.name}", self.types
                )
        check = CHECKS.get((domain, proto.op_type))
        problem = check(node) if check is not None else None
        if problem:
            raise OnnxUnsupported(f"node {where!r} ({proto.op_type}, opset {opset}): {problem}")
        defined |= inner
        return step


def live_steps(steps: list[Step], wanted: set[str]) -> list[Step]:
    """The steps an output depends on, in order: a node whose outputs nothing reads (an
    exporter's leftover, a Shape of an unused value) is never run."""
    needed, live = set(wanted), []
    for step in reversed(steps):
        if needed.intersection(step.node.outputs):
            live.append(step)
            needed.update(name for name in step.inputs if name)
            needed.update(name for g in step.subgraphs.values() for name in g.reads)
    return live[::-1]


#: ops whose results differ from call to call although their inputs do not
RANDOM_OPS = {
    "RandomNormal",
    "RandomNormalLike",
    "RandomUniform",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
    "Dropout",
}


def static_steps(steps: list[Step], weights: set[str], outputs: list[ValueSpec]) -> None:
    """Mark the steps that compute only from ``weights`` (initializers no input overrides) and
    Constants: such a step gives the same values at every call, so the first call keeps them
    and later calls skip it. Of its outputs, those that a step of the call itself reads (its
    ``frontier``) are realized once when that is worth it (``_kept``): exporters leave weight
    arithmetic in the graph (the OpenVINO export of silero-vad reorders its LSTM's gates with
    Slice and Concat: a select among three loads for each weight, at every call)."""
    static = set(weights)
    for step in steps:
        for g in step.subgraphs.values():  # (a branch or body reads the weights around it too)
            static_steps(g.steps, static | set(g.initializers), g.outputs)
        if step.subgraphs or step.node.op_type in RANDOM_OPS:
            continue
        if all(name in static for name in step.inputs if name):
            step.static = True
            static.update(name for name in step.node.outputs if name)
    read = {o.name for o in outputs}
    for step in steps:
        if not step.static:
            read.update(name for name in step.inputs if name)
            read.update(name for g in step.subgraphs.values() for name in g.reads)
    for step in steps:
        if step.static:
            step.frontier = read.intersection(step.node.outputs)


def _kept(value: Value, args: list[Value]) -> Value:
    """A static step's output read by the call: realized when it computes something from its
    sources (not a view of a weight, which costs nothing to read in place) and takes no more
    memory than its sources (an expansion, or a dequantized weight, is computed where used)."""
    if not isinstance(value, Tensor):
        return value
    u = value.uop
    while u.op in (Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP, Ops.PAD):
        u = u.src[0]
    if u.op in (Ops.BUFFER, Ops.CONST):
        return value
    sources = sum(a.numel() * a.element_size() for a in args if isinstance(a, Tensor))
    return value.realize() if value.numel() * value.element_size() <= sources else value


def value_types(model: onnx.ModelProto) -> dict[str, int]:
    """name -> ONNX element type of every value the model declares or onnx can infer, in the
    graph and its subgraphs (a sequence or optional gives its element's type)."""
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 (inference is a help only: declared types remain)
        pass
    types: dict[str, int] = {}

    def walk(graph: onnx.GraphProto) -> None:
        for t in graph.initializer:
            types[t.name] = t.data_type
        for info in [*graph.input, *graph.value_info, *graph.output]:
            spec = ValueSpec.of(info)
            if spec.elem_type:
                types[info.name] = spec.elem_type
        for node in graph.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for g in a.graphs:
                    walk(g)

    walk(model.graph)
    return types


#: (domain, op_type) -> a build-time check of a Node's attributes: a message naming the
#: unsupported attribute and the alternative, or None. Ops register theirs with ``onnx_check``.
CHECKS: dict[tuple[str, str], Any] = {}


def onnx_check(op_type: str, domain: str = DEFAULT_DOMAIN) -> Any:
    """Register a build-time check for ``op_type``: ``fn(node) -> str | None``."""

    def register(fn: Any) -> Any:
        CHECKS[(domain, op_type)] = fn
        return fn

    return register


def unsupported_message(where: str, domain: str, op_type: str, opset: int) -> str:
    """Why ``op_type`` cannot run, and the nearest thing that can."""
    versions = [since for since, _ in OPS.get((domain, op_type), [])]
    if versions:
        return (
            f"node {where!r}: {op_type} is implemented from opset {min(versions)} on, the model "
            f"uses opset {opset}; convert it with onnx.version_converter.convert_version(model, "
            f"{min(versions)})"
        )
    names = sorted(op for d, op in OPS if d == domain)
    close = difflib.get_close_matches(op_type, names, n=3)
    domain_text = f"domain {domain!r}" if domain else "the ai.onnx domain"
    if not names:
        return (
            f"node {where!r}: {op_type} is in {domain_text}, which fusegrad does not implement "
            f"(it implements {', '.join(sorted({repr(d or 'ai.onnx') for d, _ in OPS}))}); "
            "replace the node with standard ONNX ops"
        )
    hint = f"the closest supported ops are {', '.join(close)}" if close else "no similar op exists"
    return (
        f"node {where!r}: {op_type} (opset {opset}, {domain_text}) is not supported; {hint}; "
        "see docs/onnx.md for the list, or rewrite the node with supported ops"
    )


class OnnxRunner:
    """Run an ONNX model: ``OnnxRunner(path_or_bytes_or_proto)({"x": array})`` -> outputs.

    >>> import onnx.helper as h
    >>> g = h.make_graph([h.make_node("Relu", ["x"], ["y"])], "g",
    ...     [h.make_tensor_value_info("x", 1, [2])], [h.make_tensor_value_info("y", 1, [2])])
    >>> OnnxRunner(h.make_model(g))({"x": np.array([-1.0, 2.0], np.float32)})["y"].tolist()
    [0.0, 2.0]
    """

    def __init__(
        self,
        model: str | os.PathLike | bytes | onnx.ModelProto,
        device: str | None = None,
        packed_outputs: bool = False,
        lazy: bool = False,
    ):
        self.model = load_model(model)
        #: an output of a sub-byte type (int4, uint4, float4e2m1, int2, uint2) is ``Packed``
        #: (its bytes packed on the device) rather than a uint8 Tensor of codes
        self.packed_outputs = packed_outputs
        #: return the outputs unrealized, so that what is done with them next fuses into the
        #: model's last kernels (realize them together: see ``__call__``)
        self.lazy = lazy
        if self.model.functions:
            self.model = inliner.inline_local_functions(self.model)
        self.opsets = {
            (DEFAULT_DOMAIN if o.domain == "ai.onnx" else o.domain): o.version
            for o in self.model.opset_import
        }
        self.device = Device.canonicalize(device) if device else Device.DEFAULT
        self.graph = Graph(self.model.graph, self.opsets, set(), "", value_types(self.model))
        graph = self.graph  # (static_steps goes into the subgraphs from here)
        static_steps(graph.steps, set(graph.initializers) - set(graph.defaults), graph.outputs)
        self._weights: dict[str, Tensor] = {}

    @property
    def inputs(self) -> list[ValueSpec]:
        """The inputs the model declares (initializers excluded)."""
        return self.graph.inputs

    @property
    def outputs(self) -> list[ValueSpec]:
        return self.graph.outputs

    def __call__(self, inputs: Mapping[str, Any] | None = None, **more: Any) -> dict[str, Value]:
        """Compute the outputs for ``inputs`` (name -> numpy array, Tensor, list or None);
        return name -> Tensor (list for a sequence, None for an empty optional).

        The whole graph is one lazy fusegrad graph, its outputs realized together in one plan
        (unless the runner is ``lazy``): realized one by one (``out["a"].numpy()``, then
        ``out["b"].numpy()``), the second would compute again all it shares with the first
        (silero-vad's output and state: the whole model twice)."""
        given = {**(inputs or {}), **more}
        previous = Device.DEFAULT
        Device.DEFAULT = self.device  # the tensors ops create (constants, ranges) go there too
        try:
            env, known = self._bind_inputs(given)
            outs = run_graph(self.graph, env, known)
        finally:
            Device.DEFAULT = previous
        if self.packed_outputs:
            outs = [_packed_output(o, v) for o, v in zip(self.graph.outputs, outs)]
        if not self.lazy and (computed := list(_tensors_in(outs))):
            computed[0].realize(*computed[1:])
        return dict(zip([o.name for o in self.graph.outputs], outs))

    def _bind_inputs(self, given: dict[str, Any]) -> tuple[dict[str, Value], dict[str, np.ndarray]]:
        names = {i.name for i in self.graph.inputs} | set(self.graph.defaults)
        unknown = sorted(set(given) - names)
        if unknown:
            raise InvalidArgument(
                f"the model has no input named {', '.join(map(repr, unknown))}; its inputs are "
                f"{', '.join(repr(i.name) for i in self.graph.inputs) or 'none'}"
            )
        env: dict[str, Value] = {}
        known: dict[str, np.ndarray] = {}
        for name, array in self.graph.initializers.items():
            if name not in given:
                env[name] = self._weight(name, array)
                known[name] = array
        for spec in self.graph.inputs:
            env[spec.name] = bind_input(spec, given, self.device)
        for name in self.graph.defaults:
            if name in given:
                env[name] = bind_input(ValueSpec(name, "tensor"), given, self.device)
        return env, known

    def _weight(self, name: str, array: np.ndarray) -> Value:
        if array.dtype == object:
            return array
        if name not in self._weights:
            self._weights[name] = _weight_tensor(array, self.device, self.graph.types.get(name, 0))
        return self._weights[name]


def run_graph(
    graph: Graph, env: Mapping[str, Value], known: Mapping[str, np.ndarray]
) -> list[Value]:
    """Run ``graph``'s nodes over ``env`` (its inputs and the outer scope's names); return the
    values of its outputs."""
    scope: ChainMap[str, Value] = ChainMap({}, env)  # type: ignore[arg-type]
    consts: ChainMap[str, np.ndarray] = ChainMap({}, known)  # type: ignore[arg-type]
    for step in graph.steps:
        if step.static and (kept := step.constants.get(Device.DEFAULT)) is not None:
            outs, host = kept
        else:
            outs, host = _run_step(step, scope, consts)
        if host is not None:
            consts.update(zip(step.node.outputs, host))
        for name, value in zip(step.node.outputs, outs):
            if name:
                scope[name] = value
    return [onnx_dtypes.unpacked(scope[o.name]) for o in graph.outputs]


def _run_step(
    step: Step, scope: Mapping[str, Value], consts: Mapping[str, np.ndarray]
) -> tuple[list[Value], list[np.ndarray] | None]:
    """A step's values, and its host arrays when it was folded on the host; a static step's
    are kept for later calls (its frontier outputs realized, see ``_kept``)."""
    args = [onnx_dtypes.unpacked(scope[name]) if name else None for name in step.inputs]
    step.node.known = _known_reader(step.inputs, consts, step.node.input_types)
    step.node.run_subgraph = _subgraph_runner(step, scope, consts)
    host = fold(step.node, args, step.node.known)
    if host is not None:
        outs = _host_values(step, host, _device(args))
    else:
        outs = split_outputs(step.node, step.fn(step.node, *args))
    if step.static:
        outs = [
            _kept(v, args) if n in step.frontier else v for n, v in zip(step.node.outputs, outs)
        ]
        step.constants[Device.DEFAULT] = (outs, host)
    return outs, host


def _host_values(step: Step, arrays: list[np.ndarray], device: str) -> list[Value]:
    """Folded host arrays as the values ops see: Tensors, or numpy arrays of strings."""
    types = step.node.output_types + [0] * len(arrays)
    return [
        a if a.dtype == object else onnx_dtypes.device_value(a, device, t)
        for a, t in zip(arrays, types)
    ]


def _device(args: list[Value]) -> str:
    for a in args:
        if isinstance(a, Tensor):
            return a.device
    return Device.DEFAULT


def split_outputs(node: Node, result: Any) -> list[Value]:
    """An op's result as one value per output: with one output the result is that output (a
    list is a sequence); with several, a tuple or list of them (trailing ones may be missing)."""
    if len(node.outputs) == 1:
        return [result[0] if isinstance(result, tuple) else result]
    return list(result)


def _known_reader(names: list[str], consts: Mapping[str, np.ndarray], types: list[int]) -> Any:
    # a narrow type's host value is its codes, not its numbers: host folding must not see it
    hidden = {i for i, t in enumerate(types) if t in onnx_dtypes.NARROW}

    def known(i: int) -> np.ndarray | None:
        return consts.get(names[i]) if i < len(names) and names[i] and i not in hidden else None

    return known


def _subgraph_runner(
    step: Step, scope: Mapping[str, Value], consts: Mapping[str, np.ndarray]
) -> Any:
    def run_subgraph(attr: str, inputs: list[Value]) -> list[Value]:
        graph = step.subgraphs[attr]
        bound = dict(zip([i.name for i in graph.inputs], inputs))
        inner_known = ChainMap(graph.initializers, consts)  # type: ignore[arg-type]
        inner = ChainMap(bound, graph.weights(Device.DEFAULT), scope)  # type: ignore[arg-type]
        return run_graph(graph, inner, inner_known)

    return run_subgraph


def _tensors_in(values: list[Value]) -> Iterator[Tensor]:
    """The Tensors holding ``values`` (a Packed value's bytes; a sequence's items)."""
    for value in values:
        if isinstance(value, Tensor):
            yield value
        elif isinstance(value, onnx_dtypes.Packed):
            yield value.data
        elif isinstance(value, list):
            yield from _tensors_in(value)


def _packed_output(spec: ValueSpec, value: Value) -> Value:
    """A sub-byte tensor output's codes packed (lazily, in the kernel computing it)."""
    if spec.kind != "tensor" or spec.elem_type not in onnx_dtypes.SUB_BYTE:
        return value
    if not isinstance(value, Tensor) or not all(isinstance(d, int) for d in value.shape):
        return value
    return onnx_dtypes.Packed.pack(value, spec.elem_type)


def _weight_tensor(array: np.ndarray, device: str | None = None, elem_type: int = 0) -> Value:
    """An initializer on ``device``: a Tensor, ``Packed`` for a sub-byte type (its bytes
    packed, never one a code), or a numpy array of strings."""
    return array if array.dtype == object else onnx_dtypes.device_value(array, device, elem_type)
