"""Data types and PyTorch-style type promotion."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from fusegrad.errors import DTypeError


@dataclass(frozen=True, slots=True)
class DType:
    """A scalar element type. ``priority`` orders types for promotion within a kind."""

    name: str
    itemsize: int
    kind: str  # "b" bool, "i" signed int, "u" unsigned int, "f" float
    priority: int
    np_name: str | None  # numpy's name for it (bfloat16 has none)
    #: hashed once: every UOp built hashes its dtype (the generated hash built a tuple each time)
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "_hash", hash((self.name, self.itemsize, self.kind, self.priority))
        )

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, DType):
            return NotImplemented
        if self._hash != other._hash:  # (most comparisons: two different types, told apart here)
            return False
        return (self.name, self.itemsize, self.kind, self.priority, self.np_name) == (
            other.name,
            other.itemsize,
            other.kind,
            other.priority,
            other.np_name,
        )

    def __repr__(self) -> str:
        return f"dtypes.{self.name}"

    @property
    def is_float(self) -> bool:
        return self.kind == "f"

    @property
    def is_int(self) -> bool:
        return self.kind in ("i", "u")

    @property
    def is_unsigned(self) -> bool:
        return self.kind == "u"

    @property
    def np(self) -> np.dtype:
        """The numpy dtype holding this type's values (bfloat16 is held as its raw uint16 bits)."""
        return np.dtype(self.np_name or "uint16")

    @property
    def min(self) -> int | float | bool:
        if self.kind == "b":
            return False
        if self.kind == "f":
            return -float("inf")
        return 0 if self.kind == "u" else -(2 ** (8 * self.itemsize - 1))

    @property
    def max(self) -> int | float | bool:
        if self.kind == "b":
            return True
        if self.kind == "f":
            return float("inf")
        bits = 8 * self.itemsize
        return 2**bits - 1 if self.kind == "u" else 2 ** (bits - 1) - 1


class dtypes:  # noqa: N801 - tinygrad-compatible public name
    """The namespace of all dtypes, e.g. ``dtypes.float32``."""

    bool: Final = DType("bool", 1, "b", 0, "bool")
    int8: Final = DType("int8", 1, "i", 1, "int8")
    uint8: Final = DType("uint8", 1, "u", 2, "uint8")
    int16: Final = DType("int16", 2, "i", 3, "int16")
    uint16: Final = DType("uint16", 2, "u", 4, "uint16")
    int32: Final = DType("int32", 4, "i", 5, "int32")
    uint32: Final = DType("uint32", 4, "u", 6, "uint32")
    int64: Final = DType("int64", 8, "i", 7, "int64")
    uint64: Final = DType("uint64", 8, "u", 8, "uint64")
    float16: Final = DType("float16", 2, "f", 9, "float16")
    bfloat16: Final = DType("bfloat16", 2, "f", 10, None)
    float32: Final = DType("float32", 4, "f", 11, "float32")
    float64: Final = DType("float64", 8, "f", 12, "float64")
    void: Final = DType("void", 0, "v", -1, None)
    # pointer-sized index arithmetic inside kernels
    index: Final = DType("int32", 4, "i", 5, "int32")

    # aliases, as in PyTorch and tinygrad
    half = float16
    float = float32
    double = float64
    int = int32
    long = int64
    uchar = uint8
    char = int8
    short = int16

    default_float: DType = float32
    default_int: DType = int32

    @staticmethod
    def all() -> tuple[DType, ...]:
        return ALL_DTYPES

    @staticmethod
    def from_name(name: str) -> DType:
        """Look a dtype up by name (``"float32"``, ``"half"``...)."""
        found = getattr(dtypes, name, None)
        if not isinstance(found, DType) or found.kind == "v":
            names = ", ".join(d.name for d in ALL_DTYPES)
            raise DTypeError(f"unknown dtype {name!r}; known dtypes: {names}")
        return found

    @staticmethod
    def from_numpy(npdtype: np.dtype) -> DType:
        """The dtype matching a numpy dtype."""
        dtype = np.dtype(npdtype)
        found = _FROM_NUMPY.get(dtype)
        if found is None:  # (another byte order: the name says)
            found = next((d for d in ALL_DTYPES if d.np_name == dtype.name), None)
        if found is None:
            raise DTypeError(f"numpy dtype {npdtype} has no fusegrad equivalent; cast it first")
        return found

    @staticmethod
    def from_py(x: object) -> DType:
        """The dtype PyTorch gives a Python scalar or (nested) list of them."""
        if isinstance(x, (list, tuple)):
            if len(x) == 0:
                return dtypes.default_float
            return max((dtypes.from_py(v) for v in x), key=lambda d: d.priority)
        if isinstance(x, bool):
            return dtypes.bool
        if isinstance(x, int):
            return dtypes.default_int
        if isinstance(x, float):
            return dtypes.default_float
        raise DTypeError(
            f"cannot make a tensor from {type(x).__name__} {x!r}; use numbers or lists"
        )


