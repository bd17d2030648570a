"""A differential fuzzer: random small graphs run on a device, on the PYTHON oracle and in numpy.

    python -m fusegrad.testing.fuzz --device CPU --graphs 200 --seed 0

A program is a list of steps, each an op name, the names of its inputs and its arguments, so it
can be printed as Python code and shrunk (steps dropped or bypassed while it still fails). Every
op is a code template (``"{0}.exp()"``) evaluated against fusegrad tensors, which makes the printed
repro exactly what ran, and a numpy function computing the same in float64 or int64.

Ranges are kept safe so that every difference is a bug: each value carries an interval and, for
floats, how many binary fraction digits it needs (``frac``; None once a result is rounded). Ops
that could overflow their dtype are not generated; comparisons, float-to-int casts and
float-to-bool casts are only generated on exact values, where rounding cannot flip them. Exact
results must match bit for bit; rounded ones within a tolerance of the dtype.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusegrad.device import Device
from fusegrad.dtype import DType, dtypes
from fusegrad.errors import DTypeError, UnsupportedOp
from fusegrad.helpers import context
from fusegrad.tensor import Tensor, bounds
from fusegrad.testing.oracle import ORACLE, held_dtypes, make

#: Bits of mantissa (with the implicit one): a value is exact while |v| * 2**frac fits.
MANTISSA = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}
#: Relative tolerance of a rounded float result, scaled by the value's magnitude bound.
TOLERANCE = {"float16": 2e-2, "bfloat16": 8e-2, "float32": 1e-4, "float64": 1e-9}
FLOAT_BOUND = 1e4
#: How often a float input holds some nan, inf and -inf elements.
SPECIAL_RATE = 0.15
MAX_NUMEL = 256
#: Errors a device may raise for what it cannot do: the case is skipped, not a failure.
REFUSALS = (UnsupportedOp, DTypeError)


@dataclass(frozen=True)
class Meta:
    """What the generator knows of a value: shape, dtype, an interval holding it, exactness."""

    shape: tuple[int, ...]
    dtype: DType
    lo: float
    hi: float
    frac: int | None
    #: The loosest tolerance of the float dtypes the value was rounded in (0 if never rounded):
    #: a float16 result cast to float32 keeps float16's error.
    tol: float = 0.0
    #: Whether the value may hold nan or +-inf; ``lo`` and ``hi`` bound its finite elements.
    special: bool = False

    @property
    def exact(self) -> bool:
        """Whether every device must compute this value bit for bit."""
        if not self.dtype.is_float:
            return True
        if self.frac is None:
            return False
        return max(abs(self.lo), abs(self.hi)) * 2**self.frac <= 2 ** MANTISSA[self.dtype.name]


@dataclass(frozen=True)
class Step:
    """``name = OPS[op].template.format(*srcs, **args)``."""

    op: str
    srcs: tuple[str, ...]
    args: tuple[tuple[str, Any], ...] = ()


@dataclass
class Program:
    """Named inputs (numpy arrays with a fusegrad dtype) and the steps computing the output."""

    inputs: dict[str, tuple[np.ndarray, DType]] = field(default_factory=dict)
    steps: list[tuple[str, Step]] = field(default_factory=list)

    @property
    def output(self) -> str:
        return self.steps[-1][0] if self.steps else next(iter(self.inputs))


def fits(dtype: DType, lo: float, hi: float) -> bool:
    """Whether every value in [lo, hi] is representable without overflow in ``dtype``."""
    if dtype.is_float:
        return -FLOAT_BOUND <= lo and hi <= FLOAT_BOUND
    return float(dtype.min) <= lo and hi <= float(dtype.max)


def input_meta(array: np.ndarray, dtype: DType) -> Meta:
    """The meta of an input: its actual finite range, exact with two fraction digits for floats."""
    finite = array[np.isfinite(array)] if dtype.is_float else array
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    special = finite.size != array.size
    return Meta(array.shape, dtype, lo, hi, 2 if dtype.is_float else 0, float_tol(dtype), special)


def float_tol(dtype: DType) -> float:
    return TOLERANCE.get(dtype.name, 0.0)


# ---- the ops: a template, a numpy function, and the meta of the result --------------------


def hull(*values: float) -> tuple[float, float]:
    return min(values), max(values)


def keep(m: Meta, **_: Any) -> tuple[float, float, int | None]:
    return m.lo, m.hi, m.frac


def with_zero(m: Meta, **_: Any) -> tuple[float, float, int | None]:
    return min(m.lo, 0.0), max(m.hi, 0.0), m.frac


def rounded(lo: float, hi: float) -> tuple[float, float, None]:
    return lo, hi, None


def frac_sum(*ms: Meta) -> int | None:
    fracs = [m.frac for m in ms]
    return None if None in fracs else sum(f for f in fracs if f is not None)


def frac_max(*ms: Meta) -> int | None:
    fracs = [m.frac for m in ms]
    return None if None in fracs else max(f for f in fracs if f is not None)


def reduced_size(m: Meta, axis: tuple[int, ...]) -> int:
    return math.prod(m.shape[a] for a in axis)


def np_pad(x: np.ndarray, pad: tuple[tuple[int, int], ...]) -> np.ndarray:
    return np.pad(x, pad)


@dataclass(frozen=True)
class OpSpec:
    """One op: how fusegrad writes it, how numpy computes it, the interval of its result."""

    template: str
    numpy: Callable[..., Any]
    meta: Callable[..., tuple[float, float, int | None]]
    kind: str


def _mul_meta(a: Meta, b: Meta) -> tuple[float, float, int | None]:
    return (*hull(a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi), frac_sum(a, b))


def _matmul_meta(a: Meta, b: Meta) -> tuple[float, float, int | None]:
    lo, hi, frac = _mul_meta(a, b)
    k = a.shape[-1]
    return min(k * lo, 0.0), max(k * hi, 0.0), frac


def _sum_meta(m: Meta, axis: tuple[int, ...], keepdim: bool) -> tuple[float, float, int | None]:
    n = reduced_size(m, axis)
    return min(n * m.lo, 0.0), max(n * m.hi, 0.0), m.frac


def _floordiv_meta(a: Meta, b: Meta) -> tuple[float, float, int | None]:
    """|a // b| <= |a| for a whole b (x // 0 is 0 in fusegrad); -a for b = -1 may overflow."""
    bound = max(abs(a.lo), abs(a.hi))
    return (0.0 if a.lo >= 0 and b.lo >= 0 else -bound), bound, 0


