"""dtypes: PyTorch's promotion table, lookups by name, and C-style scalar conversion."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor, dtypes
from fusegrad.dtype import cast_scalar, promote_types, scalar_type, to_dtype
from fusegrad.errors import DTypeError

b, i8, u8, i16, u16, i32, u32, i64 = (
    dtypes.bool,
    dtypes.int8,
    dtypes.uint8,
    dtypes.int16,
    dtypes.uint16,
    dtypes.int32,
    dtypes.uint32,
    dtypes.int64,
)
f16, bf16, f32, f64 = dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64

PROMOTIONS = [  # (a, b, torch.promote_types(a, b))
    (b, b, b),
    (b, i8, i8),
    (b, u8, u8),
    (b, i32, i32),
    (b, f16, f16),
    (b, f32, f32),
    (i8, i8, i8),
    (i8, u8, i16),
    (i8, i16, i16),
    (i8, i32, i32),
    (i8, i64, i64),
    (u8, i16, i16),
    (u8, i32, i32),
    (u8, u16, u16),
    (u16, i16, i32),
    (u32, i32, i64),
    (i32, i64, i64),
    (i16, i32, i32),
    (i8, f16, f16),
    (i64, f16, f16),
    (i32, f32, f32),
    (i64, f32, f32),
    (u8, bf16, bf16),
    (f16, f32, f32),
    (f16, bf16, f32),
    (bf16, f32, f32),
    (f32, f64, f64),
    (f16, f64, f64),
]


@pytest.mark.parametrize("a, b_, expected", PROMOTIONS)
def test_promote_types(a, b_, expected):
    assert promote_types(a, b_) == expected
    assert promote_types(b_, a) == expected  # symmetric


@pytest.mark.parametrize("a, b_", [(a, b_) for a, b_, _ in PROMOTIONS if bf16 not in (a, b_)])
def test_promote_types_agrees_with_numpy_where_numpy_follows_torch(a, b_):
    # numpy and torch agree except for int/float mixes (numpy widens the float)
    if a.is_float != b_.is_float:
        return
    assert promote_types(a, b_).np == np.promote_types(a.np, b_.np)


@pytest.mark.parametrize(
    "value, other, expected",
    [
        (1, i8, i8),
        (1, u8, u8),
        (1, f16, f16),
        (1, b, i32),
        (1.5, i8, f32),
        (1.5, f16, f16),
        (1.5, f64, f64),
        (1.5, b, f32),
        (True, i8, i8),
        (True, f32, f32),
        (True, b, b),
    ],
)
def test_scalar_type(value, other, expected):
    assert scalar_type(value, other) == expected


def test_scalar_type_rejects_other_objects():
    with pytest.raises(DTypeError, match="cannot combine str 'a' with a dtypes.int32 tensor"):
        scalar_type("a", i32)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("float32", f32),
        ("float", f32),
        ("half", f16),
        ("double", f64),
        ("int", i32),
        ("long", i64),
        ("uchar", u8),
        ("char", i8),
        ("short", i16),
        ("bool", b),
        ("bfloat16", bf16),
    ],
)
def test_from_name(name, expected):
    assert dtypes.from_name(name) is expected
    assert to_dtype(name) is expected
    assert to_dtype(expected) is expected


@pytest.mark.parametrize(
    "name", ["float8", "Float32", "", "all", "from_name", "default_float_", "void"]
)
def test_from_name_unknown(name):
    with pytest.raises(DTypeError) as e:
        dtypes.from_name(name)
    msg = str(e.value)
    assert f"unknown dtype {name!r}" in msg
    assert "float32" in msg and "int8" in msg and "bool" in msg  # lists the known names
    assert "void" not in msg.split(";")[1]


def test_dtype_error_is_a_type_error():
    with pytest.raises(TypeError):
        dtypes.from_name("nope")


@pytest.mark.parametrize(
    "npdtype, expected",
    [
        (np.float32, f32),
        (np.float16, f16),
        (np.int64, i64),
        (np.uint8, u8),
        (np.bool_, b),
        (">f4", f32),  # another byte order: the same type
        (">i8", i64),
    ],
)
def test_from_numpy(npdtype, expected):
    assert dtypes.from_numpy(np.dtype(npdtype)) is expected


def test_from_numpy_unknown():
    with pytest.raises(DTypeError, match="complex64 has no fusegrad equivalent"):
        dtypes.from_numpy(np.dtype(np.complex64))


@pytest.mark.parametrize(
    "value, expected",
    [
        (True, b),
        (3, i32),
        (2.5, f32),
        ([1, 2], i32),
        ([1, 2.0], f32),
        ([[True], [False]], b),
        ([True, 1], i32),
        ([], f32),
    ],
)
def test_from_py(value, expected):
    assert dtypes.from_py(value) is expected


@pytest.mark.parametrize(
    "value, dtype, expected",
    [
        (300, u8, 44),
        (-1, u8, 255),
        (256, u8, 0),
        (128, i8, -128),
        (-129, i8, 127),
        (2**31, i32, -(2**31)),
        (2**32 + 5, i32, 5),
        (2**63, i64, -(2**63)),
        (-1, dtypes.uint64, 2**64 - 1),
        (65536 + 7, u16, 7),
        (40000, i16, 40000 - 65536),
        (3.9, i32, 3),
        (-3.9, i32, -3),
        (True, i32, 1),
        (2, b, True),
        (0, b, False),
        (0.0, b, False),
        (1, f32, 1.0),
        (True, f64, 1.0),
    ],
)
def test_cast_scalar(value, dtype, expected):
    out = cast_scalar(value, dtype)
    assert out == expected and type(out) is type(expected)


@pytest.mark.parametrize("dtype", [i8, u8, i16, u16, i32, u32, i64, dtypes.uint64])
def test_cast_scalar_wraps_modulo_2_to_the_bits(dtype):
    span = 2 ** (8 * dtype.itemsize)
    for v in (dtype.max + 1, dtype.min - 1, 3 * dtype.max, -12345, 7 * span + 3):
        assert cast_scalar(v, dtype) == (v - dtype.min) % span + dtype.min


@pytest.mark.parametrize(
    "dtype, lo, hi",
    [
        (i8, -128, 127),
        (u8, 0, 255),
        (i32, -(2**31), 2**31 - 1),
        (b, False, True),
        (f32, -float("inf"), float("inf")),
    ],
)
def test_min_max(dtype, lo, hi):
    assert (dtype.min, dtype.max) == (lo, hi)


def test_all_lists_every_real_dtype_once():
    names = [d.name for d in dtypes.all()]
    assert len(names) == len(set(names)) == 13
    assert "void" not in names


@pytest.mark.parametrize(
    "dtype, flags",
    [
        (f16, (True, False, False)),
        (i8, (False, True, False)),
        (u8, (False, True, True)),
        (b, (False, False, False)),
    ],
)
def test_kind_flags(dtype, flags):
    assert (dtype.is_float, dtype.is_int, dtype.is_unsigned) == flags


def test_bfloat16_is_held_as_uint16_bits():
    assert bf16.np == np.dtype(np.uint16) and bf16.itemsize == 2


#: (program on fusegrad's Tensor and torch's, as the same expression): 0-d operands, matmul
ZERO_D = [
    "T([100], dtype=D.int8) + T(100, dtype=D.int64)",  # a 0-d int of the same category: int8
    "T([1], dtype=D.int8) + T(1.5, dtype=D.float64)",  # higher category: float64
    "T([1], dtype=D.float16) + T(1.5, dtype=D.float64)",
    "T([True, False]) + T(3, dtype=D.int8)",
    "T([1], dtype=D.uint8) + T(-3, dtype=D.int64)",
    "T([1, 2], dtype=D.int16) * T(3, dtype=D.int32)",
    "T(1, dtype=D.int8) + T(3, dtype=D.int64)",  # both 0-d: the usual rule
    "T([[1]], dtype=D.int8) + T([3], dtype=D.int64)",  # both with axes: the usual rule
    "T([[100, 100]], dtype=D.int8) @ T([[1], [1]], dtype=D.int8)",  # matmul keeps int8
]


#: sums of narrow integers: int32 where PyTorch's are int64 (docs/semantics.md), same values
SUMS = [
    "-T([1, 4], dtype=D.uint8).sum()",  # -5 (a uint32 sum said 4294967291)
    "T([200, 100], dtype=D.uint8).sum()",
    "T([True, True]).sum()",
    "T([100, 100], dtype=D.int8).sum()",
    "T([200, 100], dtype=D.uint8).cumsum(0)",
]


@pytest.mark.parametrize("program", SUMS)
def test_narrow_integer_sums_are_int32_with_pytorchs_values(program):
    torch = pytest.importorskip("torch")
    want = eval(program, {"T": torch.tensor, "D": torch})  # noqa: S307 - our own literals
    got = eval(program, {"T": Tensor, "D": dtypes})  # noqa: S307
    assert got.dtype == dtypes.int32 and want.dtype == torch.int64, program
    assert got.tolist() == want.tolist(), program


@pytest.mark.parametrize("program", ZERO_D)
def test_zero_d_promotion_follows_pytorch(program):
    torch = pytest.importorskip("torch")
    want = eval(program, {"T": torch.tensor, "D": torch})  # noqa: S307 - our own literals
    got = eval(program, {"T": Tensor, "D": dtypes})  # noqa: S307
    assert got.dtype.name == str(want.dtype).removeprefix("torch."), program
    assert got.tolist() == want.tolist(), program