ALL_DTYPES: tuple[DType, ...] = tuple(
    v for k, v in vars(dtypes).items() if isinstance(v, DType) and k == v.name and v.kind != "v"
)
#: numpy dtype -> ours (``dtypes.from_numpy``): a numpy dtype's ``name`` takes microseconds, and
#: each Tensor made from an array asks (a decode step makes five)
_FROM_NUMPY: dict[np.dtype, DType] = {}
for _d in ALL_DTYPES:
    if _d.np_name is not None:
        _FROM_NUMPY.setdefault(np.dtype(_d.np_name), _d)


def to_dtype(d: DType | str) -> DType:
    """Accept a DType, its name, or a numpy dtype (``np.float32``); anything else is refused."""
    if isinstance(d, DType):
        return d
    if isinstance(d, str):
        return dtypes.from_name(d)
    if isinstance(d, np.dtype) or (isinstance(d, type) and issubclass(d, np.generic)):
        return dtypes.from_numpy(np.dtype(d))
    raise DTypeError(
        f"dtype must be a fusegrad dtype or its name, got {type(d).__name__} {d!r}; "
        "use e.g. dtypes.float32 or 'float32'"
    )


def promote_types(a: DType, b: DType) -> DType:
    """The result type of a binary op on two tensors, following PyTorch's rules."""
    if a == b:
        return a
    if a.kind == "f" or b.kind == "f":
        if a.kind == "f" and b.kind == "f":
            if {a, b} == {dtypes.float16, dtypes.bfloat16}:
                return dtypes.float32
            return a if a.priority > b.priority else b
        return a if a.kind == "f" else b
    if a.kind == "b" or b.kind == "b":
        return b if a.kind == "b" else a
    if a.kind == b.kind:
        return a if a.itemsize > b.itemsize else b
    # one signed, one unsigned: a signed type wide enough for both, as PyTorch does
    signed, unsigned = (a, b) if a.kind == "i" else (b, a)
    if signed.itemsize > unsigned.itemsize:
        return signed
    wider = {1: dtypes.int16, 2: dtypes.int32, 4: dtypes.int64, 8: dtypes.int64}
    return wider[unsigned.itemsize]


#: PyTorch's categories for promotion: bool < integer < floating point
_CATEGORY = {"b": 0, "i": 1, "u": 1, "f": 2}


def promote_shaped(a: DType, a_0d: bool, b: DType, b_0d: bool) -> DType:
    """``promote_types`` as PyTorch applies it to tensors: a 0-d tensor beside one with axes
    counts only when its category (bool < integer < float) is higher, like a Python number
    (``int8 [100] + int64 0-d 100`` stays int8 and wraps to -56; ``int8 [1] + float64 0-d`` is
    float64)."""
    if a_0d == b_0d:
        return promote_types(a, b)
    shaped, zero = (a, b) if b_0d else (b, a)
    return shaped if _CATEGORY[zero.kind] <= _CATEGORY[shaped.kind] else zero


def scalar_type(value: object, other: DType) -> DType:
    """The dtype a Python scalar takes when combined with a tensor of dtype ``other``."""
    if isinstance(value, bool):
        return other
    if isinstance(value, int):
        return other if other.kind != "b" else dtypes.default_int
    if isinstance(value, float):
        return other if other.kind == "f" else dtypes.default_float
    raise DTypeError(
        f"cannot combine {type(value).__name__} {value!r} with a {other} tensor; "
        "use a number or a Tensor"
    )


def cast_scalar(value: object, dtype: DType) -> bool | int | float:
    """Convert a Python scalar to the value ``dtype`` holds, wrapping integers like C does.

    NaN and the infinities have no integer value; they become x86's "integer indefinite", the
    sign bit alone of a 32- or 64-bit register, wrapped to ``dtype``: what compiled kernels and
    PyTorch give on x86 (INT32_MIN for int32, 0 for int8).
    """
    if dtype.kind == "b":
        return bool(value)
    if dtype.kind == "f":
        return float(value)  # type: ignore[arg-type]
    if not isinstance(value, int) and not math.isfinite(value):  # type: ignore[arg-type]
        value = 1 << (63 if dtype.itemsize == 8 else 31)
    iv = int(value)  # type: ignore[call-overload]
    bits = 8 * dtype.itemsize
    iv &= (1 << bits) - 1
    if dtype.kind == "i" and iv >= 1 << (bits - 1):
        iv -= 1 << bits
    return iv
