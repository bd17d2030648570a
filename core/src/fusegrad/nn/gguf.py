"""GGUF files (llama.cpp's format): metadata, and tensors that stay quantized on the device.

A quantized tensor is loaded as its raw blocks, a ``uint8`` Tensor of shape ``(blocks, bytes)``,
exactly as in the file. What ``gguf_load`` returns for it is a lazy float32 expression over those
bytes (bit operations, fp16 scales through ``bitcast``, arithmetic), so the scheduler fuses the
dequantization into whatever reads the weight: ``x @ w.T`` is one kernel that reads the packed
bytes, and no float32 copy of the weights is kept (the layout pass copies a right operand of
65,536 weights or more into temporary float32 panels when 8 rows or more read it: a prompt's
GEMM; ``quantized_linear`` never does). Realizing
such a tensor on its own would make that copy; the model code never does.

``quantized_linear(x, packed, kind, shape)`` is the fast form of ``x @ w.T``: per group of
weights sharing a scale, ``scale * (q . x) + offset * sum(x)``, so scales are decoded once per
group, not once per weight (a matrix-vector product about 10x faster on CPU).

The file is memory-mapped and its header parsed here (see "the file" below); each tensor's bytes
are copied once to the device, and their pages dropped from the resident set right after.
``gguf_host`` gives the bytes without copying them, so that a model can join the rows of
several matrices first (``to_device`` then copies the joined bytes).

Block layouts (llama.cpp's ``ggml-common.h``): every block starts or ends with fp16 scales; 4- and
5-bit weights keep weights ``0..15`` of a 32-block in the low nibbles and ``16..31`` in the high.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusegrad.dtype import DType, dtypes
from fusegrad.errors import FileFormatError, InvalidValue
from fusegrad.tensor import Tensor

__all__ = [
    "GGUF_TYPES",
    "dequantize",
    "gguf_load",
    "gguf_host",
    "gguf_metadata",
    "gguf_read",
    "SplitBlocks",
    "block_scales",
    "quantized_linear",
    "split_blocks",
    "to_device",
]


# The per-block values (scales, mins, high bits) are read from bytes expanded to the weights'
# shape first, so each weight recomputes its scale from the packed bytes: computed once per
# block and then expanded, the scheduler would give them a buffer of their own (kernelize's
# "elementwise work read through an EXPAND") instead of fusing them into the matmul.


def _spread(
    b: Tensor, start: int, stop: int, view: tuple[int, ...], shape: tuple[int, ...]
) -> Tensor:
    """Bytes ``start:stop`` of each block, viewed as ``view`` and expanded to ``shape``."""
    return b[:, start:stop].reshape(view).expand(shape)


def _f16(b: Tensor, at: int, shape: tuple[int, ...]) -> Tensor:
    """The fp16 scale at byte ``at`` of each block, as float32, expanded to ``shape``."""
    view = (shape[0],) + (1,) * (len(shape) - 1)
    lo = _spread(b, at, at + 1, view, shape).cast(dtypes.uint32)
    hi = _spread(b, at + 1, at + 2, view, shape).cast(dtypes.uint32)
    return _half_to_float(lo | (hi << 8))


def _half_to_float(h: Tensor) -> Tensor:
    """IEEE half-precision bits (in uint32) -> their float32 value, exactly, with integer ops
    only, so devices without float16 (WebGPU without shader-f16) decode scales too.

    A normal half ``(s, e, m)`` is the float32 ``(s, e + 112, m << 13)`` (exponent biases 15
    and 127); infinities and NaNs (``e == 31``) keep an all-ones exponent; subnormals and zeros
    (``e == 0``) are ``m * 2**-24``."""
    sign, exponent, mantissa = h >> 15, (h >> 10) & 31, h & 1023
    wide = (exponent == 31).where(255, exponent + 112).cast(dtypes.uint32)
    normal = ((sign << 31) | (wide << 23) | (mantissa << 13)).bitcast(dtypes.float32)
    small = mantissa.cast(dtypes.float32) * 2.0**-24 * (1 - 2 * sign.cast(dtypes.float32))
    return (exponent == 0).where(small, normal)


def _shifts(*shape: int, step: int, device: str, dtype: DType = dtypes.uint8) -> Tensor:
    """``0, step, 2*step, ...`` along the axis of ``shape`` that is not 1 (uint8 unless told)."""
    n = max(shape)
    return (Tensor.arange(n, dtype=dtype, device=device) * step).reshape(shape)


def _high_bits(qh: Tensor) -> Tensor:
    """``(blocks, 4)`` bytes of a 5-bit block's high bits -> ``(blocks, 32)`` 0/1: bit j of the
    little-endian uint32 belongs to weight j."""
    blocks = qh.shape[0]
    shifts = _shifts(1, 1, 8, step=1, device=qh.device)
    bits = qh.reshape(blocks, 4, 1).expand(blocks, 4, 8) >> shifts
    return (bits & 1).reshape(blocks, 32)


def _planes(qs: Tensor, high: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``(blocks, 16)`` bytes -> the low nibbles (weights 0-15) and the high ones (16-31) as
    ``(blocks, 1, 16)`` uint8, with the 5th bits ``high`` ``(blocks, 32)`` (0/1) when given."""
    low, top = qs & 15, qs >> 4
    if high is not None:
        low, top = low | (high[:, :16] << 4), top | (high[:, 16:] << 4)
    return low.reshape(-1, 1, 16), top.reshape(-1, 1, 16)


