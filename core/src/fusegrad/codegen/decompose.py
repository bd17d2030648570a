"""Decompositions chosen by the renderer's capabilities: what a target lacks, core rewrites
into what it has, and what cannot be rewritten is refused with a clear error."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from fusegrad.codegen.transcendental import FLOAT32_MATH
from fusegrad.dtype import DType, dtypes
from fusegrad.errors import UnsupportedOp
from fusegrad.renderer import Renderer
from fusegrad.uop.ops import Ops, UOp, toposort
from fusegrad.uop.pattern import PatternMatcher, UPat, graph_rewrite, rebuild

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


def _u32(value: int) -> UOp:
    return UOp.const(dtypes.uint32, value)


def _shr(x: UOp, n: int) -> UOp:
    return UOp(Ops.SHR, dtypes.uint32, (x, _u32(n)))


def _shl(x: UOp, n: int) -> UOp:
    return UOp(Ops.SHL, dtypes.uint32, (x, _u32(n)))


def _bits(f: UOp) -> UOp:
    return UOp(Ops.BITCAST, dtypes.uint32, (f,))


def _float(bits: UOp) -> UOp:
    return UOp(Ops.BITCAST, dtypes.float32, (bits,))


def _round_to_bfloat16(f: UOp) -> UOp:
    """Round a float32 to the nearest bfloat16 (ties to even), keeping it in a float32."""
    bits = _bits(f)
    return _float((bits + 0x7FFF + (_shr(bits, 16) & 1)) & 0xFFFF0000)


def _bfloat16_value(raw: UOp) -> UOp:
    """16 stored bits (uint16) of a bfloat16 -> its float32: the top half of the float32."""
    return _float(_shl(raw.cast(dtypes.uint32), 16))


def _bfloat16_bits(f: UOp) -> UOp:
    """A float32 -> the nearest bfloat16's 16 bits (ties to even)."""
    return _shr(_bits(_round_to_bfloat16(f)), 16).cast(dtypes.uint16)


def _float16_value(raw: UOp) -> UOp:
    """16 stored bits (uint16) of an IEEE half -> its float32, exactly, with integer ops and
    selects that vectorise. Normal numbers move their exponent and mantissa into place and
    rebias the exponent (+112); subnormals are their mantissa times 2**-24; infinities and NaNs
    take float32's all-ones exponent (a NaN keeps its payload)."""
    h = raw.cast(dtypes.uint32)
    magnitude = h & 0x7FFF
    moved = _shl(magnitude, 13)
    normal = moved + 0x38000000
    subnormal = _bits(magnitude.cast(dtypes.int32).cast(dtypes.float32) * 2.0**-24)
    special = moved | 0x7F800000
    bits = magnitude.lt(0x400).where(subnormal, magnitude.lt(0x7C00).where(normal, special))
    return _float(bits | _shl(h & 0x8000, 16))


def _float16_bits(f: UOp) -> UOp:
    """A float32 -> the nearest IEEE half's 16 bits (ties to even), as the hardware converts:
    past the largest half (65504, up to where rounding stays below it) infinity, a NaN quiet
    with its top payload bits. Halves' subnormals come from a float32 addition of 0.5, whose
    rounding to 2**-24 steps is the same; normal numbers round their 13 dropped bits by adding
    0xFFF and the lowest kept bit, rebiasing the exponent (-112) in the same add."""
    b = _bits(f)
    sign = _shr(b, 16) & 0x8000
    a = b & 0x7FFFFFFF
    subnormal = _bits(_float(a) + 0.5) + 0xC1000000  # (- 0.5's bits)
    normal = _shr(a + 0xC8000FFF + (_shr(a, 13) & 1), 13)
    nan = (_shr(a, 13) & 0x3FF) | 0x7E00
    half = a.lt(0x38800000).where(
        subnormal,
        a.lt(0x477FF000).where(normal, a.lt(0x7F800001).where(_u32(0x7C00), nan)),
    )
    return (half | sign).cast(dtypes.uint16)


