"""Decompositions chosen by the renderer's capabilities: what a target lacks, core rewrites
into what it has, and what cannot be rewritten is refused with a clear error."""

from __future__ import annotations

from fusegrad.dtype import dtypes
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


def _round_to_bfloat16(f: UOp) -> UOp:
    """Round a float32 to the nearest bfloat16 (ties to even), keeping it in a float32."""
    bits = UOp(Ops.BITCAST, dtypes.uint32, (f,))
    odd = UOp(Ops.SHR, dtypes.uint32, (bits, UOp.const(dtypes.uint32, 16))) & 1
    rounded = (bits + 0x7FFF + odd) & 0xFFFF0000
    return UOp(Ops.BITCAST, dtypes.float32, (rounded,))


def _emulate_node(u: UOp, src: tuple[UOp, ...]) -> UOp:
    """One node of ``emulate_bfloat16``; ``src`` are already rewritten."""
    f32, bf16, u16 = dtypes.float32, dtypes.bfloat16, dtypes.uint16
    if u.op is Ops.PARAM and u.dtype == bf16:
        return u.replace(dtype=u16)
    if u.op is Ops.INDEX and u.dtype == bf16:
        return u.replace(dtype=u16, src=src)
    if u.op is Ops.LOAD and u.dtype == bf16:  # the 16 bits are the top half of a float32
        alt = (UOp.const(u16, 0),) if len(src) == 3 else ()
        raw = UOp(Ops.LOAD, u16, (*src[:2], *alt) if len(src) == 3 else src)
        wide = UOp(Ops.SHL, dtypes.uint32, (raw.cast(dtypes.uint32), UOp.const(dtypes.uint32, 16)))
        return UOp(Ops.BITCAST, f32, (wide,))
    if u.op is Ops.STORE and u.src[0].dtype == bf16:
        bits = UOp(Ops.BITCAST, dtypes.uint32, (src[1],))
        top = UOp(Ops.SHR, dtypes.uint32, (bits, UOp.const(dtypes.uint32, 16)))
        return u.replace(src=(src[0], top.cast(u16)))
    if u.op is Ops.BITCAST and u.dtype == bf16:  # 16 bits in -> the float32 they are the top of
        wide = UOp(Ops.SHL, dtypes.uint32, (src[0].cast(dtypes.uint32), UOp.const(dtypes.uint32, 16)))
        return UOp(Ops.BITCAST, f32, (wide,))
    if u.op is Ops.BITCAST and u.src[0].dtype == bf16:  # the top 16 bits of the float32
        bits = UOp(Ops.BITCAST, dtypes.uint32, (src[0],))
        top = UOp(Ops.SHR, dtypes.uint32, (bits, UOp.const(dtypes.uint32, 16))).cast(u16)
        return top if u.dtype == u16 else UOp(Ops.BITCAST, u.dtype, (top,))
    if u.op is Ops.CONST and u.dtype == bf16:
        return _round_to_bfloat16(UOp.const(f32, u.arg))
    if u.dtype == bf16:  # arithmetic and casts: compute in float32, round as bfloat16 would
        inner = u.replace(dtype=f32, src=src)
        return inner if u.op is Ops.REDUCE else _round_to_bfloat16(inner)
    return u if src == u.src else u.replace(src=src)


def emulate_bfloat16(graph: UOp) -> UOp:
    """bfloat16 as 16-bit storage with float32 arithmetic, for targets without native bfloat16."""
    done: dict[UOp, UOp] = {}
    for u in toposort([graph]):
        done[u] = _emulate_node(u, tuple(done[s] for s in u.src))
    return done[graph]


def decompose(graph: UOp, renderer: Renderer) -> UOp:
    """Rewrite the ops ``renderer`` lacks, then check what remains is renderable."""
    if not renderer.native_bfloat16:
        graph = emulate_bfloat16(graph)
    rules = [rule for op, rule in DECOMPOSITIONS.items() if op not in renderer.native_ops]
    if rules:
        graph = graph_rewrite(graph, PatternMatcher(rules))
    check_dtypes(graph, renderer)
    return graph