# Each block type's unpacker returns the parts of ``w = scale * q + offset`` per group of weights
# that share a scale (32, or 16 in Q6_K): ``q``, the small integers as float32, as "planes" whose
# concatenation on the last axis is ``q`` ``(blocks, groups, size)`` (two planes of 16 for
# 4- and 5-bit blocks: each a plain mask or shift of the same bytes, so a dot product needs no
# shuffling), and ``scale`` and ``offset`` (or None) ``(blocks, groups, width)``. ``width`` is 1
# for ``quantized_linear`` (a scale per group), or ``size`` for ``dequantize``, whose scales are
# then computed from bytes already expanded to each weight, so that they fuse (see above). The
# float operations are gguf's (numpy), in its order, so both dequantize to the same bits.

Parts = tuple[tuple[Tensor, ...], Tensor, Tensor | None]


def _floats(planes: tuple[Tensor, ...], minus: int = 0) -> tuple[Tensor, ...]:
    return tuple(
        p.cast(dtypes.float32) - minus if minus else p.cast(dtypes.float32) for p in planes
    )


#: 4-bit types a loop device keeps as nibbles and decoded scales apart (``split_blocks``): where
#: a block's 16 bytes of nibbles start, and what is subtracted from each nibble
NIBBLE_KINDS = {"Q4_0": (2, 8), "Q4_1": (4, 0)}


def _nibble_floats(b: Tensor, name: str) -> tuple[Tensor, ...]:
    """A Q4_0 or Q4_1 block's weights as float32 planes, from its bytes (``NIBBLE_KINDS``)."""
    start, minus = NIBBLE_KINDS[name]
    return _floats(_planes(b[:, start : start + 16]), minus)


def _q4_0(b: Tensor, width: int) -> Parts:
    return _nibble_floats(b, "Q4_0"), _f16(b, 0, (b.shape[0], 1, width)), None


def _q4_1(b: Tensor, width: int) -> Parts:
    shape = (b.shape[0], 1, width)
    return _nibble_floats(b, "Q4_1"), _f16(b, 0, shape), _f16(b, 2, shape)


def _q5_0(b: Tensor, width: int) -> Parts:
    planes = _planes(b[:, 6:22], _high_bits(b[:, 2:6]))
    return _floats(planes, 16), _f16(b, 0, (b.shape[0], 1, width)), None


def _q5_1(b: Tensor, width: int) -> Parts:
    shape = (b.shape[0], 1, width)
    planes = _floats(_planes(b[:, 8:24], _high_bits(b[:, 4:8])))
    return planes, _f16(b, 0, shape), _f16(b, 2, shape)


def _q8_0(b: Tensor, width: int) -> Parts:
    q = b[:, 2:34].bitcast(dtypes.int8).cast(dtypes.float32).reshape(-1, 1, 32)
    return (q,), _f16(b, 0, (b.shape[0], 1, width)), None


def _k_scales(b: Tensor, width: int) -> tuple[Tensor, Tensor]:
    """The 8 six-bit scales and mins packed in bytes 4-15 of a K-block, ``(blocks, 8, width)``.

    Sub-blocks 0-3 keep theirs in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); 4-7
    in the nibbles of bytes 8-11, with their top 2 bits in the top bits of bytes 0-7.
    """
    shape = (b.shape[0], 4, width)
    view = (b.shape[0], 4, 1)
    low, mid, high = (_spread(b, 4 + i, 8 + i, view, shape) for i in (0, 4, 8))
    scales = (low & 63).cat((high & 15) | ((low >> 6) << 4), dim=1)
    mins = (mid & 63).cat((high >> 4) | ((mid >> 6) << 4), dim=1)
    return scales.cast(dtypes.float32), mins.cast(dtypes.float32)


def _k_nibbles(qs: Tensor) -> Tensor:
    """A K-block's 128 bytes -> ``(blocks, 8, 32)``: 4 chunks of 32 bytes, each the low
    nibbles of one sub-block then the high nibbles of the next."""
    blocks = qs.shape[0]
    shifts = _shifts(1, 1, 2, 1, step=4, device=qs.device)
    chunks = qs.reshape(blocks, 4, 1, 32).expand(blocks, 4, 2, 32) >> shifts
    return (chunks & 15).reshape(blocks, 8, 32)


def _k_parts(b: Tensor, q: Tensor, width: int) -> Parts:
    """``d * scale`` and ``-(dmin * min)`` of each sub-block, for the ``(blocks, 8, 32)`` values
    ``q`` of K-blocks."""
    shape = (b.shape[0], 8, width)
    scales, mins = _k_scales(b, width)
    return (q.cast(dtypes.float32),), _f16(b, 0, shape) * scales, -(_f16(b, 2, shape) * mins)