def _round_to_float16(f: UOp) -> UOp:
    """Round a float32 to the nearest half (ties to even), keeping it in a float32: the 13 low
    mantissa bits rounded away for the half's normal range; below it, multiples of 2**-24 (a
    float32 addition of 0.5 and its subtraction round so); past it, infinity."""
    b = _bits(f)
    a = b & 0x7FFFFFFF
    normal = (a + 0xFFF + (_shr(a, 13) & 1)) & 0xFFFFE000
    subnormal = _bits((_float(a) + 0.5) - 0.5)
    past = a.lt(0x7F800001).where(_u32(0x7F800000), a | 0x400000)  # infinity, or a quiet NaN
    rounded = a.lt(0x38800000).where(subnormal, a.lt(0x477FF000).where(normal, past))
    return _float(rounded | (b & 0x80000000))


def _float16_const(value: float) -> UOp:
    """A constant rounded to the nearest half, held in a float32 (past the range: infinity)."""
    with np.errstate(over="ignore"):
        return UOp.const(dtypes.float32, float(np.float16(value)))


@dataclass(frozen=True)
class Emulated:
    """A 16-bit float a target stores as uint16 and computes in float32: how the stored bits
    become a float32 value and back, how a float32 result is rounded to the type, and a
    constant of it."""

    value: Callable[[UOp], UOp]
    bits: Callable[[UOp], UOp]
    rounded: Callable[[UOp], UOp]
    const: Callable[[float], UOp]
    #: the form used outside the kernel's innermost loop, where the target converts the type
    #: itself: one instruction beats the integer form where there are no vector lanes to fill
    #: (a 4-bit weight's float16 scales, read once per row and group: SmolLM2's decode
    #: 65 -> 48 tok/s with every scale converted by integer ops)
    scalar: Emulated | None = None


def _converted(native: DType, const: Callable[[float], UOp]) -> Emulated:
    """A 16-bit float converted by the target's own casts (held in ``native``)."""
    f32, u16 = dtypes.float32, dtypes.uint16
    return Emulated(
        lambda raw: UOp(Ops.BITCAST, native, (raw,)).cast(f32),
        lambda f: UOp(Ops.BITCAST, u16, (f.cast(native),)),
        lambda f: f.cast(native).cast(f32),
        const,
    )


BFLOAT16 = Emulated(
    _bfloat16_value,
    _bfloat16_bits,
    _round_to_bfloat16,
    lambda v: _round_to_bfloat16(UOp.const(dtypes.float32, v)),
)
FLOAT16 = Emulated(
    _float16_value,
    _float16_bits,
    _round_to_float16,
    _float16_const,
    scalar=_converted(dtypes.float16, _float16_const),
)
#: ops whose result is one of their operands' values: no rounding needed after them
_PICKS = frozenset({Ops.WHERE, Ops.MAX, Ops.NEG})


