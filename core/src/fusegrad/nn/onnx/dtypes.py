"""ONNX element types and the fusegrad dtypes that hold them.

Every ONNX type with a fusegrad dtype of the same meaning maps to it. The narrow types
(float8 in its four flavours, float8e8m0, int4/uint4, int2/uint2, float4e2m1) have no fusegrad
dtype; ops compute on their raw codes, one code per ``uint8`` element (``NARROW`` names them).
The sub-byte ones (``SUB_BYTE``: int4, uint4, float4e2m1, int2, uint2) are *stored* packed, as
the ONNX file has them (two 4-bit or four 2-bit codes a byte, the first in the low bits): an
initializer, a Constant or a runner input is a ``Packed`` value whose device buffer holds
ceil(n * bits / 8) bytes, never one byte a code. An op reads it through ``Packed.codes()``, a
lazy shift-and-mask of the bytes that fuses into the op's kernel, and ``Packed.pack`` packs codes
with Tensor ops (``lo | hi << 4``) where a value is stored. Ops that understand narrow types
(Cast, CastLike, QuantizeLinear, DequantizeLinear) decode and encode codes with Tensor bit
operations on the device. A runner output of a narrow type is a uint8 Tensor of codes in the
output's shape, or with ``OnnxRunner(..., packed_outputs=True)`` a sub-byte one is ``Packed``
(see docs/onnx.md).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from math import prod
from typing import Any

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from onnx.helper import np_dtype_to_tensor_dtype

from fusegrad.dtype import DType, dtypes
from fusegrad.errors import DTypeError
from fusegrad.tensor import Tensor

T = TensorProto

#: ONNX element type -> the fusegrad dtype holding its values
DTYPES: dict[int, DType] = {
    T.FLOAT: dtypes.float32,
    T.UINT8: dtypes.uint8,
    T.INT8: dtypes.int8,
    T.UINT16: dtypes.uint16,
    T.INT16: dtypes.int16,
    T.INT32: dtypes.int32,
    T.INT64: dtypes.int64,
    T.BOOL: dtypes.bool,
    T.FLOAT16: dtypes.float16,
    T.DOUBLE: dtypes.float64,
    T.UINT32: dtypes.uint32,
    T.UINT64: dtypes.uint64,
    T.BFLOAT16: dtypes.bfloat16,
}

#: narrow ONNX types held as uint8 codes: element type -> (name, bits)
NARROW: dict[int, tuple[str, int]] = {
    T.FLOAT8E4M3FN: ("float8e4m3fn", 8),
    T.FLOAT8E4M3FNUZ: ("float8e4m3fnuz", 8),
    T.FLOAT8E5M2: ("float8e5m2", 8),
    T.FLOAT8E5M2FNUZ: ("float8e5m2fnuz", 8),
    T.FLOAT8E8M0: ("float8e8m0", 8),
    T.UINT4: ("uint4", 4),
    T.INT4: ("int4", 4),
    T.FLOAT4E2M1: ("float4e2m1", 4),
    **({T.UINT2: ("uint2", 2), T.INT2: ("int2", 2)} if hasattr(T, "INT2") else {}),
}


#: the sub-byte types, stored packed: element type -> bits a code
SUB_BYTE: dict[int, int] = {t: bits for t, (_, bits) in NARROW.items() if bits < 8}

#: the four float8 types onnx saturates on a cast
FLOAT8 = (T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ)


def type_name(elem_type: int) -> str:
    """ONNX's name of an element type (``FLOAT``, ``INT64``...)."""
    return T.DataType.Name(elem_type)


def to_dtype(elem_type: int) -> DType:
    """The fusegrad dtype holding ONNX ``elem_type`` (uint8 codes for a narrow type)."""
    if elem_type in DTYPES:
        return DTYPES[elem_type]
    if elem_type in NARROW:
        return dtypes.uint8
    raise DTypeError(
        f"ONNX element type {type_name(elem_type)} has no fusegrad dtype (supported: "
        f"{', '.join(type_name(t) for t in [*DTYPES, *NARROW])}); cast it in the model first"
    )


def from_numpy_dtype(npdtype: np.dtype) -> int:
    """The ONNX element type of a numpy (or ml_dtypes) dtype."""
    return int(np_dtype_to_tensor_dtype(np.dtype(npdtype)))


def to_codes(array: np.ndarray) -> np.ndarray:
    """The uint8 codes of an ml_dtypes narrow array (its bits, one code per element)."""
    bits = NARROW[from_numpy_dtype(array.dtype)][1]
    return array.view(np.uint8) & np.uint8((1 << bits) - 1)


def narrow_numpy(elem_type: int) -> np.dtype:
    """The ml_dtypes numpy dtype of a narrow ONNX type."""
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))


@functools.cache
def decode_table(elem_type: int) -> np.ndarray:
    """The float32 value of every code of a narrow type (index = code), for a gather that
    decodes inside the consuming kernel. Cached: callers must not write to it."""
    bits = NARROW[elem_type][1]
    codes = np.arange(1 << bits, dtype=np.uint8)
    if elem_type in (T.INT4, getattr(T, "INT2", -1)):
        return np.where(
            codes >= 1 << (bits - 1), codes.astype(np.int32) - (1 << bits), codes
        ).astype(np.float32)
    if elem_type in (T.UINT4, getattr(T, "UINT2", -1)):
        return codes.astype(np.float32)
    return codes.view(narrow_numpy(elem_type)).astype(np.float32)