def _q4_k(b: Tensor, width: int) -> Parts:
    return _k_parts(b, _k_nibbles(b[:, 16:144]), width)


def _q5_k(b: Tensor, width: int) -> Parts:
    # bit j of high-bit byte l belongs to weight l of sub-block j
    blocks = b.shape[0]
    shifts = _shifts(1, 8, 1, step=1, device=b.device)
    high = b[:, 16:48].reshape(blocks, 1, 32).expand(blocks, 8, 32) >> shifts
    return _k_parts(b, _k_nibbles(b[:, 48:176]) | ((high & 1) << 4), width)


def _q6_k(b: Tensor, width: int) -> Parts:
    """Two halves of 128 weights; weight ``32k + l`` of a half takes a nibble of low byte
    ``l + 32 (k % 2)`` (high nibble when ``k >= 2``), bits ``2k, 2k+1`` of high byte ``l``;
    its group of 16 (int8 scale) is ``16 (half) + 2k + l // 16``."""
    blocks = b.shape[0]
    ql = b[:, 0:128].reshape(blocks, 2, 1, 2, 32).expand(blocks, 2, 2, 2, 32)
    low = ((ql >> _shifts(1, 1, 2, 1, 1, step=4, device=b.device)) & 15).reshape(blocks, 2, 4, 32)
    qh = b[:, 128:192].reshape(blocks, 2, 1, 32).expand(blocks, 2, 4, 32)
    high = (qh >> _shifts(1, 1, 4, 1, step=2, device=b.device)) & 3
    q = ((low | (high << 4)).cast(dtypes.float32) - 32).reshape(blocks, 16, 16)
    shape = (blocks, 16, width)
    scales = _spread(b, 192, 208, (blocks, 16, 1), shape).bitcast(dtypes.int8)
    return (q,), scales.cast(dtypes.float32) * _f16(b, 208, shape), None


#: GGUF's type number -> (name, weights per block, bytes per block, the block unpacker).
GGUF_TYPES: dict[int, tuple[str, int, int, Callable[[Tensor, int], Parts] | None]] = {
    0: ("F32", 1, 4, None),
    1: ("F16", 1, 2, None),
    30: ("BF16", 1, 2, None),
    2: ("Q4_0", 32, 18, _q4_0),
    3: ("Q4_1", 32, 20, _q4_1),
    6: ("Q5_0", 32, 22, _q5_0),
    7: ("Q5_1", 32, 24, _q5_1),
    8: ("Q8_0", 32, 34, _q8_0),
    12: ("Q4_K", 256, 144, _q4_k),
    13: ("Q5_K", 256, 176, _q5_k),
    14: ("Q6_K", 256, 210, _q6_k),
}


def _kind(kind: int) -> tuple[str, int, int, Callable[[Tensor, int], Parts] | None]:
    if kind not in GGUF_TYPES:
        raise FileFormatError(
            f"GGUF tensor type {kind} is not supported; known: "
            + ", ".join(name for name, *_ in GGUF_TYPES.values())
        )
    return GGUF_TYPES[kind]


def dequantize(
    packed: Tensor, kind: int, shape: tuple[int, ...], block_scales: bool = False
) -> Tensor:
    """The float32 values of ``packed`` (a tensor of GGUF type ``kind``), lazily, in ``shape``.

    ``packed`` holds the file's bytes as uint8 (any shape with the right byte count); for F16
    it is float16 and for BF16 the raw uint16 bits. Nothing is computed until a consumer is.
    With ``block_scales`` each block's scales are decoded once, into a small buffer of their
    own, instead of in each weight's expression: for a float32 copy of the whole weight (a
    prompt's GEMM panels), which is then several times cheaper to make.
    """
    name, _, block_bytes, unpack = _kind(kind)
    if name == "F32":
        return packed.reshape(shape)
    if name == "F16":
        return packed.reshape(shape).cast(dtypes.float32)
    if name == "BF16":  # a bfloat16 is the top half of a float32
        return (packed.reshape(shape).cast(dtypes.uint32) << 16).bitcast(dtypes.float32)
    assert unpack is not None
    blocks = packed.reshape(-1, block_bytes)
    planes, scale, offset = unpack(blocks, 1 if block_scales else 16 if name == "Q6_K" else 32)
    q = planes[0].cat(*planes[1:], dim=-1) if len(planes) > 1 else planes[0]
    w = scale * q if offset is None else scale * q + offset
    return w.reshape(shape)