class FloatEmulation:
    """Rewrites a kernel's 16-bit floats of ``kinds`` into uint16 storage and float32 values.
    It remembers the bits each value came from (a load) or the float32 it rounds (arithmetic),
    so that a store converts once: ``x * 2 + 1`` in float16 stores the add's bits, not the
    bits of its rounded value."""

    def __init__(self, kinds: dict[DType, Emulated], graph: UOp):
        self.kinds, self.graph = kinds, graph
        self.loaded: dict[UOp, UOp] = {}  # value -> the uint16 it was loaded as
        self.unrounded: dict[UOp, UOp] = {}  # rounded value -> the float32 it rounds

    @functools.cached_property
    def vector(self) -> set[UOp]:
        return in_innermost_loop(self.graph)

    def form(self, kind: Emulated | None, u: UOp) -> Emulated | None:
        """How ``kind`` converts at node ``u``: its scalar form outside the innermost loop."""
        if kind is None or kind.scalar is None or u in self.vector:
            return kind
        return kind.scalar

    def bits(self, kind: Emulated, value: UOp) -> UOp:
        if (raw := self.loaded.get(value)) is not None:
            return raw
        return kind.bits(self.unrounded.get(value, value))

    def _unrounded(self, value: UOp, op: Ops) -> UOp:
        """``value`` before its rounding when an ``op`` computed it, else itself."""
        inner = self.unrounded.get(value)
        return inner if inner is not None and inner.op is op else value

    def emulated_float(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
        """``u`` rewritten; ``src`` are already rewritten."""
        f32, u16, kinds = dtypes.float32, dtypes.uint16, self.kinds
        kind = self.form(kinds.get(u.dtype), u)
        if u.op in (Ops.PARAM, Ops.INDEX) and kind:
            return u.replace(dtype=u16, src=src)
        if u.op is Ops.LOAD and kind:
            alt = (UOp.const(u16, 0),) if len(src) == 3 else ()
            raw = UOp(Ops.LOAD, u16, (*src[:2], *alt) if len(src) == 3 else src)
            value = kind.value(raw)
            self.loaded[value] = raw
            return value
        if u.op is Ops.STORE and (stored := self.form(kinds.get(u.src[0].dtype), u)):
            return u.replace(src=(src[0], self.bits(stored, src[1]), *src[2:]))
        if u.op is Ops.BITCAST and (kind or u.src[0].dtype in kinds):
            if before := self.form(kinds.get(u.src[0].dtype), u):  # an emulated float's 16 bits
                bits = self.bits(before, src[0])
            elif src[0].dtype.is_float:  # a native half's
                bits = UOp(Ops.BITCAST, u16, (src[0],))
            else:
                bits = src[0] if src[0].dtype == u16 else UOp(Ops.BITCAST, u16, (src[0],))
            if kind:
                return kind.value(bits)
            return bits if u.dtype == u16 else UOp(Ops.BITCAST, u.dtype, (bits,))
        if u.op is Ops.CONST and kind:
            return kind.const(u.arg)
        if kind:  # arithmetic and casts: compute in float32, round as the type would
            if u.op is Ops.REDUCE:  # a matmul sums exact products (float32 holds them), as torch
                src = (self._unrounded(src[0], Ops.MUL), *src[1:])
            if u.op is Ops.MUL:  # x / y is x * (1 / y): the reciprocal unrounded, as a division
                src = tuple(self._unrounded(s, Ops.RECIP) for s in src)
            inner = u.replace(dtype=f32, src=src)
            if u.op in _PICKS:
                return inner
            value = kind.rounded(inner)  # (a sum adds in float32, rounded at its end)
            self.unrounded[value] = inner
            return value
        return u if src == u.src else u.replace(src=src)


def in_innermost_loop(graph: UOp) -> set[UOp]:
    """The nodes of ``graph`` that run in its innermost loop (the last one lowering opened: the
    vector lanes, an elementwise kernel's last axis), which a C compiler may vectorise: they
    depend on it, and are no reduction that closes it."""
    order = toposort([graph])
    loops = [u for u in order if u.op is Ops.RANGE]
    if not loops:
        return set()
    innermost = max(loops, key=lambda r: r.arg[0])
    inside: set[UOp] = {innermost}
    for u in order:
        if any(s in inside for s in u.src) and not (u.op is Ops.REDUCE and innermost in u.src):
            inside.add(u)
    return inside


def emulate_floats(graph: UOp, kinds: dict[DType, Emulated]) -> UOp:
    """The 16-bit floats of ``kinds`` as 16-bit storage with float32 arithmetic."""
    return rebuild(graph, FloatEmulation(kinds, graph).emulated_float)


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
        return rebuild(graph, self.narrow_type)

    def narrow_type(self, u: UOp, src: tuple[UOp, ...]) -> UOp:
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
    kinds = {dtypes.bfloat16: BFLOAT16} if not renderer.native_bfloat16 else {}
    if not renderer.native_float16:
        kinds[dtypes.float16] = FLOAT16
    if kinds:
        graph = emulate_floats(graph, kinds)
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
