"""Constant folding and the algebra that simplifies index arithmetic.

Index expressions come from composing movement ops (a reshape turns an index into ``//`` and
``%`` of it), so most rules here undo that: ``(x//c)*c + x%c -> x``, ``x%c -> x`` when
``0 <= x < c``. Rules that need ``x >= 0`` check the value bounds (``vmin``/``vmax``).
"""

from __future__ import annotations

import math

from fusegrad.dtype import DType, dtypes
from fusegrad.uop.alu import exec_alu
from fusegrad.uop.ops import GroupOp, Ops, UOp, wraps
from fusegrad.uop.pattern import PatternMatcher, UPat


def fold_constants(op: UOp) -> UOp | None:
    """Evaluate an ALU op whose inputs are all constants."""
    if not all(s.op is Ops.CONST for s in op.src):
        return None
    if op.dtype.is_float and op.op in (Ops.IDIV, Ops.MOD):
        return None
    return UOp.const(op.dtype, exec_alu(op.op, op.dtype, tuple(s.arg for s in op.src)))


def fold_cast(c: UOp, x: UOp) -> UOp | None:
    """cast(const) -> const of the new type."""
    if c.dtype == dtypes.bfloat16:
        return None
    return UOp.const(c.dtype, x.arg)


# ---- sums of terms
# --------------------------------------------------------------------------------


def terms(x: UOp) -> list[UOp]:
    """The summands of a chain of ADDs."""
    return terms(x.src[0]) + terms(x.src[1]) if x.op is Ops.ADD else [x]


def coefficient(term: UOp) -> int:
    """The constant factor of ``term`` (``5`` for ``i*5``, the value for a constant)."""
    if term.op is Ops.CONST:
        return term.arg
    if term.op is Ops.MUL and term.src[1].op is Ops.CONST:
        return term.src[1].arg
    return 1


def stride_along(index: UOp, loop: UOp) -> int | None:
    """Elements ``index`` moves per step of ``loop``: its terms ``loop`` and ``loop * c``; 0
    when it does not move; None when it moves otherwise (a division, a product of loops)."""
    stride = 0
    for t in terms(index):
        if t is loop or (t.op is Ops.MUL and t.src[0] is loop and t.src[1].op is Ops.CONST):
            stride += coefficient(t)
        elif loop in t.toposort():
            return None
    return stride


