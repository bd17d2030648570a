"""ONNX element types and the fusegrad dtypes that hold them.

Every ONNX type with a fusegrad dtype of the same meaning maps to it. The narrow types
(float8 in its four flavours, float8e8m0, int4/uint4, int2/uint2, float4e2m1) have no fusegrad
dtype: a tensor of one of them is held as its raw codes, one code per ``uint8`` element (the
ONNX file packs two 4-bit codes per byte; they are unpacked on load). Ops that understand them
(Cast, CastLike, QuantizeLinear, DequantizeLinear) decode and encode the codes with Tensor bit
operations, so the decode fuses into the kernel that consumes it. ``NARROW`` names them; a
runner output of a narrow type is a uint8 Tensor of codes (see docs/onnx.md).
"""

from __future__ import annotations

import functools
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