def quantized_linear(
    x: Tensor,
    packed: Tensor,
    kind: int,
    shape: tuple[int, int],
    scales: tuple[Tensor, Tensor | None] | None = None,
) -> Tensor:
    """``x @ w.T`` for ``x`` ``(T, k)`` and a GGUF weight ``w`` ``(m, k)``, without making ``w``.

    With ``scales`` (``block_scales``: each group's scale and offset decoded once, into
    buffers of their own) a 4- or 5-bit weight is one sum over all of ``k`` of ``x`` times
    ``scale * q + offset``: the dot products of the groups are then not summed apart, once per
    group (a chain of adds across the vector's lanes each time), but in the same lanes to the
    end of the row (SmolLM2's decode step on two cores: 37 -> 31 ms).

    Per group of ``g`` weights sharing a scale: ``scale * (q . x) + offset * sum(x)``. The
    scales are read and converted once per group instead of once per weight, which makes a
    matrix-vector product several times faster; the partial dot products of the groups are
    a kernel of their own (a reduce inside a reduce), still never a float32 copy of ``w``.
    Unquantized weights take the plain matmul.

    How the partial dots are laid out decides how fast their kernel runs (measured on one
    core): Q8_0 and K-quant groups are one run of bytes, read block after block in file order
    (``(T, m * k/g)``; 1.7x faster than by rows for Q8_0); the two nibble planes of 4- and
    5-bit blocks run as ``(T, k/g, m)``, scaled where the blocks were just read, which lets
    the kernel take several groups of a row at once (10-15% faster than ``(T, m, k/g)`` and
    than block order).
    """
    name, per_block, block_bytes, unpack = _kind(kind)
    m, k = shape
    if unpack is None:
        return x @ dequantize(packed, kind, shape).T
    t = x.shape[0]
    planes, scale, offset = unpack(packed.reshape(-1, block_bytes), 1)
    n, size = len(planes), planes[0].shape[2]
    groups = k // (size * n)
    if scales is not None and n > 1:
        return _inline_dots(x, planes, scales, (m, groups))
    if scales is not None:  # (decoded once: no kernel reads them from the blocks)
        scale = scales[0].cast(dtypes.float32)
        offset = scales[1].cast(dtypes.float32) if scales[1] is not None else None
    if n == 1:
        xg = x.reshape(t, 1, groups, size).expand(t, m, groups, size).reshape(t, m * groups, size)
        dots = (xg * planes[0].reshape(1, m * groups, size)).sum(-1) * scale.reshape(1, -1)
        if offset is not None:
            sums = x.reshape(t, 1, groups, size).sum(-1).expand(t, m, groups)
            dots = dots + sums.reshape(t, m * groups) * offset.reshape(1, -1)
        return dots.reshape(t, m, groups).sum(-1)
    xg = x.reshape(t, groups, 1, n, size).expand(t, groups, m, n, size)
    by_group = [p.reshape(1, m, groups, size).permute(0, 2, 1, 3) for p in planes]
    products = [xg[:, :, :, i] * p for i, p in enumerate(by_group)]
    dots = sum(products[1:], products[0]).sum(-1) * scale.reshape(1, m, groups).permute(0, 2, 1)
    if offset is not None:
        sums = x.reshape(t, groups, 1, n * size).sum(-1).expand(t, groups, m)
        dots = dots + sums * offset.reshape(1, m, groups).permute(0, 2, 1)
    return dots.contiguous().sum(1)


#: the block types ``block_scales`` decodes: two planes of 16 weights, one scale (and offset);
#: and Q8_0's one scale a block, which ``quantized_linear``'s partial dots then read from a
#: buffer of scales alone rather than from every 34th byte of the blocks (30 MB of cache lines
#: for 1.7 MB of scales in a 49,152-row head)
SCALE_KINDS = ("Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0")


def block_scales(
    packed: Tensor, kind: int, shape: tuple[int, int], realize: bool = True
) -> tuple[Tensor, Tensor | None] | None:
    """Each group's scale and offset of the 4- or 5-bit weight ``packed`` ``(m, k)``, decoded
    once into float16 buffers ``(m, groups, 1)`` (exactly: GGUF keeps them as float16), for
    ``quantized_linear``; None for the other types."""
    name, per_block, block_bytes, unpack = _kind(kind)
    if name not in SCALE_KINDS or unpack is None:
        return None
    m, k = shape
    _, scale, offset = unpack(packed.reshape(-1, block_bytes), 1)
    groups = k // per_block
    made = [
        t.reshape(m, groups, 1).cast(dtypes.float16).contiguous()
        for t in (scale, offset)
        if t is not None
    ]
    if realize:
        Tensor.realize(*made)
    return made[0], made[1] if offset is not None else None