def _mod_meta(a: Meta, b: Meta) -> tuple[float, float, int | None]:
    """a % b has the sign of b and |a % b| < |b| (x % 0 is 0 in fusegrad)."""
    bound = max(abs(b.lo), abs(b.hi))
    return (0.0 if b.lo >= 0 else -bound), (0.0 if b.hi <= 0 else bound), 0


def np_index(x: np.ndarray, key: str) -> np.ndarray:
    """``x[key]`` for a basic index written as in Python (``"1:3, ::-1, 0"``)."""
    return np.asarray(eval(f"x[{key}]", {}, {"x": x}))


def _take(x: np.ndarray, dim: int, idx: np.ndarray) -> np.ndarray:
    return np.take_along_axis(x, idx.astype(np.int64), dim)


def _m(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.matmul(x, y)


OPS: dict[str, OpSpec] = {
    "neg": OpSpec("(-{0})", np.negative, lambda m: (-m.hi, -m.lo, m.frac), "unary"),
    "relu": OpSpec("{0}.relu()", lambda x: np.maximum(x, 0), with_zero, "unary"),
    "abs": OpSpec("{0}.abs()", np.abs, lambda m: (0.0, max(-m.lo, m.hi), m.frac), "unary"),
    "exp": OpSpec("{0}.exp()", np.exp, lambda m: rounded(math.exp(m.lo), math.exp(m.hi)), "float"),
    "log": OpSpec(
        "({0} * {0} + 1).log()",
        lambda x: np.log(x * x + 1),
        lambda m: rounded(0.0, math.log1p(max(m.lo**2, m.hi**2))),
        "float",
    ),
    "sqrt": OpSpec(
        "({0} * {0} + 1).sqrt()",
        lambda x: np.sqrt(x * x + 1),
        lambda m: rounded(1.0, math.sqrt(1 + max(m.lo**2, m.hi**2))),
        "float",
    ),
    "add": OpSpec(
        "({0} + {1})", np.add, lambda a, b: (a.lo + b.lo, a.hi + b.hi, frac_max(a, b)), "binary"
    ),
    "sub": OpSpec(
        "({0} - {1})",
        np.subtract,
        lambda a, b: (a.lo - b.hi, a.hi - b.lo, frac_max(a, b)),
        "binary",
    ),
    "mul": OpSpec("({0} * {1})", np.multiply, _mul_meta, "binary"),
    "div": OpSpec(
        "({0} / ({1} * {1} + 1))",
        lambda a, b: a / (b * b + 1),
        lambda a, b: rounded(min(a.lo, 0.0), max(a.hi, 0.0)),
        "float_binary",
    ),
    # numpy's integer x // 0 and x % 0 are 0, as fusegrad's; its remainder has the divisor's sign
    "floordiv": OpSpec("({0} // {1})", np.floor_divide, _floordiv_meta, "int_binary"),
    "mod": OpSpec("({0} % {1})", np.remainder, _mod_meta, "int_binary"),
    "maximum": OpSpec(
        "{0}.maximum({1})",
        np.maximum,
        lambda a, b: (max(a.lo, b.lo), max(a.hi, b.hi), frac_max(a, b)),
        "binary",
    ),
    "minimum": OpSpec(
        "{0}.minimum({1})",
        np.minimum,
        lambda a, b: (min(a.lo, b.lo), min(a.hi, b.hi), frac_max(a, b)),
        "binary",
    ),
    "lt": OpSpec("({0} < {1})", np.less, lambda a, b: (0.0, 1.0, 0), "compare"),
    "eq": OpSpec("({0} == {1})", np.equal, lambda a, b: (0.0, 1.0, 0), "compare"),
    "where": OpSpec(
        "{0}.where({1}, {2})",
        np.where,
        lambda c, a, b: (*hull(a.lo, b.lo, a.hi, b.hi), frac_max(a, b)),
        "where",
    ),
    "cast": OpSpec("{0}.cast(dtypes.{to})", lambda x: x, keep, "cast"),
    "sum": OpSpec(
        "{0}.sum(axis={axis}, keepdim={keepdim})",
        lambda x, axis, keepdim: np.sum(x, axis=axis, keepdims=keepdim),
        _sum_meta,
        "reduce",
    ),
    "max": OpSpec(
        "{0}.max(axis={axis}, keepdim={keepdim})",
        lambda x, axis, keepdim: np.max(x, axis=axis, keepdims=keepdim),
        keep,
        "reduce",
    ),
    "mean": OpSpec(
        "{0}.mean(axis={axis}, keepdim={keepdim})",
        lambda x, axis, keepdim: np.mean(x, axis=axis, keepdims=keepdim),
        lambda m, axis, keepdim: rounded(m.lo, m.hi),
        "float_reduce",
    ),
    "reshape": OpSpec("{0}.reshape({shape})", lambda x, shape: x.reshape(shape), keep, "move"),
    "permute": OpSpec("{0}.permute({order})", lambda x, order: x.transpose(order), keep, "move"),
    "expand": OpSpec(
        "{0}.expand({shape})", lambda x, shape: np.broadcast_to(x, shape), keep, "move"
    ),
    "pad": OpSpec("{0}.pad({pad})", np_pad, with_zero, "move"),
    "shrink": OpSpec(
        "{0}.shrink({bounds})",
        lambda x, bounds: x[tuple(slice(a, b) for a, b in bounds)],
        keep,
        "move",
    ),
    "flip": OpSpec("{0}.flip({axis})", lambda x, axis: np.flip(x, axis), keep, "move"),
    "matmul": OpSpec("({0} @ {1})", _m, _matmul_meta, "matmul"),
    "gather": OpSpec(
        "{0}.gather({dim}, {1})",
        lambda x, i, dim: _take(x, dim, i),
        lambda x, i, dim: (x.lo, x.hi, x.frac),
        "gather",
    ),
    "index": OpSpec(
        "{0}[{1}]",
        lambda x, i: x[i.astype(np.int64)],
        lambda x, i: (x.lo, x.hi, x.frac),
        "index",
    ),
    "slice": OpSpec("{0}[{key}]", np_index, keep, "move"),
}


def const_meta(m: Meta, c: float) -> Meta:
    """A Python scalar operand, as the meta of a tensor of ``m``'s dtype holding it."""
    return Meta((), m.dtype, float(c), float(c), 2 if m.dtype.is_float else 0)


def with_scalar(name: str, symbol: str) -> OpSpec:
    """``x <symbol> c`` for a Python scalar ``c`` of x's kind: constants take other paths
    through the compiler (folding, literals in the kernel) than tensors do."""
    spec = OPS[name]
    return OpSpec(
        f"({{0}} {symbol} {{c}})",
        lambda x, c: spec.numpy(x, c),
        lambda m, c: spec.meta(m, const_meta(m, c)),
        "scalar_" + spec.kind,
    )


for _name, _symbol in (
    ("add", "+"),
    ("mul", "*"),
    ("lt", "<"),
    ("eq", "=="),
    ("floordiv", "//"),
    ("mod", "%"),
):
    OPS[f"{_name}_scalar"] = with_scalar(_name, _symbol)


# ---- replaying a program: shapes and dtypes from lazy tensors, intervals from the ops -------

KIND_NEEDS_FLOAT = {"float", "float_binary", "float_reduce"}
KIND_NO_BOOL = {"unary", "binary", "compare", "reduce", "matmul", "int_binary"}
#: Kinds whose second source is an integer index into the first: its values must be in range.
KIND_INDEXED = {"gather": "dim", "index": ""}


class Invalid(Exception):
    """A step the generator must not emit: unsafe range, wrong dtype, or an op error."""


@dataclass
class State:
    """Metas and lazy PYTHON tensors (never realized) of every value named so far."""

    metas: dict[str, Meta] = field(default_factory=dict)
    lazy: dict[str, Tensor] = field(default_factory=dict)

    def add_input(self, name: str, array: np.ndarray, dtype: DType) -> None:
        self.metas[name] = input_meta(array, dtype)
        self.lazy[name] = Tensor.empty(*array.shape, dtype=dtype, device=ORACLE)


def render(step: Step) -> str:
    """The step's expression in Python, as run and as printed in a repro."""
    return OPS[step.op].template.format(*step.srcs, **dict(step.args))


def cast_meta(m: Meta, to: DType) -> tuple[float, float, int | None]:
    """Casts: float to int truncates (exact sources only); to bool is 0 or 1 (nan is True)."""
    if m.dtype.is_float and not to.is_float and not m.exact:
        raise Invalid("cast of a rounded float to an integer could differ by one")
    if m.special and not to.is_float and to != dtypes.bool:
        raise Invalid("nan and inf have no integer value (C leaves the cast undefined)")
    if to == dtypes.bool:
        return 0.0, 1.0, 0
    if not to.is_float:
        return float(math.trunc(m.lo)), float(math.trunc(m.hi)), 0
    return m.lo, m.hi, m.frac


def step_meta(state: State, step: Step, out: Tensor) -> Meta:
    """The result's meta, or Invalid when the step is outside the safe ranges."""
    spec, srcs = OPS[step.op], [state.metas[s] for s in step.srcs]
    kind = spec.kind.removeprefix("scalar_")  # x + 2 is checked as x + a tensor holding 2
    args = dict(step.args)
    first = srcs[1] if kind == "where" else srcs[0]
    if kind in KIND_NEEDS_FLOAT and not first.dtype.is_float:
        raise Invalid("float op on a non-float value")
    if kind in KIND_NO_BOOL and first.dtype == dtypes.bool:
        raise Invalid("arithmetic on bool")
    if kind == "int_binary" and first.dtype.is_float:
        raise Invalid("integer division of floats is not generated (a rounded quotient's floor)")
    if kind in KIND_INDEXED:
        check_index(srcs[0], srcs[1], args.get("dim", 0), kind == "index")
    if kind == "compare" and not all(m.exact for m in srcs):
        raise Invalid("comparison of rounded floats could flip")
    if step.op == "cast":
        lo, hi, frac = cast_meta(first, getattr(dtypes, args["to"]))
    else:
        try:
            lo, hi, frac = spec.meta(*srcs, **args)
        except OverflowError as error:  # exp of a large bound: far outside every dtype
            raise Invalid(f"bound overflows: {error}") from error
    if any(m.dtype.is_float and not m.exact for m in srcs):
        frac = None
    if step.op in ("log", "sqrt") and max(first.lo**2, first.hi**2) + 1 > FLOAT_BOUND:
        # (x * x + 1) inside the step: float16 overflows there where a device computes in it
        raise Invalid("the step's x * x + 1 could overflow")
    if not fits(out.dtype, lo, hi) or out.numel() > MAX_NUMEL:
        raise Invalid("result could overflow or is too large")
    if out.numel() == 0:
        raise Invalid("an empty result (a slice like x[2:1]): the generator needs elements")
    if spec.kind == "float" and math.isnan(lo + hi):
        raise Invalid("nan bound")
    tol = max([float_tol(out.dtype), *(m.tol for m in srcs)])
    special = out.dtype.is_float and any(m.special for m in srcs)
    if out.dtype != first.dtype and kind in ("binary", "int_binary"):
        raise Invalid("a scalar changed the dtype")
    return Meta(tuple(out.shape), out.dtype, lo, hi, frac, tol, special)


def check_index(data: Meta, index: Meta, dim: int, negative: bool) -> None:
    """Out-of-range indices are not generated (nor left by a shrunk input): no device checks
    them. ``negative``: whether -size..-1 count from the end (``x[i]``; not ``gather``)."""
    if index.dtype.is_float or index.dtype == dtypes.bool:
        raise Invalid("an index must be an integer tensor")
    size = data.shape[dim] if dim < len(data.shape) else 0
    if index.lo < (-size if negative else 0) or index.hi >= size:
        raise Invalid(f"index values {index.lo}..{index.hi} outside dimension {dim} of {size}")


def extend(state: State, name: str, step: Step) -> None:
    """Add ``step`` to ``state``; Invalid if it is not safe or fusegrad refuses to build it."""
    try:
        with context(CHECK_BOUNDS=0):  # lazy tensors hold no indices yet: nothing to check
            out = eval(render(step), {"dtypes": dtypes}, dict(state.lazy))
    except Exception as error:
        raise Invalid(f"{render(step)}: {error}") from error
    state.metas[name] = step_meta(state, step, out)
    state.lazy[name] = out


def replay(program: Program) -> State | None:
    """The state after every step, or None if some step is invalid (a bad shrink)."""
    state = State()
    for name, (array, dtype) in program.inputs.items():
        state.add_input(name, array, dtype)
    try:
        for name, step in program.steps:
            extend(state, name, step)
    except (Invalid, KeyError):
        return None
    return state


# ---- generating ---------------------------------------------------------------------------


class Generator:
    """Builds one random program, step by step, keeping only steps that replay as valid."""

    def __init__(
        self, rng: random.Random, held: list[DType], max_steps: int, specials: bool = True
    ) -> None:
        self.rng, self.held, self.max_steps, self.specials = rng, held, max_steps, specials
        self.np_rng = np.random.default_rng(rng.getrandbits(32))
        self.program, self.state = Program(), State()

    def new_input(self, shape: tuple[int, ...], dtype: DType, high: int = 0, low: int = 0) -> str:
        """A fresh input: floats are multiples of 1/4 in [-2, 2], sometimes with nan and +-inf
        among them; integers small (indices in [low, high))."""
        array: np.ndarray
        if high:
            array = self.np_rng.integers(low, high, shape)
        elif dtype == dtypes.bool:
            array = self.np_rng.random(shape) < 0.5
        elif dtype.is_float:
            array = np.array(self.np_rng.integers(-8, 9, shape) / 4.0)
            if self.specials and self.rng.random() < SPECIAL_RATE:
                where = self.np_rng.random(shape) < 0.3
                array[where] = self.np_rng.choice([np.nan, np.inf, -np.inf], int(where.sum()))
        else:
            low = 0 if dtype.min == 0 else -4
            array = self.np_rng.integers(low, 6, shape)
        name = f"x{len(self.program.inputs)}"
        self.program.inputs[name] = (array, dtype)
        self.state.add_input(name, array, dtype)
        return name

    def random_shape(self) -> tuple[int, ...]:
        return tuple(self.rng.randint(1, 4) for _ in range(self.rng.randint(1, 3)))

    def partner(self, cur: str, dtype: DType | None = None) -> str:
        """An earlier value broadcastable with ``cur`` of the wanted dtype, or a new input."""
        m = self.state.metas[cur]
        dtype = dtype or m.dtype
        same = [
            n
            for n, o in self.state.metas.items()
            if o.dtype == dtype and o.shape == m.shape and n != cur
        ]
        if same and self.rng.random() < 0.5:
            return self.rng.choice(same)
        shape = tuple(1 if self.rng.random() < 0.2 else s for s in m.shape)
        return self.new_input(shape, dtype)

    def propose(self, op: str, cur: str) -> Step | None:
        """A step applying ``op`` to ``cur`` with random arguments, or None if it cannot."""
        m, rng, kind = self.state.metas[cur], self.rng, OPS[op].kind
        nd = len(m.shape)
        if kind in ("unary", "float", "matmul") and op != "matmul":
            return Step(op, (cur,))
        if kind.startswith("scalar_"):
            return Step(op, (cur,), (("c", self.scalar(m.dtype)),))
        if kind in ("binary", "float_binary", "compare", "int_binary"):
            return Step(op, (cur, self.partner(cur)))
        if kind == "where":
            return Step(op, (self.partner(cur, dtypes.bool), cur, self.partner(cur)))
        if kind == "cast":
            return Step(op, (cur,), (("to", rng.choice(self.held).name),))
        if kind in ("reduce", "float_reduce"):
            if nd == 0:
                return None
            axis = tuple(sorted(rng.sample(range(nd), rng.randint(1, nd))))
            return Step(op, (cur,), (("axis", axis), ("keepdim", rng.random() < 0.5)))
        if op == "matmul":
            if nd not in (1, 2):
                return None
            k = m.shape[-1]
            other = (k,) if rng.random() < 0.3 else (k, rng.randint(1, 4))
            return Step(op, (cur, self.new_input(other, m.dtype)))
        if op == "gather":
            if nd == 0:
                return None
            dim = rng.randrange(nd)
            shape = tuple(rng.randint(1, 4) if d == dim else s for d, s in enumerate(m.shape))
            index = self.new_input(shape, dtypes.int32, high=m.shape[dim])
            return Step(op, (cur, index), (("dim", dim),))
        if op == "index":
            if nd == 0:
                return None
            shape = self.random_shape()[: rng.randint(1, 2)]
            index = self.new_input(shape, dtypes.int32, high=m.shape[0], low=-m.shape[0])
            return Step(op, (cur, index))
        return self.propose_move(op, cur, m)

    def propose_move(self, op: str, cur: str, m: Meta) -> Step | None:
        """Movement ops: random but valid arguments for ``m``'s shape."""
        rng, nd = self.rng, len(m.shape)
        if op == "reshape":
            factors = [f for s in m.shape for f in prime_factors(s)]
            rng.shuffle(factors)
            cuts = (
                sorted(rng.sample(range(1, len(factors)), rng.randint(0, min(2, len(factors) - 1))))
                if len(factors) > 1
                else []
            )
            groups = np.split(np.array(factors, dtype=np.int64), cuts) if factors else []
            shape = tuple(int(np.prod(g)) for g in groups) or (1,)
            return Step(op, (cur,), (("shape", shape),))
        if nd == 0:
            return None
        if op == "permute":
            order = list(range(nd))
            rng.shuffle(order)
            return Step(op, (cur,), (("order", tuple(order)),))
        if op == "expand":
            if 1 not in m.shape:
                return None
            shape = tuple(rng.randint(2, 3) if s == 1 else s for s in m.shape)
            return Step(op, (cur,), (("shape", shape),))
        if op == "pad":
            pad = tuple((rng.randint(0, 2), rng.randint(0, 2)) for _ in m.shape)
            return Step(op, (cur,), (("pad", pad),))
        if op == "shrink":
            bounds = []
            for s in m.shape:
                a = rng.randrange(s)
                bounds.append((a, rng.randint(a + 1, s)))
            return Step(op, (cur,), (("bounds", tuple(bounds)),))
        if op == "slice":
            return Step(op, (cur,), (("key", self.index_key(m.shape)),))
        axis = tuple(sorted(rng.sample(range(nd), rng.randint(1, nd))))
        return Step("flip", (cur,), (("axis", axis),))

    def scalar(self, dtype: DType) -> int | float:
        """A Python scalar of ``dtype``'s kind: a multiple of 1/4 or a small integer."""
        if dtype.is_float:
            return self.rng.randint(-8, 8) / 4
        return self.rng.randint(0 if dtype.is_unsigned else -3, 3)

    def index_key(self, shape: tuple[int, ...]) -> str:
        """A basic index for the leading dimensions: integers (negative too) and slices with
        steps 1, 2 and -1, written as in Python."""
        parts = []
        for s in shape[: self.rng.randint(1, len(shape))]:
            if self.rng.random() < 0.25:
                parts.append(str(self.rng.randrange(-s, s)))
                continue
            a, b = sorted(self.rng.sample(range(-s, s + 1), 2))
            step = self.rng.choice(["", ":2", ":-1"])
            parts.append(f"{b - 1 if step == ':-1' else a}:{'' if step == ':-1' else b}{step}")
        return ", ".join(parts)

    def generate(self) -> Program:
        """A program of 1 to ``max_steps`` steps on a random first input."""
        floats = [d for d in self.held if d.is_float]
        pool = floats if floats and self.rng.random() < 0.5 else self.held  # float ops are most
        cur = self.new_input(self.random_shape(), self.rng.choice(pool))
        for i in range(self.rng.randint(1, self.max_steps)):
            for _ in range(20):
                step = self.propose(self.rng.choice(list(OPS)), cur)
                if step is None:
                    continue
                try:
                    extend(self.state, f"v{i}", step)
                except Invalid:
                    continue
                self.program.steps.append((f"v{i}", step))
                cur = f"v{i}"
                break
        return drop_unused(self.program)


def prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def drop_unused(program: Program) -> Program:
    """The program without steps and inputs the output does not depend on."""
    if not program.steps:
        return program
    live, steps = {program.output}, []
    for name, step in reversed(program.steps):
        if name in live:
            live.update(step.srcs)
            steps.append((name, step))
    inputs = {n: v for n, v in program.inputs.items() if n in live}
    return Program(inputs, steps[::-1])


# ---- running and comparing ----------------------------------------------------------------


def to_dtype(array: np.ndarray, dtype: DType) -> np.ndarray:
    """numpy's value rounded as ``dtype`` holds it, kept as float64, int64 or bool."""
    if dtype == dtypes.bool:
        return np.asarray(array != 0)
    if not dtype.is_float:
        return (
            np.trunc(np.asarray(array, dtype=np.float64)).astype(np.int64)
            if np.asarray(array).dtype.kind == "f"
            else np.asarray(array).astype(np.int64)
        )
    if dtype == dtypes.bfloat16:
        bits = np.asarray(array, dtype=np.float32).view(np.uint32).astype(np.uint64)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
        return bits.view(np.float32).astype(np.float64)
    return np.asarray(array).astype(dtype.np).astype(np.float64)


def run_numpy(program: Program, state: State) -> np.ndarray:
    """The program computed by numpy, rounded to each step's dtype."""
    env = {n: to_dtype(a, d) for n, (a, d) in program.inputs.items()}
    with np.errstate(all="ignore"):  # x // 0, inf - inf: the results are compared, not warned
        for name, step in program.steps:
            args = {k: v for k, v in step.args if k != "to"}
            result = OPS[step.op].numpy(*(env[s] for s in step.srcs), **args)
            env[name] = to_dtype(result, state.metas[name].dtype)
    return env[program.output]


def run_device(
    program: Program, device: str, grads: bool, table: Mapping[str, OpSpec] = OPS
) -> tuple[np.ndarray, str, dict[str, np.ndarray | None]]:
    """Realize the program on ``device``: output, its dtype name, gradients of its sum."""
    env: dict[str, Tensor] = {}
    bounds.forget()  # index checks left by a program that failed before its read are not ours
    for name, (array, dtype) in program.inputs.items():
        env[name] = make(array, dtype, device)
        env[name].requires_grad = grads and dtype.is_float
    for name, step in program.steps:
        code = table[step.op].template.format(*step.srcs, **dict(step.args))
        env[name] = eval(code, {"dtypes": dtypes}, dict(env))
    out = env[program.output]
    result = out.numpy()
    gradients: dict[str, np.ndarray | None] = {}
    wanted = [n for n, (_, d) in program.inputs.items() if grads and d.is_float]
    if wanted and out.dtype.is_float:
        out.sum().backward()
        for n in wanted:
            g = env[n].grad
            gradients[n] = None if g is None else g.numpy().astype(np.float64)
    return result, out.dtype.name, gradients


def difference(got: np.ndarray, want: np.ndarray, m: Meta) -> str | None:
    """Why ``got`` is not ``want`` for a value described by ``m``, or None if they agree."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if m.dtype.is_float and not m.exact:
        tol = max(m.tol, TOLERANCE[m.dtype.name])
        scale = max(1.0, abs(m.lo), abs(m.hi))
        ok = np.allclose(got.astype(np.float64), want, rtol=tol, atol=tol * scale, equal_nan=True)
    else:
        ok = np.array_equal(got.astype(np.float64), want.astype(np.float64), equal_nan=True)
    return None if ok else f"got {got.tolist()}, expected {want.tolist()}"


@dataclass(frozen=True)
class Outcome:
    """``kind`` is ok, skip (the device refused a dtype or op), mismatch or crash."""

    kind: str
    message: str = ""


def check(
    program: Program, device: str, grads: bool = True, table: Mapping[str, OpSpec] = OPS
) -> Outcome:
    """Run ``program`` on ``device``, the oracle and numpy, and compare all three."""
    state = replay(program)
    if state is None:
        return Outcome("skip", "invalid program")
    m = (
        state.metas[program.output]
        if program.steps
        else input_meta(*program.inputs[program.output])
    )
    reference = run_numpy(program, state)
    runs = {}
    for dev, tab in ((device, table), (ORACLE, OPS)):
        if dev in runs:
            continue
        try:
            runs[dev] = run_device(program, dev, grads, tab)
        except REFUSALS as error:
            return Outcome("skip", f"{dev}: {type(error).__name__}: {error}")
        except Exception as error:
            last = traceback.format_exception_only(error)[-1].strip()
            return Outcome("crash", f"{dev}: {last}")
    for dev, (result, dtype_name, _) in runs.items():
        if dtype_name != m.dtype.name:
            return Outcome("mismatch", f"{dev}: dtype {dtype_name}, expected {m.dtype.name}")
        why = difference(result, reference, m)
        if why:
            return Outcome("mismatch", f"{dev} vs numpy: {why}")
    if device != ORACLE:
        for n, g in runs[device][2].items():
            want = runs[ORACLE][2].get(n)
            if (g is None) != (want is None):
                return Outcome("mismatch", f"gradient of {n}: {g} on {device}, {want} on oracle")
            if g is not None and want is not None:
                scale = float(np.abs(want[np.isfinite(want)]).max(initial=1))
                gm = Meta(g.shape, _coarsest(program.inputs[n][1], state), -scale, scale, None)
                why = difference(g, want, gm)
                if why:
                    return Outcome("mismatch", f"gradient of {n}, {device} vs oracle: {why}")
    return Outcome("ok")


def _coarsest(dtype: DType, state: State) -> DType:
    """The gradient of a ``dtype`` input is only as precise as the least precise float the graph
    computed in (a float64 input cast to float32 has a float32-accurate gradient)."""
    floats = [m.dtype for m in state.metas.values() if m.dtype.is_float]
    return min([dtype, *floats], key=lambda d: d.itemsize) if dtype.is_float else dtype


# ---- shrinking and printing ---------------------------------------------------------------


def candidates(program: Program) -> Iterator[Program]:
    """Smaller programs, fewest steps first: cut after an earlier step, bypass a step (its
    users read one of its sources instead), then smaller inputs, then simpler input values.
    Many do not replay (a shape no longer fits an argument); the shrinker skips those."""
    for k in range(len(program.steps) - 1):
        yield drop_unused(Program(program.inputs, program.steps[: k + 1]))
    for i, (name, step) in enumerate(program.steps[:-1]):
        for src in dict.fromkeys(step.srcs):
            later = [
                (n, Step(s.op, tuple(src if x == name else x for x in s.srcs), s.args))
                for n, s in program.steps[i + 1 :]
            ]
            yield drop_unused(Program(program.inputs, program.steps[:i] + later))
    yield from smaller_inputs(program)
    yield from simpler_values(program)


def smaller_inputs(program: Program) -> Iterator[Program]:
    """Each dimension (counted from the right, as broadcasting aligns them) cut to 1 or by one
    element, in one input alone or in every input of that size there."""
    for name, (array, _) in program.inputs.items():
        for pos in range(1, array.ndim + 1):
            size = array.shape[-pos]
            for new in sorted({1, size - 1}):
                if not 1 <= new < size:  # (never empty: cutting a size-1 axis to 0 loops)
                    continue
                sharing = [
                    n
                    for n, (a, _) in program.inputs.items()
                    if a.ndim >= pos and a.shape[-pos] == size
                ]
                for group in ([name], sharing) if len(sharing) > 1 else ([name],):
                    inputs = dict(program.inputs)
                    for n in group:
                        a, d = inputs[n]
                        inputs[n] = (np.take(a, range(new), axis=a.ndim - pos), d)
                    yield Program(inputs, program.steps)


def simpler_values(program: Program) -> Iterator[Program]:
    """Each input with all its elements 0, else 1 (0 is simpler than 1: never back again)."""
    for name, (array, dtype) in program.inputs.items():
        for value in (0, 1):
            if not (array == 0).all() and not (array == value).all():
                inputs = dict(program.inputs)
                inputs[name] = (np.full_like(array, value), dtype)
                yield Program(inputs, program.steps)


def shrink(program: Program, fails: Callable[[Program], bool]) -> Program:
    """The smallest program found by repeatedly taking the first smaller one that still fails."""
    progress = True
    while progress:
        progress = False
        for smaller in candidates(program):
            if replay(smaller) is not None and fails(smaller):
                program, progress = smaller, True
                break
    return program


def input_code(name: str, array: np.ndarray, dtype: DType) -> list[str]:
    """Lines making input ``name`` with the public API (bfloat16 by a cast: numpy has none)."""
    held = "float32" if dtype == dtypes.bfloat16 else np.dtype(dtype.np).name
    values = np.asarray(array).tolist()
    code = f"Tensor(np.array({values}, dtype={held!r}), device=device)"
    if dtype == dtypes.bfloat16:
        code += ".cast(dtypes.bfloat16).realize()"
    lines = [f"    {name} = {code}"]
    return lines + ([f"    {name}.requires_grad = True"] if dtype.is_float else [])


def repro(program: Program, device: str, grads: bool = True) -> str:
    """The program as a Python script printing, on ``device`` and on the oracle, its result and
    (when it is a float) the gradients of its sum with respect to the float inputs."""
    floats = [n for n, (_, d) in program.inputs.items() if d.is_float]
    lines = [
        "import numpy as np",
        "from fusegrad import Tensor, dtypes",
        "",
        'nan, inf = float("nan"), float("inf")',
        "",
        "",
        "def build(device):",
    ]
    for name, (array, dtype) in program.inputs.items():
        lines += input_code(name, array, dtype)
    lines += [f"    {name} = {render(step)}" for name, step in program.steps]
    lines += [
        f"    return {program.output}, {{{', '.join(f'{n!r}: {n}' for n in floats)}}}",
        "",
        "",
        f"for device in ({device!r}, {ORACLE!r}):",
        "    out, inputs = build(device)",
        "    print(device, out.numpy().tolist())",
    ]
    if grads and floats:
        lines += [
            "    if out.dtype.is_float:",
            "        out.sum().backward()",
            "        for name, x in inputs.items():",
            '            print(f"  d(sum)/d{name}", x.grad.numpy().tolist())',
        ]
    return "\n".join(lines) + "\n"


def same_failure(
    kind: str, device: str, grads: bool, table: Mapping[str, OpSpec]
) -> Callable[[Program], bool]:
    """The shrinker's test: a smaller program must fail the same way (mismatch or crash)."""
    return lambda program: check(program, device, grads, table).kind == kind


def fuzz(
    device: str,
    graphs: int,
    seed: int,
    max_steps: int = 5,
    grads: bool = True,
    table: Mapping[str, OpSpec] = OPS,
    out: Any = sys.stdout,
) -> dict[str, int]:
    """Run ``graphs`` random programs; print each failure shrunk, as code. Returns counts."""
    held = sorted(held_dtypes(device) & held_dtypes(ORACLE), key=lambda d: d.priority)
    counts = {"graphs": 0, "mismatches": 0, "crashes": 0, "skipped": 0}
    # no nan or inf inputs where the target's language does not promise them (WGSL)
    specials = Device[device].renderer.ieee_specials
    for i in range(graphs):
        rng = random.Random(seed * 1_000_003 + i)
        program = Generator(rng, held, max_steps, specials).generate()
        outcome = check(program, device, grads, table)
        counts["graphs"] += 1
        if outcome.kind in ("ok", "skip"):
            counts["skipped"] += outcome.kind == "skip"
            continue
        counts["mismatches" if outcome.kind == "mismatch" else "crashes"] += 1
        small = shrink(program, same_failure(outcome.kind, device, grads, table))
        print(f"graph {i}: {outcome.kind}: {check(small, device, grads, table).message}", file=out)
        print(repro(small, device, grads), file=out)
    return counts


def main(argv: list[str] | None = None) -> int:
    """The command line: exit status 1 on any mismatch or crash."""
    parser = argparse.ArgumentParser(prog="python -m fusegrad.testing.fuzz", description=__doc__)
    parser.add_argument("--device", default="CPU")
    parser.add_argument("--graphs", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-steps", type=int, default=5)
    parser.add_argument("--no-grad", action="store_true", help="compare forward results only")
    args = parser.parse_args(argv)
    counts = fuzz(args.device, args.graphs, args.seed, args.max_steps, not args.no_grad)
    print(f"{args.device}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 1 if counts["mismatches"] or counts["crashes"] else 0


if __name__ == "__main__":
    sys.exit(main())
