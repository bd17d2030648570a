"""Decompositions chosen by the renderer's capabilities: what a target lacks, core rewrites
into what it has, and what cannot be rewritten is refused with a clear error."""

from __future__ import annotations

from fusegrad.errors import UnsupportedOp
from fusegrad.renderer import Renderer
from fusegrad.uop.ops import Ops, UOp, toposort
from fusegrad.uop.pattern import PatternMatcher, UPat, graph_rewrite

# one rule per op a target may lack, each the identity it relies on
DECOMPOSITIONS: dict[Ops, tuple[UPat, object]] = {
    Ops.MAX: (UPat(Ops.MAX, src=(UPat.var("a"), UPat.var("b"))),
              lambda a, b: a.lt(b).where(b, a)),                               # max(a,b) = a<b ? b : a
    Ops.MULACC: (UPat(Ops.MULACC, src=(UPat.var("a"), UPat.var("b"), UPat.var("c"))),
                 lambda a, b, c: a * b + c),                                   # mulacc = a*b + c
    Ops.SHL: (UPat(Ops.SHL, src=(UPat.var("a"), UPat.cvar("b"))),
              lambda a, b: a * (1 << b.arg)),                                  # a << b = a * 2**b
}


def check_dtypes(graph: UOp, renderer: Renderer) -> None:
    """Refuse dtypes the target cannot hold, naming the device, the dtype and the way out."""
    for u in toposort([graph]):
        if u.dtype.kind != "v" and u.dtype not in renderer.supported_dtypes:
            raise UnsupportedOp(
                f"device {renderer.device or type(renderer).__name__} cannot hold {u.dtype.name} "
                f"(needed by {u.op.name}); cast the tensor to a supported dtype or use another device"
            )


def decompose(graph: UOp, renderer: Renderer) -> UOp:
    """Rewrite the ops ``renderer`` lacks, then check what remains is renderable."""
    rules = [rule for op, rule in DECOMPOSITIONS.items() if op not in renderer.native_ops]
    if rules:
        graph = graph_rewrite(graph, PatternMatcher(rules))
    check_dtypes(graph, renderer)
    return graph