#: what ``split_blocks`` keeps the scales in. A decode step's product reads a scale and an
#: offset per row for every 32 weights; from float16 each took three instructions (insert,
#: convert, broadcast), two of them on the port the vector math needs, and the 4-bit products
#: ran at 2.4 weights a cycle: float32 is one broadcast load. SmolLM2 generates 20-30% faster
#: (46-55 -> 57-71 tokens/s on 2 threads, A/B) for 14 MiB more (243 MiB peak).
SCALES_DTYPE = dtypes.float32
#: rows of a weight whose values ``split_blocks`` packs into each 32-bit word, by the values'
#: width in bits: 8 rows of nibbles (a word for each plane: the low nibbles, the high ones), 4 of
#: bytes. A decode step's product then loads a word once for that many rows' weights, and loads
#: of 32-bit words, not bytes, keep gcc 12's vectoriser at the full vector width (a loop of 16
#: byte loads made it choose 16-byte vectors: four 4-wide float multiplies for each 16 weights).
#: Each row's field is masked in place (``SplitBlocks.weights``), not shifted down: the row's
#: scale is kept divided by the field's place value instead, so a product's 16 weights cost an
#: AND, a conversion, and two fused multiply-adds; a vector shift more ran on the port those
#: need, and the 3072 x 576 gate and up product took 100 us instead of ~80 (2 threads).
WORD_ROWS = {4: 8, 8: 4}
#: the block types a loop device keeps split (``split_blocks``): where a block's values start,
#: and whether they are nibbles (two 4-bit weights a byte) or signed bytes
SPLIT_KINDS = {name: (start, True) for name, (start, _) in NIBBLE_KINDS.items()} | {
    "Q8_0": (2, False)
}