def encode(array: np.ndarray, elem_type: int, saturate: bool = True) -> np.ndarray:
    """The uint8 codes of ``array``'s values in a narrow type, rounded to nearest even; with
    ``saturate`` (the ONNX default) finite values beyond the range clamp to its largest."""
    target = narrow_numpy(elem_type)
    if saturate and elem_type in FLOAT8:
        return to_codes(numpy_helper.saturate_cast(array, target))
    with np.errstate(all="ignore"):
        return to_codes(array.astype(target))


def host_tensor(array: np.ndarray, device: str | None = None) -> Any:
    """A host array as a Tensor (bfloat16 through its bits: numpy has no bfloat16 of its own)."""
    array = np.asarray(array)
    if array.dtype.name == "bfloat16":
        return Tensor(np.array(array, order="C").view(np.uint16), device=device).bitcast(
            dtypes.bfloat16
        )
    return Tensor(np.array(array, order="C"), device=device)


def pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """Host codes (one per element) packed as ONNX stores them: ``8 // bits`` codes a byte, the
    first in the low bits, the last byte padded with zero codes."""
    per = 8 // bits
    flat = codes.reshape(-1).astype(np.uint8) & np.uint8((1 << bits) - 1)
    flat = np.pad(flat, (0, -flat.size % per)).reshape(-1, per)
    shifts = (bits * np.arange(per)).astype(np.uint8)
    return np.bitwise_or.reduce(flat << shifts, axis=1).astype(np.uint8)


@dataclass(frozen=True, eq=False)  # no field-wise ==: a Tensor's == is elementwise
class Packed:
    """A sub-byte tensor as stored: ``data`` is a 1-d uint8 Tensor of ceil(n * bits / 8) bytes
    holding the codes of the ``shape``-shaped tensor of ONNX type ``elem_type``, packed in
    ONNX's order (the first code in the low bits)."""

    data: Tensor
    shape: tuple[int, ...]
    elem_type: int

    @property
    def bits(self) -> int:
        """The bits of one code (4 or 2)."""
        return SUB_BYTE[self.elem_type]

    @property
    def device(self) -> str:
        """The device holding the bytes."""
        return self.data.device

    def codes(self) -> Tensor:
        """The codes, one uint8 per element in ``shape``: a lazy shift and mask of the bytes,
        computed inside the kernel that reads them."""
        per, mask, n = 8 // self.bits, (1 << self.bits) - 1, prod(self.shape)
        if n == 0:
            return Tensor.zeros(*self.shape, dtype=dtypes.uint8, device=self.device)
        parts = [(self.data >> (self.bits * i)) & mask for i in range(per)]
        flat = parts[0].stack(*parts[1:], dim=-1).reshape(-1)  # byte j -> codes j*per...
        return flat.shrink(((0, n),)).reshape(self.shape)

    @classmethod
    def pack(cls, codes: Tensor, elem_type: int) -> Packed:
        """Pack uint8 ``codes`` (one per element) with Tensor ops, lazily: byte j is
        ``c[j*per] | c[j*per+1] << bits | ...``, computed in the kernel that stores it."""
        bits = SUB_BYTE[elem_type]
        per, n = 8 // bits, prod(codes.shape)
        flat = (codes.cast(dtypes.uint8) & ((1 << bits) - 1)).reshape(-1)
        flat = flat.pad(((0, -n % per),)).reshape(-1, per)
        data = flat[:, 0]
        for i in range(1, per):
            data = data | (flat[:, i] << (bits * i))
        return cls(data, tuple(codes.shape), elem_type)

    @classmethod
    def from_numpy(cls, array: np.ndarray, elem_type: int, device: str | None = None) -> Packed:
        """Host codes (uint8) or an ml_dtypes array, packed on the host: only the packed bytes
        are copied to ``device``."""
        codes = array if array.dtype == np.uint8 else to_codes(array)
        data = Tensor(pack_codes(codes, SUB_BYTE[elem_type]), device=device)
        return cls(data, tuple(array.shape), elem_type)

    def to(self, device: str) -> Packed:
        """The same value with its bytes on ``device``."""
        return (
            self
            if self.device == device
            else Packed(self.data.to(device), self.shape, self.elem_type)
        )

    def realize(self) -> Packed:
        """Compute the packed bytes now."""
        self.data.realize()
        return self

    def numpy(self) -> np.ndarray:
        """The values as an ml_dtypes array (unpacked on the host)."""
        per, bits = 8 // self.bits, self.bits
        raw = self.data.numpy().reshape(-1, 1) >> (bits * np.arange(per, dtype=np.uint8))
        codes = (raw & np.uint8((1 << bits) - 1)).reshape(-1)[: prod(self.shape)]
        return codes.astype(np.uint8).view(narrow_numpy(self.elem_type)).reshape(self.shape)

    def __repr__(self) -> str:
        name = NARROW[self.elem_type][0]
        return f"<Packed {name}{list(self.shape)} in {self.data.shape[0]} bytes on {self.device}>"


def device_value(array: np.ndarray, device: str | None = None, elem_type: int = 0) -> Any:
    """A host array (codes for a narrow type) as the value ops see: ``Packed`` for a sub-byte
    type (never one byte a code on the device), else a Tensor."""
    if elem_type in SUB_BYTE and array.dtype == np.uint8:
        return Packed.from_numpy(array, elem_type, device)
    return host_tensor(array, device)


def unpacked(value: Any) -> Any:
    """What an op receives: a ``Packed`` value's codes (lazy), a list element by element."""
    if isinstance(value, Packed):
        return value.codes()
    if isinstance(value, list):
        return [unpacked(v) for v in value]
    return value
