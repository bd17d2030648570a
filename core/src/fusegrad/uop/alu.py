"""What each ALU op computes: one table, read by constant folding and by the PYTHON device.

Each row gives an op twice: on Python scalars (``scalar``: constant folding in
``uop/symbolic.py``, sizes in ``sym_eval``; the result is then wrapped to the op's dtype by
``exec_alu``) and on numpy arrays of the dtype's own precision (``array``: the PYTHON device,
``runtime/python.py``, the oracle of the conformance suite). Keeping both in one row keeps the
backend contract's rules in one place: C's truncating ``//`` and sign-of-dividend ``%``, ``x // 0
= x % 0 = 0`` on every device (codegen/lower.py), wrap-around integers, ``-x`` of a bool as ``not``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from fusegrad.dtype import DType, cast_scalar
from fusegrad.uop.opcodes import Ops


class AluOp(NamedTuple):
    """One ALU op: on Python scalars and on numpy arrays."""

    scalar: Callable
    array: Callable


def _c_div(a, b):
    """C's integer division: truncates towards zero."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _c_mod(a, b):
    """C's remainder: takes the sign of the dividend."""
    return a - b * _c_div(a, b)


def _safe_log2(x: float) -> float:
    if x < 0 or math.isnan(x):
        return math.nan
    return -math.inf if x == 0 else math.log2(x)


def _safe_sqrt(x: float) -> float:
    return math.nan if x < 0 or math.isnan(x) else math.sqrt(x)


def _safe_recip(x: float) -> float:
    return math.copysign(math.inf, x) if x == 0 else 1 / x


def _safe_exp2(x: float) -> float:
    try:
        return 2.0**x
    except OverflowError:
        return math.inf


def _safe_sin(x: float) -> float:
    return math.nan if math.isinf(x) else math.sin(x)


def _c_div_array(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C's truncating division on arrays, with x // 0 = 0."""
    safe = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(safe)
    return np.where(b == 0, np.zeros_like(q), np.where((a < 0) != (safe < 0), -q, q))


def _c_mod_array(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C's remainder on arrays, with x % 0 = 0."""
    rest = a - b * _c_div_array(a, b)
    return np.where(b == 0, np.zeros_like(rest), rest)


def _nan_max(a, b):
    """max that keeps a nan from either side, as np.maximum and the devices do (Python's max
    answers by position: max(1.0, nan) is 1.0, max(nan, 1.0) is nan)."""
    return a if a != a else b if b != b else max(a, b)


def _neg_array(a: np.ndarray) -> np.ndarray:
    return np.logical_not(a) if a.dtype == np.bool_ else np.negative(a)


ALU: dict[Ops, AluOp] = {
    Ops.NEG: AluOp(lambda a: -a if not isinstance(a, bool) else not a, _neg_array),
    Ops.RECIP: AluOp(_safe_recip, np.reciprocal),
    Ops.SQRT: AluOp(_safe_sqrt, np.sqrt),
    Ops.EXP2: AluOp(_safe_exp2, np.exp2),
    Ops.LOG2: AluOp(_safe_log2, np.log2),
    Ops.SIN: AluOp(_safe_sin, np.sin),
    Ops.ADD: AluOp(operator.add, np.add),
    Ops.MUL: AluOp(operator.mul, np.multiply),
    Ops.IDIV: AluOp(lambda a, b: _c_div(a, b) if b != 0 else 0, _c_div_array),  # x // 0 = 0
    Ops.MOD: AluOp(lambda a, b: _c_mod(a, b) if b != 0 else 0, _c_mod_array),  # x % 0 = 0
    Ops.MAX: AluOp(_nan_max, np.maximum),
    Ops.CMPLT: AluOp(operator.lt, np.less),
    Ops.CMPNE: AluOp(operator.ne, np.not_equal),
    Ops.AND: AluOp(operator.and_, np.bitwise_and),
    Ops.OR: AluOp(operator.or_, np.bitwise_or),
    Ops.XOR: AluOp(operator.xor, np.bitwise_xor),
    Ops.SHL: AluOp(lambda a, b: a << b, np.left_shift),
    Ops.SHR: AluOp(lambda a, b: a >> b, np.right_shift),
    Ops.WHERE: AluOp(lambda c, a, b: a if c else b, np.where),
    Ops.MULACC: AluOp(lambda a, b, c: a * b + c, lambda a, b, c: a * b + c),
}

#: the columns of ``ALU`` as plain dicts, for the hot paths (one lookup, no attribute access)
SCALAR: dict[Ops, Callable] = {op: row.scalar for op, row in ALU.items()}
ARRAY: dict[Ops, Callable] = {op: row.array for op, row in ALU.items()}


def exec_alu(op: Ops, dtype: DType, args: tuple) -> bool | int | float:
    """Evaluate one ALU op on Python scalars, with the result wrapped to ``dtype``."""
    return cast_scalar(SCALAR[op](*args), dtype)