def divide_term(term: UOp, c: int) -> UOp:
    """``term / c`` for a term whose coefficient ``c`` divides."""
    if term.op is Ops.CONST:
        return UOp.const(term.dtype, term.arg // c)
    if term.op is Ops.MUL and term.src[1].op is Ops.CONST:
        k = term.src[1].arg // c
        return term.src[0] if k == 1 else term.src[0] * k
    return term  # c == 1


def add_all(xs: list[UOp], dtype: DType) -> UOp:
    out = xs[0] if xs else UOp.const(dtype, 0)
    for x in xs[1:]:
        out = out + x
    return out


def split_coefficients(x: UOp, c: int) -> tuple[list[UOp], list[UOp]] | None:
    """Write each term ``t*k`` of ``x`` as ``t*(k//c)*c + t*(k%c)``: the quotient and remainder
    parts.

    Only for sums of nonnegative terms with nonnegative coefficients, where // and % behave alike
    in C and in mathematics.
    """
    parts = terms(x)
    if any(t.vmin < 0 or coefficient(t) < 0 for t in parts):
        return None
    quotients, remainders = [], []
    for t in parts:
        k = coefficient(t)
        base = UOp.const(t.dtype, 1) if t.op is Ops.CONST else divide_term(t, k) if k != 1 else t
        if k // c:
            quotients.append(
                base * (k // c) if t.op is not Ops.CONST else UOp.const(t.dtype, k // c)
            )
        if k % c:
            remainders.append(
                base * (k % c) if t.op is not Ops.CONST else UOp.const(t.dtype, k % c)
            )
    return quotients, remainders


def split_below(x: UOp, c: int) -> tuple[int, UOp, UOp] | None:
    """``x = a*d + b`` with ``d`` a divisor of ``c`` shared by some terms' coefficients and
    ``0 <= b < d``: then ``x // c = a // (c/d)`` and ``x % c = (a % (c/d))*d + b``.
    (A position ``y*20 + x`` in rows of 20, divided by 40, is ``y // 2``.)"""
    parts = terms(x)
    if any(t.vmin < 0 or coefficient(t) < 0 for t in parts):
        return None
    for d in sorted(
        {math.gcd(c, coefficient(t)) for t in parts if t.op is not Ops.CONST}, reverse=True
    ):
        if not 1 < d < c:
            continue
        big = [t for t in parts if coefficient(t) % d == 0]
        small = [t for t in parts if coefficient(t) % d]
        rest = add_all(small, x.dtype)
        if big and rest.vmax < d:
            return (
                d,
                add_all(
                    [
                        divide_term(t, d)
                        if t.op is not Ops.CONST
                        else UOp.const(t.dtype, t.arg // d)
                        for t in big
                    ],
                    x.dtype,
                ),
                rest,
            )
    return None


def split_multiples(x: UOp, c: int) -> tuple[UOp, UOp] | None:
    """``x = q*c + r`` with ``q`` the terms whose coefficients ``c`` divides and ``0 <= r < c``
    the rest, for a nonnegative ``x`` whose terms may be negative: then ``x // c = q`` and
    ``x % c = r``. (A flipped window's position, ``i*9 + 8 - (j*3 + k)`` with ``j, k < 3``,
    divided by 9 is ``i``: ``split_coefficients`` refuses the negative terms.)"""
    parts = terms(x)
    big = [t for t in parts if t.op is not Ops.CONST and coefficient(t) % c == 0]
    small = [t for t in parts if t.op is not Ops.CONST and coefficient(t) % c]
    whole, left = divmod(sum(t.arg for t in parts if t.op is Ops.CONST), c)
    if left:
        small.append(UOp.const(x.dtype, left))
    rest = add_all(small, x.dtype)
    if not big or rest.vmin < 0 or rest.vmax >= c:
        return None
    quotient = [divide_term(t, c) for t in big] + ([UOp.const(x.dtype, whole)] if whole else [])
    return add_all(quotient, x.dtype), rest


def may_wrap(x: UOp) -> bool:
    """Whether ``x``, or one of its summands, may have wrapped around its (unsigned or narrow)
    dtype:
    then it is not the sum and products it is written as, and regrouping them would change it
    (uint8 ``(a*100)//10`` is not ``a*10``).
    The bounds of such a value are its dtype's whole range."""
    return wraps(x.dtype) and any(t.bounds == (t.dtype.min, t.dtype.max) for t in (x, *terms(x)))


def simplify_div(x: UOp, c: UOp) -> UOp | None:
    """(a*(q*c + r) + b) // c -> a*q + (a*r + b) // c, for nonnegative terms; 0 when x < c."""
    if c.arg <= 0 or x.vmin < 0 or may_wrap(x):
        return None
    if x.vmax < c.arg:
        return UOp.const(x.dtype, 0)
    if x.op is Ops.IDIV and x.src[1].op is Ops.CONST and x.src[1].arg > 0:
        return x.src[0] // (x.src[1].arg * c.arg)  # (a // b) // c -> a // (b*c)
    split = split_coefficients(x, c.arg)
    if split is None or not split[0]:
        if (below := split_below(x, c.arg)) is not None:
            d, a, _ = below
            return a // (c.arg // d)
        if split is None and (multiples := split_multiples(x, c.arg)) is not None:
            return multiples[0]
        return None
    quotients, remainders = split
    quotient = add_all(quotients, x.dtype)
    if not remainders:
        return quotient
    rest = add_all(remainders, x.dtype)
    return quotient if rest.vmax < c.arg else quotient + rest // c.arg


def simplify_mod(x: UOp, c: UOp) -> UOp | None:
    """(a*(q*c + r) + b) % c -> (a*r + b) % c, for nonnegative terms; x when 0 <= x < c."""
    if c.arg <= 0 or x.vmin < 0 or may_wrap(x):
        return None
    if x.vmax < c.arg:
        return x
    if x.op is Ops.MOD and x.src[1].op is Ops.CONST and x.src[1].arg % c.arg == 0:
        return x.src[0] % c.arg  # (a % (k*c)) % c -> a % c
    split = split_coefficients(x, c.arg)
    if split is None or not split[0]:
        if (below := split_below(x, c.arg)) is not None:
            d, a, b = below
            return (a % (c.arg // d)) * d + b
        if split is None and (multiples := split_multiples(x, c.arg)) is not None:
            return multiples[1]
        return None
    rest = add_all(split[1], x.dtype)
    return rest if rest.vmax < c.arg else rest % c.arg


def _factors(t: UOp) -> tuple[int, list[UOp]]:
    """``t`` as a product: its constant factor and the other factors (``(i*n)*64``: 64, [i, n])."""
    if t.op is Ops.CONST:
        return t.arg, []
    if t.op is Ops.MUL:
        (a, fa), (b, fb) = _factors(t.src[0]), _factors(t.src[1])
        return a * b, fa + fb
    return 1, [t]


def _exact_quotient(t: UOp, c: UOp) -> UOp | None:
    """``t / c`` when ``c``'s factors are among ``t``'s (``(i*n)*64 / (n*64)`` is ``i``)."""
    (kt, ft), (kc, fc) = _factors(t), _factors(c)
    if kc <= 0 or kt % kc:
        return None
    for f in fc:
        if f not in ft:
            return None
        ft.remove(f)
    return multiply_all(ft, kt // kc, t.dtype)


def multiply_all(factors: list[UOp], k: int, dtype: DType) -> UOp:
    """The product of ``factors`` and the constant ``k``."""
    if not factors:
        return UOp.const(dtype, k)
    out = factors[0]
    for f in factors[1:]:
        out = out * f
    return out * k if k != 1 else out


def _below(x: UOp, c: UOp) -> bool:
    """Whether ``0 <= x < c`` for a ``c = n*k`` holding a variable ``n``: by their bounds, or as
    ``a*k + b`` with ``0 <= b < k`` and a loop ``a`` that counts to ``n``, or as ``a*n + b`` with
    ``a < k`` and ``0 <= b < n``."""
    if x.vmin < 0:
        return False
    if x.vmax < c.vmin:
        return True
    k, factors = _factors(c)
    if len(factors) != 1 or k <= 0:
        return False
    big = [t for t in terms(x) if t.op is not Ops.CONST and coefficient(t) % k == 0]
    small = [t for t in terms(x) if t.op is Ops.CONST or coefficient(t) % k]
    b = add_all(small, x.dtype)
    n = factors[0]
    if big and 0 <= b.vmin and b.vmax < k:  # x = a*k + b, a < n
        a = add_all([divide_term(t, k) for t in big], x.dtype)
        if a.vmax < n.vmin or (a.op is Ops.RANGE and a.src[0] == n):
            return True
    split = _split_by(x, n)  # x = a*n + b with 0 <= b < n, a < k
    if split is None or not split[0] or k == 1:
        return False
    a = add_all(split[0], x.dtype)
    return 0 <= a.vmin and a.vmax < k and _below(split[1], n)


def _split_by(x: UOp, c: UOp) -> tuple[list[UOp], UOp] | None:
    """``x``'s terms divided by a ``c`` holding a variable where they divide exactly, and the sum
    of the others; None unless every term is nonnegative and ``c`` positive."""
    if c.op is Ops.CONST or c.vmin <= 0 or x.vmin < 0 or may_wrap(x):
        return None
    parts = terms(x)
    if any(t.vmin < 0 for t in parts):
        return None
    quotients, rest = [], []
    for t in parts:
        q = _exact_quotient(t, c)
        if q is None:
            rest.append(t)
        else:
            quotients.append(q)
    return quotients, add_all(rest, x.dtype)


def _divided(x: UOp, c: UOp) -> tuple[UOp, UOp] | None:
    """``x`` as ``a*c + b`` with ``0 <= b < c``, for a divisor holding a variable: ``(a, b)``."""
    if (split := _split_by(x, c)) is None or not _below(split[1], c):
        return None
    return add_all(split[0], x.dtype), split[1]


def simplify_symbolic_div(x: UOp, c: UOp) -> UOp | None:
    """``(a*c + b) // c -> a`` for a divisor holding a variable (a KV cache's length) when
    ``0 <= b < c``: a view through a reshape of variable size divides by it."""
    return None if (parts := _divided(x, c)) is None else parts[0]


def simplify_symbolic_mod(x: UOp, c: UOp) -> UOp | None:
    """``(a*c + b) % c -> b`` for a divisor holding a variable, when ``0 <= b < c``."""
    return None if (parts := _divided(x, c)) is None else parts[1]


def recombine_divmod(x: UOp, c: UOp, y: UOp) -> UOp | None:
    """(x // c) * c + x % c -> x, the identity a reshape round trip leaves behind."""
    return x if y.op is Ops.MOD and y.src[0] is x and y.src[1] is c else None


def recombine_in_sum(x: UOp) -> UOp | None:
    """``... + (a // c) * (c*k) + ... + (a % c) * k + ...`` -> ``... + a*k + ...``: the identity
    a reshape round trip leaves behind, also when the two terms are not next to each other in
    the chain of additions and both are scaled (two reduced axes run as one loop, ``m // 128``
    and ``m % 128``, in rows 1024 long: ``m * 1024``)."""
    parts = terms(x)
    mods: dict[tuple[UOp, int], tuple[UOp, int]] = {}
    for t in parts:
        m, k = (t.src[0], t.src[1].arg) if t.op is Ops.MUL and t.src[1].op is Ops.CONST else (t, 1)
        if m.op is Ops.MOD and m.src[1].op is Ops.CONST:
            mods[(m.src[0], m.src[1].arg)] = (t, k)
    if not mods:
        return None
    for t in parts:
        if t.op is not Ops.MUL or t.src[1].op is not Ops.CONST or t.src[0].op is not Ops.IDIV:
            continue
        a, c = t.src[0].src
        if c.op is not Ops.CONST or c.arg <= 0 or t.src[1].arg % c.arg:
            continue
        k = t.src[1].arg // c.arg
        if (found := mods.get((a, c.arg))) is not None and found[1] == k:
            rest = [p for p in parts if p is not t and p is not found[0]]
            return add_all([*rest, a * k if k != 1 else a], x.dtype)
    return None


def fold_compare(x: UOp, c: UOp) -> UOp | None:
    """x < c is decided when the bounds of x lie on one side of c."""
    if x.dtype.is_float:
        return None
    if x.vmax < c.arg:
        return UOp.const(dtypes.bool, True)
    if x.vmin >= c.arg:
        return UOp.const(dtypes.bool, False)
    return None


def fold_max(x: UOp, c: UOp) -> UOp | None:
    """max(x, c) is x or c when the bounds of x lie on one side of c (a clamp that cannot
    bite: a pad's source index inside the stretch that reads it, codegen/split.py)."""
    if x.vmin >= c.arg:
        return x
    if x.vmax <= c.arg:
        return c
    return None


_int = tuple(d for d in dtypes.all() if d.is_int)
_ix = UPat.var("x", dtype=_int)

SIMPLIFY = PatternMatcher(
    [
        (UPat(GroupOp.ALU, name="op"), fold_constants),
        (UPat(Ops.CAST, src=UPat.cvar("x"), name="c"), fold_cast),
        (UPat.var("x") + 0, lambda x: x),  # x + 0 -> x
        (UPat.var("x") * 1, lambda x: x),  # x * 1 -> x
        (_ix * 0, lambda x: UOp.const(x.dtype, 0)),  # x * 0 -> 0 (ints)
        (_ix // 1, lambda x: x),  # x // 1 -> x
        (_ix % 1, lambda x: UOp.const(x.dtype, 0)),  # x % 1 -> 0
        ((_ix + UPat.cvar("a")) + UPat.cvar("b"), lambda x, a, b: x + (a.arg + b.arg)),  # (x+a)+b
        ((_ix * UPat.cvar("a")) * UPat.cvar("b"), lambda x, a, b: x * (a.arg * b.arg)),  # (x*a)*b
        (
            (_ix + UPat.cvar("a")) * UPat.cvar("b"),
            lambda x, a, b: x * b.arg + a.arg * b.arg,
        ),  # distribute
        (
            (_ix + UPat.var("y", dtype=_int)) * UPat.cvar("b"),
            lambda x, y, b: x * b.arg + y * b.arg,
        ),  # (x+y)*b
        (_ix // UPat.cvar("c"), simplify_div),
        (_ix % UPat.cvar("c"), simplify_mod),
        (UPat.cvar("c") * _ix, lambda c, x: x * c.arg if x.op is not Ops.CONST else None),
        (_ix * (UPat.var("y", dtype=_int) * UPat.cvar("c")), lambda x, y, c: (x * y) * c.arg),
        (_ix // UPat.var("c", dtype=_int), simplify_symbolic_div),
        (_ix % UPat.var("c", dtype=_int), simplify_symbolic_mod),
        ((_ix // UPat.cvar("c")) * UPat.cvar("c") + UPat.var("y"), recombine_divmod),
        (UPat(Ops.ADD, dtype=_int, name="x"), recombine_in_sum),
        (UPat(Ops.CMPLT, src=(_ix, UPat.cvar("c"))), fold_compare),  # decided by bounds
        (UPat(Ops.MAX, src=(_ix, UPat.cvar("c"))), fold_max),  # decided by bounds
        (UPat(Ops.NEG, src=(UPat(Ops.NEG, src=(_ix,)),)), lambda x: x),  # -(-x) -> x (ints)
        (
            UPat(Ops.WHERE, src=(UPat.const(True), UPat.var("a"), UPat.var())),
            lambda a: a,
        ),  # True ? a : b
        (
            UPat(Ops.WHERE, src=(UPat.const(False), UPat.var(), UPat.var("b"))),
            lambda b: b,
        ),  # False ? a : b
        (UPat.var("x", dtypes.bool) & True, lambda x: x),  # x & True -> x
        (UPat.var("x", dtypes.bool) & False, lambda x: UOp.const(dtypes.bool, False)),  # x & False
    ]
)
