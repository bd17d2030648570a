"""The SIMPLIFY rules, each a before/after pair, and constant folding with C semantics."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fusegrad import dtypes
from fusegrad.uop.ops import Ops, UOp, Variable
from fusegrad.uop.pattern import graph_rewrite
from fusegrad.uop.symbolic import SIMPLIFY, exec_alu

f32, f64, i8, u8, i32, i64, bool_ = (
    dtypes.float32,
    dtypes.float64,
    dtypes.int8,
    dtypes.uint8,
    dtypes.int32,
    dtypes.int64,
    dtypes.bool,
)


def var(name: str, size: int, dtype=i32) -> UOp:
    """An integer in ``0..size-1`` (a loop variable)."""
    return UOp(Ops.RANGE, dtype, (UOp.const(dtype, size),), (name, "reduce"))


def c(value, dtype=i32) -> UOp:
    return UOp.const(dtype, value)


def fvar(name: str) -> UOp:
    """A float value of unknown bounds."""
    return UOp(Ops.LOAD, f32, (UOp(Ops.PARAM, f32, (), (0, 4)),), name)


x, y = var("x", 100), var("y", 4)  # x in [0, 99], y in [0, 3]
b = UOp(Ops.LOAD, bool_, (UOp(Ops.PARAM, bool_, (), (0, 4)),), "b")
fx = fvar("fx")
neg = UOp(Ops.LOAD, i32, (UOp(Ops.PARAM, i32, (), (1, 4)),), "n")  # an int of unknown sign


def simplify(u: UOp) -> UOp:
    return graph_rewrite(u, SIMPLIFY)


RULES = [  # (before, after)
    (x + 0, x),  # x + 0 -> x
    (0 + x, x),  # commutes
    (fx + 0.0, fx),
    (x * 1, x),  # x * 1 -> x
    (1 * x, x),
    (fx * 1.0, fx),
    (x * 0, c(0)),  # x * 0 -> 0 for ints
    (fx * 0.0, fx * 0.0),  # but not for floats (nan * 0 is nan)
    (x // 1, x),  # x // 1 -> x
    (x % 1, c(0)),  # x % 1 -> 0
    ((x + 2) + 3, x + 5),  # (x + a) + b -> x + (a + b)
    ((x * 2) * 3, x * 6),  # (x * a) * b -> x * (a * b)
    ((x + 2) * 3, x * 3 + 6),  # (x + a) * b -> x*b + a*b
    ((x + y) * 3, x * 3 + y * 3),  # (x + y) * b -> x*b + y*b: index math as a sum of terms
    (x // 100, c(0)),  # 0 <= x < c: x // c -> 0
    (x % 100, x),  # 0 <= x < c: x % c -> x
    (x % 200, x),
    ((x * 4 + y) // 4, x),  # (a*c + b) // c -> a, when 0 <= b < c
    ((x * 4 + y) % 4, y),  # (a*c + b) % c -> b
    ((x * 8 + y) // 4, x * 2),  # c divides the coefficient
    ((x * 8 + y * 4) % 8, (y % 2) * 4),  # the divisible term drops out
    ((x * 4 + y + 4) // 4, x + 1),
    ((x // 4) // 3, x // 12),  # (a // b) // c -> a // (b*c)
    ((x % 12) % 4, x % 4),  # (a % (k*c)) % c -> a % c
    ((x // 7) * 7 + x % 7, x),  # (x//c)*c + x%c -> x
    (x % 7 + (x // 7) * 7, x),
    (x.lt(100), c(True, bool_)),  # decided by bounds
    (x.lt(0), c(False, bool_)),
    (x.lt(50), x.lt(50)),  # undecided: kept
    ((x + 1).lt(1), c(False, bool_)),  # 1 <= x + 1
    (c(True, bool_).where(x, y), x),  # True ? a : b -> a
    (c(False, bool_).where(x, y), y),  # False ? a : b -> b
    (b & True, b),  # x & True -> x
    (b & False, c(False, bool_)),  # x & False -> False
    (((x * 4 + y) // 4 + 0) * 1, x),  # rules compose
    ((x * 4 + y) // 8, x // 2),  # a*d + b with 0 <= b < d, d | c: (a*d + b) // c -> a // (c/d)
    ((x * 4 + y) % 8, (x % 2) * 4 + y),  # and % c -> (a % (c/d))*d + b
    (((x * 4 + y) // 8) * 2 + x % 2, x),  # which lets a pool's y//2*2 + y%2 recombine
    ((x // 7) * 7 + y * 100 + x % 7, y * 100 + x),  # the pair need not be next to each other
]


@pytest.mark.parametrize("before, after", RULES, ids=[str(i) for i in range(len(RULES))])
def test_rule(before, after):
    assert simplify(before) is after


@pytest.mark.parametrize(
    "before",
    [
        neg // 4,  # truncating division of a possibly negative value: kept
        neg % 4,
        (neg * 4 + y) // 4,
        x // 7,
        x % 7,
        (x + y) // 4,  # neither term divisible: kept
        (x * 4 + y + 1) // 8,  # the rest may reach 4: kept
    ],
)
def test_rules_that_must_not_fire(before):
    assert simplify(before) is before


def test_simplified_graph_is_a_fixed_point():
    once = simplify(((x * 12 + y * 3) // 3) % 4 + x * 0)
    assert simplify(once) is once


# ---- constant folding ----------------------------------------------------------------------------

FOLDS = [  # (expression on constants, expected constant)
    (c(2) + c(3), c(5)),
    ((c(2) + c(3)) * c(4), c(20)),
    (c(7) // c(2), c(3)),
    (c(-7) // c(2), c(-3)),  # C truncates towards zero (Python gives -4)
    (c(7) // c(-2), c(-3)),
    (c(-7) // c(-2), c(3)),
    (c(7) % c(3), c(1)),
    (c(-7) % c(3), c(-1)),  # C: the sign of the dividend (Python gives 2)
    (c(7) % c(-3), c(1)),
    (c(-7) % c(-3), c(-1)),
    (c(127, i8) + c(1, i8), c(-128, i8)),  # wraps like C
    (c(250, u8) + c(10, u8), c(4, u8)),
    (c(2**30) * c(4), c(0)),
    (c(2**31 - 1) + c(1), c(-(2**31))),
    (c(2**62, i64) + c(2**62, i64), c(-(2**63), i64)),
    (-c(-128, i8), c(-128, i8)),
    (c(1.5, f32) + c(2.25, f32), c(3.75, f32)),
    (c(3).lt(c(5)), c(True, bool_)),
    (c(5).ne(c(5)), c(False, bool_)),
    (UOp(Ops.MAX, i32, (c(-3), c(2))), c(2)),
    (c(True, bool_).where(c(1), c(2)), c(1)),
    (UOp(Ops.RECIP, f32, (c(0.0, f32),)), c(math.inf, f32)),
    (UOp(Ops.SQRT, f32, (c(4.0, f32),)), c(2.0, f32)),
    (UOp(Ops.EXP2, f32, (c(3.0, f32),)), c(8.0, f32)),
    (UOp(Ops.LOG2, f32, (c(0.0, f32),)), c(-math.inf, f32)),
    (c(6) & c(3), c(2)),
    (c(6) | c(3), c(7)),
    (UOp(Ops.XOR, i32, (c(6), c(3))), c(5)),
    (UOp(Ops.SHL, i8, (c(1, i8), c(7, i8))), c(-128, i8)),
    (c(3.7, f32).cast(i32), c(3)),
    (c(-3.7, f32).cast(i32), c(-3)),  # casts truncate
    (c(300).cast(u8), c(44, u8)),
    (c(-1).cast(u8), c(255, u8)),
    (c(2).cast(bool_), c(True, bool_)),
    (c(True, bool_).cast(f32), c(1.0, f32)),
]


@pytest.mark.parametrize("before, after", FOLDS, ids=[str(i) for i in range(len(FOLDS))])
def test_constant_folding(before, after):
    assert simplify(before) is after


@pytest.mark.parametrize(
    "before",
    [
        UOp(Ops.IDIV, f32, (c(7.0, f32), c(2.0, f32))),  # float IDIV/MOD are not folded
        UOp(Ops.MOD, f32, (c(7.0, f32), c(2.0, f32))),
        c(1.0, f32).cast(dtypes.bfloat16),  # no host bfloat16 rounding
    ],
)
def test_not_folded(before):
    assert simplify(before) is before


def test_sqrt_of_negative_folds_to_nan():
    out = simplify(UOp(Ops.SQRT, f32, (c(-1.0, f32),)))
    assert out.op is Ops.CONST and math.isnan(out.arg)


@pytest.mark.parametrize(
    "op, dtype, args, expected",
    [
        (Ops.IDIV, i32, (-9, 4), -2),
        (Ops.MOD, i32, (-9, 4), -1),
        (Ops.IDIV, i32, (5, 0), 0),  # defined as 0 rather than a trap
        (Ops.ADD, u8, (255, 1), 0),
        (Ops.MUL, i8, (64, 2), -128),
        (Ops.NEG, bool_, (True,), False),
        (Ops.ADD, f32, (0.5, 0.25), 0.75),
    ],
)
def test_exec_alu(op, dtype, args, expected):
    out = exec_alu(op, dtype, args)
    assert out == expected and type(out) is type(expected)


def test_split_below_matches_c_division_everywhere():
    """(a*d + b) // c and % c over every value of two loop variables, against Python's."""
    a, r = var("a", 30), var("r", 6)
    for expr, fn in [
        ((a * 6 + r) // 12, lambda av, rv: (av * 6 + rv) // 12),
        ((a * 6 + r) % 12, lambda av, rv: (av * 6 + rv) % 12),
        ((a * 12 + r + 6 * a) // 36, lambda av, rv: (av * 18 + rv) // 36),
    ]:
        simple = simplify(expr)
        for av in range(30):
            for rv in range(6):
                assert _evaluate(simple, {a: av, r: rv}) == fn(av, rv)


def test_a_flipped_window_divides_without_division():
    """i*9 + 8 - (j*3 + k), j and k below 3 (a flipped 3x3 window's tap): divided by 9 it is
    i, and % 9 is the rest, though two of its terms are negative; the weight copy of a
    convolution's input gradient divided every element by 9, 3 and its channel count."""
    i, j, k = var("i", 40), var("j", 3), var("k", 3)
    x = i * 9 + (-j) * 3 + 6 + (-k) + 2
    quotient, rest = simplify(x // 9), simplify(x % 9)
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in quotient.toposort())
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in rest.toposort())
    for iv in range(40):
        for jv in range(3):
            for kv in range(3):
                env, value = {i: iv, j: jv, k: kv}, iv * 9 + 8 - jv * 3 - kv
                assert _evaluate(quotient, env) == value // 9 and _evaluate(rest, env) == value % 9
    y = i * 9 + (-j) * 5 + 10  # (the rest, 0..10, reaches past 9: not split, still exact)
    for iv in range(40):
        for jv in range(3):
            value = iv * 9 - jv * 5 + 10
            env = {i: iv, j: jv}
            assert _evaluate(simplify(y // 9), env) == value // 9
            assert _evaluate(simplify(y % 9), env) == value % 9


def _evaluate(u: UOp, env: dict) -> int:
    if u in env:
        return env[u]
    if u.op is Ops.CONST:
        return u.arg
    return exec_alu(u.op, u.dtype, [_evaluate(s, env) for s in u.src])


def test_bounds_of_a_value_that_may_wrap_are_its_dtypes_range():
    a = Variable("a", 0, 255).cast(dtypes.uint8)
    assert (a * 100).bounds == (0, 255)  # 0..25500 does not fit: any uint8 may come out
    assert (a % 10).bounds == (0, 9)
    assert (Variable("i", 0, 10) * 100).bounds == (0, 1000)  # index math: no wrap-around


@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_unsigned_and_narrow_arithmetic_is_not_regrouped(device):
    """Regrouping (a*100)//10 into a*10 is only right without wrap-around: uint8 and int8 wrap."""
    from fusegrad import Tensor

    u = np.arange(0, 256, 17, dtype=np.uint8)
    x = Tensor(u, device=device)
    assert ((x * 100) // 10).tolist() == ((u * np.uint8(100)) // 10).tolist()
    assert ((x * 100) % 7).tolist() == ((u * np.uint8(100)) % 7).tolist()
    assert (-x // 3).tolist() == ((-u) // 3).tolist()
    s = np.arange(-127, 128, 9, dtype=np.int8)
    assert ((Tensor(s, device=device) * 3) // 5).tolist() == ((s * np.int8(3)) // 5).tolist()


def test_division_by_a_variable_simplifies_and_matches_c_everywhere():
    """A view through a reshape of variable size (a KV cache of ``n`` rows) divides by ``n`` or
    ``n*64``: ``(a*n + b) // n -> a`` and ``% n -> b`` when ``b`` is a loop counting to ``n`` (or
    ``b*64 + r`` with ``r < 64``), checked against Python for every value; what is not provably
    below the divisor keeps its division."""
    n = Variable("n", 1, 6)
    h, j, r = var("h", 3), UOp(Ops.RANGE, i32, (n,), ("j", "reduce")), var("r", 4)
    cases = [
        ((h * (n * 4) + j * 4 + r) // (n * 4), lambda hv, jv, rv, nv: hv),
        ((h * n + j) % n, lambda hv, jv, rv, nv: jv),
        ((h * n + j) // n, lambda hv, jv, rv, nv: hv),
        ((h * (4 * n) + r * n + j) // (n * 4), lambda hv, jv, rv, nv: hv),
        ((h * (4 * n) + r * n + j) % n, lambda hv, jv, rv, nv: jv),
    ]
    for expr, want in cases:
        simple = simplify(expr)
        assert not {u.op for u in simple.toposort()} & {Ops.IDIV, Ops.MOD}, expr
        for nv in range(1, 7):
            for hv in range(3):
                for jv in range(nv):
                    for rv in range(4):
                        env = {n: nv, h: hv, j: jv, r: rv}
                        assert _evaluate(simple, env) == want(hv, jv, rv, nv)
    kept = simplify((h * n + r) // n)  # r < 4 is not below every n
    assert Ops.IDIV in {u.op for u in kept.toposort()}
    for nv in range(1, 7):
        for hv in range(3):
            for rv in range(4):
                assert _evaluate(kept, {n: nv, h: hv, r: rv}) == (hv * nv + rv) // nv