@dataclass(frozen=True, slots=True)
class SplitBlocks:
    """A Q4_0, Q4_1 or Q8_0 weight ``(m, k)`` kept apart: its blocks' values, and each group's
    scale and offset ``(m, groups, 1)`` float32 (``block_scales``, widened): the values are the
    bytes a block has in the file; the scales are no longer decoded from bytes in every kernel,
    and are read as float32 (``SCALES_DTYPE``).

    ``values`` is ``(m / rows, groups, planes, width)`` int32 words, where ``rows`` is
    ``WORD_ROWS`` of the values' width: field ``b`` (4 or 8 bits from bit ``bits * b``) of word
    ``(r, g, p, j)`` holds the value of row ``rows * r + b``, group ``g``: weight ``16 * p + j``
    of a nibble block (its plane ``p``), or weight ``j`` of Q8_0's 32 bytes (one plane), those in
    offset binary (``v + 128``). ``scale`` is then kept divided by each field's place value,
    ``2 ** (bits * b)``, except in the top field, which ``weights`` shifts down (read in place,
    it would be negative). When ``m`` is no multiple of ``rows``: ``rows`` is 1 and ``values``
    the file's bytes ``(m, groups, width)`` (uint8 nibbles, or int8)."""

    values: Tensor
    scale: Tensor
    offset: Tensor | None
    kind: int
    shape: tuple[int, int]
    rows: int

    @property
    def bits(self) -> int:
        return 4 if _kind(self.kind)[0] in NIBBLE_KINDS else 8

    def weights(self) -> tuple[Tensor, Tensor | int | None]:
        """``q`` as float32 ``(m / rows, rows, groups, planes, size)`` and what is added to it
        (``bias``: None, a number or ``(m / rows, rows, groups, 1, 1)``) so that ``scale * q +
        scale * bias`` (+ ``offset``) is the weight: the low nibbles (weights 0-15 of each
        block) then the high ones (16-31), ``bias`` -8 for Q4_0; or Q8_0's 32 bytes (in offset
        binary in words: ``bias`` -128, in place value). ``scale * q + scale * bias`` is exact
        (each product has at most 19 significant bits, and so has their sum), so ``bias`` costs a
        multiply per group, not a subtraction per weight."""
        (m, k), rows, bits = self.shape, self.rows, self.bits
        if rows == 1:  # the file's bytes
            if bits == 8:
                return self.values.reshape(m, 1, k // 32, 1, 32).cast(dtypes.float32), None
            nibbles = self.values.reshape(m, 1, k // 32, 1, 16)
            shifts = _shifts(1, 1, 1, 2, 1, step=4, device=nibbles.device)
            minus = NIBBLE_KINDS[_kind(self.kind)[0]][1]
            return ((nibbles >> shifts) & 15).cast(dtypes.float32), -minus if minus else None
        words = self.values.reshape(m // rows, 1, k // 32, *self.values.shape[2:])
        shape, places = (m // rows, rows, k // 32, *self.values.shape[2:]), _places(rows, bits)
        # each field masked where it lies; the top one (it holds the sign bit) shifted down
        down = _per_field([0] * (rows - 1) + [bits * (rows - 1)], shape, dtypes.int32, words.device)
        ones = (1 << bits) - 1
        mask = _per_field([ones << p for p in places], shape, dtypes.int32, words.device)
        q = ((words >> down) & mask).cast(dtypes.float32)
        minus = NIBBLE_KINDS[_kind(self.kind)[0]][1] if bits == 4 else 128  # (offset binary)
        if not minus:
            return q, None
        biases = [-minus * float(1 << p) for p in places]
        return q, _per_field(biases, (m // rows, rows, k // 32, 1, 1), dtypes.float32, words.device)

    def _scaled(self, t: Tensor) -> Tensor:
        """A scale or offset ``(m, groups, 1)`` as float32 ``(m / rows, rows, groups, 1, 1)``."""
        (m, k), rows = self.shape, self.rows
        return t.cast(dtypes.float32).reshape(m // rows, rows, k // 32, 1, 1)

    def _dequantized(self) -> Tensor:
        """``scale * q + offset`` ``(m / rows, rows, groups, planes, size)``, bit for bit (a
        field's place value in ``q`` and in ``scale`` cancel exactly)."""
        (q, bias), scale = self.weights(), self._scaled(self.scale)
        w = scale * q if bias is None else scale * q + scale * bias
        return w if self.offset is None else w + self._scaled(self.offset)

    def _fused(self) -> Tensor:
        """``q.fma(scale, offset)`` (``offset`` ``scale * bias`` for Q4_0 and Q8_0): each weight
        one fused multiply-add, rounded once (not bit for bit as ``dequantize``; within an ulp).
        The decode step's product is 4 vector instructions per 16 weights this way, 5 apart:
        SmolLM2's 3072 x 576 gate and up product 121 -> 107 us in C written by hand."""
        (q, bias), scale = self.weights(), self._scaled(self.scale)
        offset = self._scaled(self.offset) if self.offset is not None else None
        if bias is not None:
            offset = scale * bias if offset is None else scale * bias + offset
        return q * scale if offset is None else q.fma(scale, offset)

    def linear(self, x: Tensor) -> Tensor:
        """``x @ w.T``: one sum per row of ``x * (scale * q + offset)`` (``_fused``), the rows of
        a word side by side (the optimiser takes them as one register tile)."""
        (m, k), t = self.shape, x.shape[0]
        w = self._fused()
        xs = x.reshape(t, 1, 1, k // 32, *w.shape[3:])
        return (xs * w.unsqueeze(0)).sum((3, 4, 5)).reshape(t, m)

    def row_range(self, start: int, stop: int) -> SplitBlocks:
        """Rows ``start:stop`` of the weight (multiples of ``rows``): views, no copy."""
        rows, (_, k) = self.rows, self.shape
        if start % rows or stop % rows:
            raise InvalidValue(f"rows {start}:{stop} split the words of {rows} rows")
        offset = self.offset[start:stop] if self.offset is not None else None
        return SplitBlocks(
            self.values[start // rows : stop // rows],
            self.scale[start:stop],
            offset,
            self.kind,
            (stop - start, k),
            rows,
        )

    def dequantize(self, contiguous: bool = False) -> Tensor:
        """``w`` in float32, bit for bit as ``dequantize``. ``contiguous``: computed into a
        buffer of its own in the words' order, where each word's rows are one vector load apart
        (a GEMM's panel copy of it then runs at a float copy's speed: read from the words
        directly, each of its elements took a division and a shift, and SmolLM2's 32-token
        prompt spent 2 ms per 3072 x 576 weight there; 0.1 ms this way)."""
        w = self._dequantized()
        return (w.contiguous() if contiguous else w).reshape(self.shape)


def _places(rows: int, bits: int) -> list[int]:
    """The bit each of the ``rows`` fields of ``bits`` bits in a word is read at
    (``SplitBlocks.weights``): where it lies, or 0 for the top field, shifted down."""
    return [bits * b if b < rows - 1 else 0 for b in range(rows)]


def _per_field(
    values: list[int] | list[float], shape: tuple[int, ...], dtype: DType, device: str
) -> Tensor:
    """``values[b]`` at every element of ``shape`` whose axis 1 is ``b``: constants padded into
    place and added, no buffer (an arange is one, and the scheduler gives work on it a buffer of
    its own when read expanded, see the note at the top): in a kernel, a choice on the field's
    index, which the C compiler folds to a constant per unrolled field."""
    rows, one = len(values), (shape[0], 1, *shape[2:])
    total: Tensor | None = None
    for b, v in enumerate(values):
        if v:
            pad = ((0, 0), (b, rows - 1 - b), *((0, 0),) * (len(shape) - 2))
            placed = Tensor.full(one, v, dtype, device=device).pad(pad)
            total = placed if total is None else total + placed
    return Tensor.full(shape, 0, dtype, device=device) if total is None else total


def split_blocks(packed: Tensor, kind: int, shape: tuple[int, int]) -> SplitBlocks | None:
    """``packed`` (a Q4_0, Q4_1 or Q8_0 weight's blocks) as ``SplitBlocks``, realized; None for
    other types. Memory is that of the file's blocks and 2 bytes more per scale (a Q4_1 block:
    24 bytes for 20): ``packed`` is not needed any more."""
    name, _, block_bytes, _ = _kind(kind)
    if name not in SPLIT_KINDS:
        return None
    (m, k), (start, nibbles) = shape, SPLIT_KINDS[name]
    width, bits = (16, 4) if nibbles else (32, 8)
    values = packed.reshape(-1, block_bytes)[:, start : start + width]  # (blocks, width) bytes
    rows = WORD_ROWS[bits] if m % WORD_ROWS[bits] == 0 else 1
    device, groups = packed.device, k // 32
    scales = block_scales(packed, kind, shape, realize=False)
    assert scales is not None
    scale = scales[0].cast(SCALES_DTYPE)
    if rows > 1:  # the values of `rows` rows side by side in each word, a field a row
        if nibbles:  # the planes: low nibbles, high ones
            values = Tensor.stack(values & 15, values >> 4, dim=1)
        else:  # signed bytes in offset binary (see ``SplitBlocks.weights``)
            values = (values ^ 128).reshape(-1, 1, width)
        planes = values.shape[1]
        grouped = values.reshape(m // rows, rows, groups, planes, width).cast(dtypes.uint32)
        fields = _shifts(1, rows, 1, 1, 1, step=bits, dtype=dtypes.uint32, device=device)
        values = (grouped << fields).sum(1).bitcast(dtypes.int32)
        divisors = [2.0**-p for p in _places(rows, bits)]
        factor = _per_field(divisors, (m // rows, rows, groups, 1, 1), SCALES_DTYPE, device)
        divided = scale.reshape(m // rows, rows, groups, 1, 1) * factor
        scale = divided.reshape(m, groups, 1)  # (exact: a power of two)
    else:
        values = values.reshape(m, groups, width)
        if not nibbles:
            values = values.bitcast(dtypes.int8)
    values, scale = values.contiguous(), scale.contiguous()
    offset = scales[1].cast(SCALES_DTYPE).contiguous() if scales[1] is not None else None
    Tensor.realize(values, scale, *(t for t in (offset,) if t is not None))
    return SplitBlocks(values, scale, offset, kind, shape, rows)


def _inline_dots(
    x: Tensor,
    planes: tuple[Tensor, ...],
    scales: tuple[Tensor, Tensor | None],
    groups_shape: tuple[int, int],
) -> Tensor:
    """``x @ w.T`` as one sum over groups and their weights of ``x * (scale * q + offset)``."""
    (m, groups), t = groups_shape, x.shape[0]
    scale = scales[0].cast(dtypes.float32)
    offset = scales[1].cast(dtypes.float32) if scales[1] is not None else None
    size = planes[0].shape[2]
    xs = x.reshape(t, 1, groups, len(planes), size)
    total: Tensor | None = None
    for i, plane in enumerate(planes):
        w = plane.reshape(m, groups, size) * scale
        w = w + offset if offset is not None else w
        term = xs[:, :, :, i] * w.reshape(1, m, groups, size)
        total = term if total is None else total + term
    assert total is not None
    return total.sum((2, 3))


# ---- the file: header, metadata, tensor table ----------------------------------------------------
#
# GGUF v2/v3, little-endian: "GGUF", uint32 version, uint64 tensor count, uint64 key count; the
# keys (a string, a uint32 type, a value); the tensor table (a name, uint32 dims, uint64 sizes
# innermost first, uint32 type, uint64 offset); then the tensors' bytes from the next multiple of
# ``general.alignment`` (32). Strings are a uint64 length and UTF-8 bytes. The header is read
# here rather than with ``gguf.GGUFReader``, which keeps a numpy view per field and per string:
# for a 49,152-token vocabulary that takes seconds and about 150 MiB, more than the model.

#: metadata value types -> struct format (8: string, 9: array, handled apart)
_SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}


class _Header:
    """A cursor over the bytes of a GGUF file's header."""

    def __init__(self, data: Any):
        self.data, self.at = data, 0

    def take(self, fmt: str) -> Any:
        value = struct.unpack_from("<" + fmt, self.data, self.at)[0]
        self.at += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        n = self.take("Q")
        text = bytes(self.data[self.at : self.at + n]).decode("utf-8", errors="replace")
        self.at += n
        return text

    def value(self, kind: int) -> Any:
        if kind == 8:
            return self.string()
        if kind == 9:
            item, n = self.take("I"), self.take("Q")
            if item in _SCALARS and item != 7:  # a numeric array in one read
                values = np.frombuffer(self.data, "<" + _SCALARS[item], n, self.at)
                self.at += values.nbytes
                return values.tolist()
            return [self.value(item) for _ in range(n)]
        if kind not in _SCALARS:
            raise ValueError(f"unknown metadata value type {kind} at byte {self.at}")
        return self.take(_SCALARS[kind])


def _parse(path: str | os.PathLike) -> tuple[dict[str, Any], list[tuple], np.ndarray]:
    """The metadata, the tensor table ``(name, kind, shape, start, bytes)`` and the file's bytes
    (memory-mapped), with a ``FileFormatError`` for anything that is not a whole GGUF file."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no GGUF file at {path}")
    data = np.memmap(path, dtype=np.uint8, mode="r")
    try:
        return _parse_bytes(data)
    except (ValueError, struct.error, UnicodeDecodeError) as e:
        raise FileFormatError(
            f"{path} is not a readable GGUF file: {e}; is it complete, and a .gguf file?"
        ) from None


def _parse_bytes(data: np.ndarray) -> tuple[dict[str, Any], list[tuple], np.ndarray]:
    header = _Header(data)
    magic = bytes(data[:4])
    if magic != b"GGUF":
        raise ValueError(f"it starts with {magic!r}, not b'GGUF'")
    header.at = 4
    version, tensor_count, key_count = header.take("I"), header.take("Q"), header.take("Q")
    if version not in (2, 3):
        raise ValueError(f"GGUF version {version}; fusegrad reads versions 2 and 3")
    metadata = {}
    for _ in range(key_count):
        key = header.string()
        metadata[key] = header.value(header.take("I"))
    table = []
    for _ in range(tensor_count):
        name, dims = header.string(), header.take("I")
        sizes = [header.take("Q") for _ in range(dims)]
        kind, offset = header.take("I"), header.take("Q")
        table.append((name, kind, tuple(reversed(sizes)), offset))
    align = int(metadata.get("general.alignment", 32))
    base = -(-header.at // align) * align
    tensors = []
    for name, kind, shape, offset in table:
        per_block, block_bytes = GGUF_TYPES[kind][1:3] if kind in GGUF_TYPES else (1, 0)
        size = int(np.prod(shape, dtype=np.int64)) // per_block * block_bytes
        if base + offset + size > len(data):
            raise ValueError(f"tensor {name!r} ends past the end of the file")
        tensors.append((name, kind, shape, base + offset, size))
    return metadata, tensors, data


def gguf_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The key/value metadata of a GGUF file (``llama.block_count``, ``tokenizer.ggml.tokens``)."""
    return _parse(path)[0]


def _packed(data: np.ndarray, kind: int, device: str | None) -> Tensor:
    """The file's bytes of one tensor, on the device, in the dtype ``dequantize`` expects."""
    name = GGUF_TYPES[kind][0] if kind in GGUF_TYPES else "?"
    host = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}.get(name, np.uint8)
    return Tensor(np.ascontiguousarray(data).view(host).reshape(-1), device=device).realize()


def gguf_read(
    path: str | os.PathLike, device: str | None = None
) -> tuple[dict[str, Any], dict[str, tuple[Tensor, int, tuple[int, ...], np.ndarray]]]:
    """The metadata of a GGUF file and, for each tensor, ``(packed, kind, shape, host)``: its
    bytes on ``device`` (as ``dequantize`` takes them), its GGUF type number, its shape in
    PyTorch's order, and the file's bytes of it (a memory-mapped view, valid while held)."""
    metadata, table = gguf_host(path)
    tensors = {
        name: (to_device(host, kind, device), kind, shape, host)
        for name, (kind, shape, host) in table.items()
    }
    return metadata, tensors


def gguf_host(
    path: str | os.PathLike,
) -> tuple[dict[str, Any], dict[str, tuple[int, tuple[int, ...], np.ndarray]]]:
    """The metadata of a GGUF file and, for each tensor, ``(kind, shape, host)``: its GGUF type
    number, its shape in PyTorch's order and its bytes in the memory-mapped file; nothing is
    copied (``to_device`` copies, e.g. after joining the rows of several tensors)."""
    metadata, table, data = _parse(path)
    tensors = {}
    for name, kind, shape, start, size in table:
        if kind not in GGUF_TYPES:
            raise FileFormatError(
                f"{path}: tensor {name!r} has GGUF type {kind}, which fusegrad cannot "
                "dequantize; supported: " + ", ".join(n for n, *_ in GGUF_TYPES.values())
            )
        tensors[name] = (kind, shape, data[start : start + size])
    return metadata, tensors


def to_device(host: np.ndarray, kind: int, device: str | None, *sources: np.ndarray) -> Tensor:
    """The packed bytes ``host`` of a tensor of GGUF type ``kind`` on ``device``. The file pages
    of ``host`` (a view of the file), or of the views it was joined from (``sources``), are
    dropped from the resident set afterwards, so that loading never holds the file twice."""
    packed = _packed(host, kind, device)
    for view in sources or (host,):
        _forget(view)
    return packed


def _forget(view: np.ndarray) -> None:
    """Drop the file pages of ``view``, when it is a slice of the memory-mapped file, from this
    process's resident set (they are copied to the device now)."""
    mapped = getattr(view, "_mmap", None)
    if mapped is None or not hasattr(mmap, "MADV_DONTNEED"):
        return
    start = view.ctypes.data - np.frombuffer(mapped, np.uint8).ctypes.data
    page = mmap.PAGESIZE
    first, last = -(-start // page) * page, (start + view.nbytes) // page * page
    if last > first:
        mapped.madvise(mmap.MADV_DONTNEED, first, last - first)


def gguf_load(
    path: str | os.PathLike, device: str | None = None, packed: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The metadata and the tensors of a GGUF file, the tensors in PyTorch's shape order.

    Each tensor's bytes are copied once from the memory-mapped file to ``device``; quantized
    ones stay packed there and come back as lazy dequantizing expressions (see the module
    docstring). With ``packed=True`` each value is instead ``(packed, kind, shape)``: the raw
    tensor, its GGUF type number and its shape, for callers that index the blocks themselves
    and call ``dequantize`` on what they pick.
    """
    metadata, entries = gguf_read(path, device)
    tensors = {
        name: (raw, kind, shape) if packed else dequantize(raw, kind, shape)
        for name, (raw, kind, shape, _) in entries.items()
    }
    return metadata, tensors
