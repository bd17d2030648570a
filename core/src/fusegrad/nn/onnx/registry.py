"""The table of ONNX operators fusegrad implements, and what an implementation receives.

An operator is a plain function registered with ``@onnx_op``. It receives a ``Node`` (the
node's attributes, the model's opset for the node's domain, and a way to run subgraphs) and
the node's input values in order: a Tensor, ``None`` for an absent optional input, or a list
of Tensors for a sequence. It returns one value or a list of values, one per node output.

Ops change between opsets (an attribute becomes an input, a default changes): the same op
may be registered several times with ``since=``; the runner picks the newest registration
whose ``since`` is at most the model's opset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: (domain, op_type) -> [(since_version, function)], sorted by version.
OPS: dict[tuple[str, str], list[tuple[int, Callable[..., Any]]]] = {}

#: The two domains onnx defines; "" and "ai.onnx" are the same one.
DEFAULT_DOMAIN = ""
ML_DOMAIN = "ai.onnx.ml"


def onnx_op(
    *op_types: str, since: int = 1, domain: str = DEFAULT_DOMAIN
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the implementation of ``op_types`` from opset
    ``since`` on, in ``domain``."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for op_type in op_types:
            versions = OPS.setdefault((domain, op_type), [])
            versions.append((since, fn))
            versions.sort(key=lambda entry: entry[0])
        return fn

    return register


def lookup(domain: str, op_type: str, opset: int) -> Callable[..., Any] | None:
    """The implementation of ``op_type`` for a model at ``opset``, or None when there is none."""
    domain = DEFAULT_DOMAIN if domain == "ai.onnx" else domain
    chosen = None
    for since, fn in OPS.get((domain, op_type), []):
        if since <= opset:
            chosen = fn
    return chosen


@dataclass
class Node:
    """One ONNX node as an op implementation sees it."""

    name: str
    op_type: str
    domain: str
    opset: int  #: the model's opset version for this node's domain
    attrs: dict[str, Any] = field(default_factory=dict)
    #: output names (an op may need their count, e.g. Split without a `split` input)
    outputs: list[str] = field(default_factory=list)
    #: runs a subgraph attribute (If/Loop/Scan bodies): (graph attribute name, inputs) -> outputs
    run_subgraph: Callable[[str, list[Any]], list[Any]] | None = None
    #: the host value of input i when it is known without running a kernel (an initializer or a
    #: Constant's output), else None; shape-like inputs (Reshape's shape, Slice's starts) use it
    known: Callable[[int], np.ndarray | None] | None = None
    #: ONNX element types of the inputs and outputs as the model declares or onnx infers them
    #: (0 where unknown): a narrow type (float8, int4...) travels as uint8 codes, so this is the
    #: only place that says which one
    input_types: list[int] = field(default_factory=list)
    output_types: list[int] = field(default_factory=list)

    def attr(self, key: str, default: Any = None) -> Any:
        """Attribute ``key`` (ints, floats, strings, lists, numpy arrays for tensors)."""
        return self.attrs.get(key, default)

    def input_type(self, i: int) -> int:
        return self.input_types[i] if i < len(self.input_types) else 0

    def output_type(self, i: int) -> int:
        return self.output_types[i] if i < len(self.output_types) else 0

    def known_value(self, i: int) -> np.ndarray | None:
        """Input ``i``'s host value when the runner knows it without running a kernel (``known``),
        else None."""
        return self.known(i) if self.known is not None else None

    def host(self, i: int, value: Any) -> np.ndarray | None:
        """The host value of input ``i`` (``value`` is what the op received): the folded
        constant when the runner knows it, else the Tensor read back (a device sync; fine for
        shape-like inputs, which are small). None for an absent input."""
        if value is None:
            return None
        if (known := self.known_value(i)) is not None:
            return known
        return value if isinstance(value, np.ndarray) else value.numpy()

    def scalar(self, i: int, value: Any) -> Any:
        """The first element of input ``i``'s host value (a numpy scalar): a count, an axis,
        a position given as a one-element tensor."""
        return np.asarray(self.host(i, value)).reshape(-1)[0]

    def ints(self, i: int, value: Any, attr: str | None = None) -> list[int] | None:
        """Input ``i`` as a list of ints, or attribute ``attr`` where an older opset had it."""
        if value is None:
            return None if attr is None or self.attr(attr) is None else list(self.attr(attr))
        return [int(v) for v in np.asarray(self.host(i, value)).reshape(-1)]
