"""``DEBUG=4`` listings: a UOp graph or linear program as one numbered line per node.

A line reads ``position op dtype [shape] [sources by position] arg``: sources come first, so
each line refers only to lines above it. Tensor graphs show each node's shape; kernel graphs
and programs, whose nodes are indices and loops rather than arrays, do not.
"""

from __future__ import annotations

from collections.abc import Callable

from fusegrad.uop.ops import UOp, toposort


def listing(
    nodes: UOp | list[UOp], shapes: bool = False, arg_text: Callable[[UOp], str] | None = None
) -> list[str]:
    """The lines of ``nodes``: a graph given by its root (listed sources first), or nodes
    already in order (a linear program, a toposort). ``arg_text`` may spell some nodes' args."""
    order = nodes if isinstance(nodes, list) else toposort([nodes])
    position = {u: i for i, u in enumerate(order)}
    lines = []
    for i, u in enumerate(order):
        shape = f" {_shape_text(u):<10s}" if shapes else ""
        srcs = [position.get(s, "-") for s in u.src]
        arg = (arg_text(u) if arg_text else None) or repr(u.arg)
        lines.append(f"{i:4d} {u.op.name:<12s} {u.dtype.name:<8s}{shape} {srcs} {arg}")
    return lines


def _shape_text(u: UOp) -> str:
    """``(4, 4)``, or ``-`` for a node without a shape."""
    try:
        return str(tuple(u.shape))
    except Exception:  # a node of no array (a SINK) has no shape to show
        return "-"


def print_listing(
    title: str,
    nodes: UOp | list[UOp],
    shapes: bool = False,
    arg_text: Callable[[UOp], str] | None = None,
) -> None:
    """Print ``--- title ---`` and the listing of ``nodes``."""
    print(f"--- {title} ---")
    print("\n".join(listing(nodes, shapes, arg_text)))
