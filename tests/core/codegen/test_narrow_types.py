"""The narrow-type rewrite of ``codegen/decompose.py``, run by the PYTHON interpreter.

A renderer declaring ``min_storage_bits = 32`` and lacking 8/16-bit integers (as WGSL does) gets
programs that read 32-bit words and write them with atomics; the interpreter runs them, so the
rewrite is checked against numpy here, on every machine, whatever GPU backends are installed.
"""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor, dtypes
from fusegrad.codegen.decompose import NARROW_INTS, wrap_narrow
from fusegrad.codegen.kernel import KernelSource, generate
from fusegrad.dtype import ALL_DTYPES, DType
from fusegrad.runtime.python import PythonRenderer
from fusegrad.uop.ops import Ops, UOp

from .interpreted import run_with

i8, u8, i16, u16, i32, bool_ = (
    dtypes.int8,
    dtypes.uint8,
    dtypes.int16,
    dtypes.uint16,
    dtypes.int32,
    dtypes.bool,
)


class WordRenderer(PythonRenderer):
    """The interpreter, declaring WGSL's storage and integer capabilities."""

    min_storage_bits = 32
    supported_dtypes = frozenset(ALL_DTYPES) - set(NARROW_INTS)


def run_packed(t: Tensor) -> np.ndarray:
    """Realize ``t`` (on PYTHON) with ``WordRenderer``'s programs; return its values."""
    return run_with(t, WordRenderer("PYTHON"), _no_narrow)


def _no_narrow(kernel: KernelSource) -> None:
    assert not {u.dtype for u in kernel.program} & set(NARROW_INTS), kernel.program


def values(dtype: DType, n: int = 13) -> np.ndarray:
    """``n`` values spread over the whole range of ``dtype``, its extremes and -1 included."""
    rng = np.random.default_rng(n)
    x = rng.integers(int(dtype.min), int(dtype.max) + 1, n)
    x[:3] = [dtype.min, dtype.max, -1 if dtype.kind == "i" else 1]
    return x.astype(dtype.np)


OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "neg": lambda a, b: -a,
    "max": lambda a, b: a.maximum(b),
    "lt": lambda a, b: a < b,
    "eq": lambda a, b: a == b,
    "where": lambda a, b: (a < b).where(a, b),
    "and": lambda a, b: a & b,
    "xor": lambda a, b: a ^ b,
}


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("dtype", NARROW_INTS, ids=lambda d: d.name)
def test_narrow_arithmetic_wraps(name, dtype):
    a, b = values(dtype), values(dtype)[::-1].copy()
    with np.errstate(over="ignore"):
        expected = OPS[name](Tensor(a, device="PYTHON"), Tensor(b, device="PYTHON")).numpy()
    got = run_packed(OPS[name](Tensor(a, device="PYTHON"), Tensor(b, device="PYTHON")))
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == expected.dtype


@pytest.mark.parametrize(
    "src, dst",
    [
        (i8, u8),
        (u8, i8),
        (i16, i8),
        (u16, i16),
        (i32, i8),
        (i8, i32),
        (u8, bool_),
        (bool_, i16),
        (dtypes.float32, u8),
    ],
)
def test_narrow_casts(src, dst):
    x = values(src) if src.is_int else np.array([0, 1, 2.5, 255.0, 7.9], dtype=src.np)
    t = Tensor(x, device="PYTHON").cast(dst)
    np.testing.assert_array_equal(run_packed(t), t.numpy())


@pytest.mark.parametrize("n", [1, 5, 64, 1001])
def test_every_lane_of_a_word_is_written(n):
    x = (np.arange(n) * 37 % 256).astype(np.uint8)  # distinct neighbours in every word
    np.testing.assert_array_equal(run_packed(Tensor(x, device="PYTHON") + 1), x + 1)


def test_reduce_of_narrow_type_wraps():
    x = np.full(10, 100, np.int8)
    t = Tensor(x, device="PYTHON").max() + Tensor(x, device="PYTHON").cast(i16).sum().cast(i8)
    np.testing.assert_array_equal(run_packed(t), t.numpy())


def test_stores_become_and_then_or_on_words():
    t = Tensor(np.zeros(8, np.int8), device="PYTHON") + 1
    (step,) = t.schedule()
    program = generate(step.ast, WordRenderer("PYTHON")).program
    params = [u for u in program if u.op is Ops.PARAM]
    assert [(p.dtype, p.arg) for p in params] == [(dtypes.uint32, (0, 2)), (dtypes.uint32, (1, 2))]
    (store,) = [u for u in program if u.op is Ops.ATOMIC_OR]
    assert store.src[2].op is Ops.ATOMIC_AND  # the lane is cleared first
    assert not any(u.op is Ops.STORE for u in program)


@pytest.mark.parametrize(
    "dtype, value, expected",
    [(i8, 200, -56), (i8, -129, 127), (u8, 256 + 7, 7), (i16, 40000, -25536), (u16, -1, 65535)],
)
def test_wrap_narrow(dtype, value, expected):
    wide = dtypes.int32 if dtype.kind == "i" else dtypes.uint32
    x = UOp(Ops.CONST, wide, (), value % 2**32 if wide == dtypes.uint32 else value)
    from fusegrad.uop.pattern import graph_rewrite
    from fusegrad.uop.symbolic import SIMPLIFY

    assert graph_rewrite(wrap_narrow(x, dtype), SIMPLIFY).arg == expected
