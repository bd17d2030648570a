"""Decompositions chosen by the renderer's capabilities: what a target lacks, core rewrites
into what it has, and what cannot be rewritten is refused with a clear error."""

from __future__ import annotations

from collections.abc import Callable

from fusegrad.codegen.transcendental import FLOAT32_MATH
from fusegrad.dtype import DType, dtypes
from fusegrad.errors import UnsupportedOp
from fusegrad.renderer import Renderer
from fusegrad.uop.ops import Ops, UOp, toposort
from fusegrad.uop.pattern import PatternMatcher, UPat, graph_rewrite

# one rule per op a target may lack, each the identity it relies on
DECOMPOSITIONS: dict[Ops, tuple[UPat, Callable[..., UOp | None]]] = {
    Ops.MAX: (
        UPat(Ops.MAX, src=(UPat.var("a"), UPat.var("b"))),  # max(a,b) = a<b ? b : a,
        lambda a, b: (a.lt(b) | b.ne(b) if a.dtype.is_float else a.lt(b)).where(b, a),
    ),  # NaN b too
    Ops.MULACC: (
        UPat(Ops.MULACC, src=(UPat.var("a"), UPat.var("b"), UPat.var("c"))),
        lambda a, b, c: a * b + c,
    ),  # mulacc = a*b + c
    Ops.SHL: (
        UPat(Ops.SHL, src=(UPat.var("a"), UPat.cvar("b"))),
        lambda a, b: a * (1 << b.arg),
    ),  # a << b = a * 2**b
}


#: the dtypes whose EXP2 and LOG2 core computes with arithmetic for a renderer that asks
ARITHMETIC_MATH_DTYPES = (dtypes.float16, dtypes.bfloat16, dtypes.float32)


def _replaced_math_ops(renderer: Renderer) -> frozenset[Ops] | set[Ops]:
    """The renderer's slow math ops that core has an arithmetic version of."""
    return renderer.scalar_math_ops & FLOAT32_MATH.keys()


def replaces_math(renderer: Renderer, op: Ops, dtype: DType) -> bool:
    """Whether core computes ``op`` on ``dtype`` with arithmetic for ``renderer``, so that the
    op, though native, never reaches its programs (see ``Renderer.scalar_math_ops``)."""
    return op in _replaced_math_ops(renderer) and dtype in ARITHMETIC_MATH_DTYPES


def math_in_float32(u: UOp, x: UOp, fma: bool = False) -> UOp:
    """EXP2 or LOG2 of a float up to 32 bits as float32 arithmetic (``codegen/transcendental.py``),
    its polynomial in fused multiply-adds with ``fma``.

    A float16 or bfloat16 is computed in float32 and rounded back, as C-family renderers already
    do for their math functions. float64 is never matched: it keeps the target's own function.
    """
    return FLOAT32_MATH[u.op](x.cast(dtypes.float32), fma).cast(u.dtype)


def check_dtypes(graph: UOp, renderer: Renderer) -> None:
    """Refuse dtypes the target cannot hold, naming the device, the dtype and the way out."""
    for u in toposort([graph]):
        if u.dtype.kind != "v" and u.dtype not in renderer.supported_dtypes:
            raise UnsupportedOp(
                f"device {renderer.device or type(renderer).__name__} cannot hold {u.dtype.name} "
                f"(needed by {u.op.name}); {renderer.dtype_advice(u.dtype)}"
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
        bits = (
            UOp(Ops.BITCAST, u16, (src[0],)) if src[0].dtype.is_float else src[0]
        )  # float16's bits
        wide = UOp(Ops.SHL, dtypes.uint32, (bits.cast(dtypes.uint32), UOp.const(dtypes.uint32, 16)))
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


# ---- narrow types: 8/16-bit integers and bools on targets of 32-bit words -----------------------

NARROW_INTS = (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16)
#: narrow integer ops whose 32-bit result can leave the narrow type's range, so must be wrapped
_CAN_OVERFLOW = frozenset({Ops.ADD, Ops.MUL, Ops.NEG, Ops.IDIV, Ops.SHL, Ops.MULACC})


def _wide(dtype: DType) -> DType:
    return dtypes.int32 if dtype.kind == "i" else dtypes.uint32


def _const(dtype: DType, value: int) -> UOp:
    return UOp.const(dtype, value)


def wrap_narrow(x: UOp, dtype: DType) -> UOp:
    """A 32-bit integer reduced to the values of narrow ``dtype``, as a C cast would do.

    Unsigned: keep the low bits. Signed: keep the low bits, then extend the sign bit:
    ``(low ^ s) - s`` with ``s = 2**(bits-1)`` maps ``[0, 2**bits)`` onto ``[-s, s)``.
    """
    mask = (1 << 8 * dtype.itemsize) - 1
    low = x & _const(x.dtype, mask)
    if dtype.kind == "u":
        return low
    sign = 1 << (8 * dtype.itemsize - 1)
    return low.alu(Ops.XOR, _const(dtypes.int32, sign)) + _const(dtypes.int32, -sign)


class NarrowTypes:
    """Rewrites one kernel graph for a target without narrow storage, narrow arithmetic, or both.

    Storage (``min_storage_bits``): a buffer of 8/16-bit elements (or bools) becomes a buffer of
    32-bit words, element ``i`` being lane ``i % per`` of word ``i // per`` (little-endian, so the
    bytes are those of the plain array). A load reads the word, shifts and masks its lane, and
    sign-extends a signed type. A store clears its lane with ``ATOMIC_AND`` and then sets it with
    ``ATOMIC_OR``: neighbouring elements of one word are written by other threads at the same time.

    Arithmetic (narrow ints missing from ``supported_dtypes``): done on int32/uint32 values, and
    wrapped back into the narrow range after each op that can leave it (``wrap_narrow``). A
    BITCAST between a 16-bit float and such a value changes size: the float's 16 bits are the
    low bits of the 32-bit integer (renderers of such targets render it so).
    """

    def __init__(self, renderer: Renderer):
        self.storage_bits = renderer.min_storage_bits
        self.widened = {d for d in NARROW_INTS if d not in renderer.supported_dtypes}

    def packed(self, dtype: DType) -> bool:
        return (dtype.is_int or dtype == dtypes.bool) and 8 * dtype.itemsize < self.storage_bits

    def value_type(self, dtype: DType) -> DType:
        return _wide(dtype) if dtype in self.widened else dtype

    def rewrite(self, graph: UOp) -> UOp:
        done: dict[UOp, UOp] = {}
        for u in toposort([graph]):
            done[u] = self.node(u, tuple(done[s] for s in u.src))
        return done[graph]

    def node(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
        """One node; ``src`` are already rewritten. A packed INDEX stays, for its LOAD or STORE."""
        op, dtype = u.op, u.dtype
        if op is Ops.PARAM and self.packed(dtype):
            words = -(-u.arg[1] * dtype.itemsize // 4)
            return u.replace(dtype=dtypes.uint32, arg=(u.arg[0], words))
        if op is Ops.LOAD and self.packed(dtype):
            return self.load(dtype, src)
        if op is Ops.STORE and self.packed(u.src[0].dtype):
            return self.store(src[0], src[1])
        if op is Ops.CAST and src[0].dtype == dtype:
            return src[0]
        if dtype not in self.widened or op is Ops.INDEX:  # an INDEX keeps its buffer's dtype
            if op is Ops.STORE and src[1].dtype != src[0].dtype:
                src = (src[0], src[1].cast(src[0].dtype))
            return u if src == u.src else u.replace(src=src)
        return self.widen(u, src)

    def widen(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
        """A node of a narrow int type, computed on 32 bits."""
        wide = _wide(u.dtype)
        if u.op is Ops.CONST:
            return _const(wide, u.arg)
        if u.op is Ops.LOAD:  # from a buffer of native narrow storage
            return u.replace(src=src).cast(wide)
        if u.op in (Ops.CAST, Ops.BITCAST):
            if u.op is Ops.BITCAST and src[0].dtype.is_float:  # float16 -> int16: a BITCAST
                bits = UOp(Ops.BITCAST, wide, (src[0],))  # to 32 bits, its 16 zero-extended
                return wrap_narrow(bits, u.dtype)
            if src[0].dtype.is_float:  # through int32, as C on x86 does: -1.0 -> 255 for uint8
                return wrap_narrow(src[0].cast(dtypes.int32).cast(wide), u.dtype)
            return wrap_narrow(src[0].cast(wide), u.dtype)
        wide_op = u.replace(dtype=wide, src=src)
        if u.op in _CAN_OVERFLOW or (u.op is Ops.REDUCE and u.arg is Ops.ADD):
            return wrap_narrow(wide_op, u.dtype)
        return wide_op

    def lane(self, dtype: DType, index: UOp) -> tuple[UOp, UOp, int]:
        """The word holding element ``index`` (an INDEX), its lane's shift in bits, and its mask."""
        param, i = index.src
        per = 4 // dtype.itemsize
        word = UOp(Ops.SHR, i.dtype, (i, _const(i.dtype, per.bit_length() - 1)))  # i // per
        position = i & _const(i.dtype, per - 1)
        shift = (position * _const(i.dtype, 8 * dtype.itemsize)).cast(dtypes.uint32)
        return UOp(Ops.INDEX, dtypes.uint32, (param, word)), shift, (1 << 8 * dtype.itemsize) - 1

    def load(self, dtype: DType, src: tuple[UOp, ...]) -> UOp:
        """Read the word, shift the lane down, mask it, extend it to the value type."""
        word, shift, mask = self.lane(dtype, src[0])
        u32 = dtypes.uint32
        gated = (src[1], _const(u32, 0)) if len(src) == 3 else ()
        raw = UOp(Ops.SHR, u32, (UOp(Ops.LOAD, u32, (word, *gated)), shift)) & _const(u32, mask)
        if dtype == dtypes.bool:
            value = raw.ne(_const(u32, 0))
        elif dtype.kind == "u":
            value = raw.cast(self.value_type(dtype))
        else:
            sign = 1 << (8 * dtype.itemsize - 1)
            signed = raw.cast(dtypes.int32).alu(Ops.XOR, _const(dtypes.int32, sign))
            value = (signed + _const(dtypes.int32, -sign)).cast(self.value_type(dtype))
        alt = src[2] if len(src) == 3 else None
        if alt is not None and not (alt.op is Ops.CONST and alt.arg == 0):
            value = src[1].where(value, alt)
        return value

    def store(self, index: UOp, value: UOp) -> UOp:
        """Clear the lane, then set it: two atomics, so other lanes' stores are not lost."""
        word, shift, mask = self.lane(index.dtype, index)
        u32 = dtypes.uint32
        bits = value.cast(u32) & _const(u32, mask)
        keep = UOp(Ops.SHL, u32, (_const(u32, mask), shift)).alu(Ops.XOR, _const(u32, 0xFFFFFFFF))
        clear = UOp(Ops.ATOMIC_AND, dtypes.void, (word, keep))
        return UOp(Ops.ATOMIC_OR, dtypes.void, (word, UOp(Ops.SHL, u32, (bits, shift)), clear))


def needs_narrow_types(renderer: Renderer) -> bool:
    """Whether ``renderer`` lacks narrow storage or narrow integer arithmetic."""
    lacking = [d for d in NARROW_INTS if d not in renderer.supported_dtypes]
    return renderer.min_storage_bits > 8 or bool(lacking)


def decompose(graph: UOp, renderer: Renderer) -> UOp:
    """Rewrite the ops ``renderer`` lacks, then check what remains is renderable."""
    if not renderer.native_bfloat16:
        graph = emulate_bfloat16(graph)
    if needs_narrow_types(renderer):
        graph = NarrowTypes(renderer).rewrite(graph)
    rules = [rule for op, rule in DECOMPOSITIONS.items() if op not in renderer.native_ops]
    if slow := _replaced_math_ops(renderer):
        pattern = UPat(slow, dtype=ARITHMETIC_MATH_DTYPES, src=(UPat.var("x"),), name="u")
        fma = Ops.MULACC in renderer.native_ops
        rules.append((pattern, lambda u, x: math_in_float32(u, x, fma)))
    if rules:
        graph = graph_rewrite(graph, PatternMatcher(rules))
    check_dtypes(graph, renderer)
    return graph
