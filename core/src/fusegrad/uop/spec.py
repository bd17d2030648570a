"""What a UOp may look like at each stage of code generation, and ``verify`` that checks it.

Every stage is a graph of UOps (``uop/ops.py``), and each stage allows its own ops: a kernel AST
still has movement ops and ``REDUCE_AXIS``; lowering turns them into index math, ``RANGE`` loops
and ``REDUCE``; decomposition adds only what the renderer lacks; the linear program holds only
``BACKEND_OPS``. A pass that leaves a stray op behind, or builds an ``ADD`` of two dtypes, would
otherwise fail far away, in a renderer or a C compiler. Here the stage that built it is named.

Each stage is a table ``Ops -> checks``; a check takes the UOp and returns what is wrong with it,
or None. An op missing from a stage's table may not appear there at all.

``check_stage`` runs ``verify`` when ``Context.VERIFY`` is set (always in the tests, by
``tests/conftest.py``; ``VERIFY=1`` otherwise), once per kernel and stage: on each kernel AST the
scheduler makes (``schedule/kernelize.py``) and after each stage of ``codegen/kernel.py:generate``,
next to the kernel verifier of ``codegen/verify.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import Enum

from fusegrad.dtype import DType, dtypes
from fusegrad.errors import SpecError
from fusegrad.helpers import Context
from fusegrad.uop.ops import BACKEND_OPS, GroupOp, Ops, UOp, toposort

Check = Callable[[UOp], "str | None"]

#: the stages, in pipeline order (the names ``verify`` and its errors use)
KERNEL_AST, LOWERED, DECOMPOSED, LINEAR = "kernel AST", "lowered", "decomposed", "linear program"

BUFFERS = frozenset({Ops.PARAM, Ops.DEFINE_REG, Ops.DEFINE_LOCAL})
REDUCE_OPS = frozenset({Ops.ADD, Ops.MAX})
#: what a kernel's SINK gathers: its writes
WRITES = frozenset({Ops.STORE, Ops.ATOMIC_AND, Ops.ATOMIC_OR})


# ---- checks: each returns what is wrong, or None ---------------------------------------------


def n_src(lo: int, hi: int | None = None) -> Check:
    """Between ``lo`` and ``hi`` sources (exactly ``lo`` when ``hi`` is None)."""
    hi = lo if hi is None else hi

    def check(u: UOp) -> str | None:
        if lo <= len(u.src) <= hi:
            return None
        want = str(lo) if lo == hi else f"{lo} to {hi}"
        return f"it has {len(u.src)} sources, expected {want}"

    return check


def dtype_is(*allowed: DType) -> Check:
    """The UOp's own dtype is one of ``allowed``."""

    def check(u: UOp) -> str | None:
        if u.dtype in allowed:
            return None
        return f"its dtype is {u.dtype.name}, expected {' or '.join(d.name for d in allowed)}"

    return check


def src_op(i: int, ops: Iterable[Ops]) -> Check:
    """Source ``i`` (when present) is one of ``ops``."""
    ops = frozenset(ops)

    def check(u: UOp) -> str | None:
        if len(u.src) <= i or u.src[i].op in ops:
            return None
        names = ", ".join(sorted(o.name for o in ops))
        return f"source {i} is {u.src[i].op.name}, expected one of {names}"

    return check


def src_dtype(i: int, dtype: DType | None = None) -> Check:
    """Source ``i`` (when present) has ``dtype`` (the UOp's own dtype when None)."""

    def check(u: UOp) -> str | None:
        want = u.dtype if dtype is None else dtype
        if len(u.src) <= i or u.src[i].dtype == want:
            return None
        return f"source {i} ({u.src[i].op.name}) is {u.src[i].dtype.name}, expected {want.name}"

    return check


def index_src(i: int) -> Check:
    """Source ``i`` is of an index type (``INDEX_TYPES``)."""

    def check(u: UOp) -> str | None:
        if u.src[i].dtype in INDEX_TYPES:
            return None
        return f"source {i} ({u.src[i].op.name}) is {u.src[i].dtype.name}, not an index type"

    return check


def same_dtype(u: UOp) -> str | None:
    """ALU: every source has the result's dtype."""
    if all(s.dtype == u.dtype for s in u.src):
        return None
    return f"its sources are {', '.join(s.dtype.name for s in u.src)}, all must be {u.dtype.name}"


def compares(u: UOp) -> str | None:
    """A comparison: a bool of two sources of one dtype."""
    if u.dtype != dtypes.bool:
        return f"a comparison gives bool, not {u.dtype.name}"
    if u.src[0].dtype != u.src[1].dtype:
        return f"it compares {u.src[0].dtype.name} with {u.src[1].dtype.name}"
    return None


def same_size(u: UOp) -> str | None:
    """BITCAST: the bits are reinterpreted, so both types have one size (until decomposition:
    see ``_decomposed``)."""
    if u.src[0].dtype.itemsize == u.dtype.itemsize:
        return None
    return f"it reinterprets {u.src[0].dtype.name} as {u.dtype.name}, of another size"


def arg_is(describe: str, test: Callable[[object], bool]) -> Check:
    """The arg passes ``test``; ``describe`` says what it should be."""

    def check(u: UOp) -> str | None:
        return None if test(u.arg) else f"its arg {u.arg!r} is not {describe}"

    return check


def _ints(x: object, n: int | None = None) -> bool:
    return isinstance(x, tuple) and (n is None or len(x) == n) and all(type(i) is int for i in x)


def _is_size(x: object) -> bool:
    """A size: an int, or an expression of variables (a symbolic shape)."""
    return type(x) is int or isinstance(x, UOp)


def range_arg(arg: object) -> bool:
    """``(axis id, kind)``: the kind a loop-kind name or an enum member."""
    return (
        isinstance(arg, tuple)
        and len(arg) >= 2
        and type(arg[0]) is int
        and isinstance(arg[1], str | Enum)
    )


def special_arg(arg: object) -> bool:
    """``(name, size)`` of a grid index."""
    return isinstance(arg, tuple) and len(arg) == 2 and isinstance(arg[0], str) and _is_size(arg[1])


def reduce_axis_arg(arg: object) -> bool:
    """``(ADD or MAX, axes)`` of a REDUCE_AXIS."""
    return isinstance(arg, tuple) and len(arg) == 2 and arg[0] in REDUCE_OPS and _ints(arg[1])


def gathered(u: UOp) -> str | None:
    """A GATHER's index is an integer array with the table's rank, its ``axis`` an axis of the
    table, and on every other axis the table as long as the index or 1."""
    table, index = u.src
    if type(u.arg) is not int or not 0 <= u.arg < len(table.shape):
        return f"its arg {u.arg!r} is not an axis of the table {table.shape}"
    if not index.dtype.is_int or len(index.shape) != len(table.shape):
        return f"its index ({index.dtype.name}, {index.shape}) is not an int array of its rank"
    pairs = enumerate(zip(table.shape, index.shape))
    if any(a != u.arg and t not in (i, 1) for a, (t, i) in pairs):
        return f"its table {table.shape} does not match its index {index.shape} off axis {u.arg}"
    return None


def variable_arg(arg: object) -> bool:
    """``(name, min, max)`` of a DEFINE_VAR."""
    return isinstance(arg, tuple) and len(arg) == 3 and isinstance(arg[0], str) and _ints(arg[1:])


def const_arg(u: UOp) -> str | None:
    """A CONST holds a Python value of its dtype's kind (bool, int or float)."""
    kind = bool if u.dtype == dtypes.bool else float if u.dtype.is_float else int
    if type(u.arg) is kind:
        return None
    return (
        f"its value {u.arg!r} is a {type(u.arg).__name__}, a {u.dtype.name} holds a {kind.__name__}"
    )


def gated_load(u: UOp) -> str | None:
    """``LOAD(index, gate, alternative)``: a bool gate, an alternative of the load's dtype."""
    if len(u.src) != 3:
        return None
    if u.src[1].dtype != dtypes.bool:
        return f"its gate is {u.src[1].dtype.name}, not bool"
    return src_dtype(2)(u)


def stored_dtype(u: UOp) -> str | None:
    """A STORE writes a value of the target's dtype."""
    if u.src[0].dtype == u.src[1].dtype:
        return None
    return f"it stores {u.src[1].dtype.name} into {u.src[0].op.name} of {u.src[0].dtype.name}"


def all_src_op(ops: Iterable[Ops]) -> Check:
    """Every source is one of ``ops``."""
    ops = frozenset(ops)

    def check(u: UOp) -> str | None:
        bad = [s.op.name for s in u.src if s.op not in ops]
        return f"its sources include {', '.join(bad)}" if bad else None

    return check


def reduce_ranges(u: UOp) -> str | None:
    """REDUCE: the value, then the RANGE loops it reduces over."""
    bad = [s.op.name for s in u.src[1:] if s.op is not Ops.RANGE]
    return f"it reduces over {', '.join(bad)}, not RANGE loops" if bad else None


# ---- the rows shared between stages ---------------------------------------------------------

INDEX = dtypes.index
#: a kernel indexes with 32-bit integers, or 64-bit ones when it is that big (codegen/lower.py)
INDEX_TYPES = (dtypes.index, dtypes.int64)
SIZE_ARG = arg_is("a tuple of sizes", lambda a: isinstance(a, tuple) and all(map(_is_size, a)))
PAIRS_ARG = arg_is(
    "one (start, end) pair per axis",
    lambda a: isinstance(a, tuple) and all(isinstance(p, tuple) and len(p) == 2 for p in a),
)
BUFFER_ARG = arg_is("(number, element count)", lambda a: _ints(a, 2))

ALU: dict[Ops, tuple[Check, ...]] = {
    **{op: (n_src(1), same_dtype) for op in GroupOp.Unary},
    **{op: (n_src(2), same_dtype) for op in GroupOp.Binary - GroupOp.Comparison},
    **{op: (n_src(2), compares) for op in GroupOp.Comparison},
    Ops.WHERE: (n_src(3), src_dtype(0, dtypes.bool), src_dtype(1), src_dtype(2)),
    Ops.MULACC: (n_src(3), same_dtype),
    Ops.CAST: (n_src(1),),
    Ops.BITCAST: (n_src(1), same_size),
    Ops.CONST: (n_src(0), const_arg),
    Ops.DEFINE_VAR: (n_src(0), dtype_is(INDEX), arg_is("(name, min, max)", variable_arg)),
}

MOVEMENT: dict[Ops, tuple[Check, ...]] = {
    Ops.RESHAPE: (n_src(1), src_dtype(0), SIZE_ARG),
    Ops.EXPAND: (n_src(1), src_dtype(0), SIZE_ARG),
    Ops.PERMUTE: (n_src(1), src_dtype(0), arg_is("an order of axes", _ints)),
    Ops.PAD: (n_src(1), src_dtype(0), PAIRS_ARG),
    Ops.SHRINK: (n_src(1), src_dtype(0), PAIRS_ARG),
    Ops.FLIP: (
        n_src(1),
        src_dtype(0),
        arg_is(
            "one bool per axis", lambda a: isinstance(a, tuple) and all(type(b) is bool for b in a)
        ),
    ),
}

#: after lowering: loops, index math and memory reached through INDEX
KERNEL: dict[Ops, tuple[Check, ...]] = {
    **ALU,
    Ops.PARAM: (n_src(0), BUFFER_ARG),
    Ops.DEFINE_LOCAL: (n_src(0), BUFFER_ARG),  # a staged matmul's tiles (codegen/staged.py)
    Ops.RANGE: (
        n_src(1),
        dtype_is(*INDEX_TYPES),
        src_dtype(0),
        arg_is("(axis id, loop kind)", range_arg),
    ),
    # (a flat grid index may carry its real bound, a variable size: threads past it return)
    Ops.SPECIAL: (
        n_src(0, 1),
        dtype_is(*INDEX_TYPES),
        src_dtype(0),
        arg_is("(name, size)", special_arg),
    ),
    Ops.INDEX: (n_src(2), src_op(0, BUFFERS), src_dtype(0), index_src(1)),
    Ops.LOAD: (n_src(1, 3), src_op(0, {Ops.INDEX}), src_dtype(0), gated_load),
    Ops.STORE: (n_src(2), dtype_is(dtypes.void), src_op(0, {Ops.INDEX}), stored_dtype),
    Ops.REDUCE: (
        n_src(2, 64),
        src_dtype(0),
        reduce_ranges,
        arg_is("ADD or MAX", lambda a: a in REDUCE_OPS),
    ),
    Ops.SINK: (n_src(1, 1 << 16), dtype_is(dtypes.void), all_src_op(WRITES)),
}


def _decomposed(table: Mapping[Ops, tuple[Check, ...]]) -> dict[Ops, tuple[Check, ...]]:
    """``table`` with what ``codegen/decompose.py`` may add: packed narrow stores, and bitcasts
    between a narrow type and the wider word that holds it where the target lacks the narrow
    type (float16's bits in an int32 on WebGPU, which has no int16)."""
    return {
        **table,
        Ops.BITCAST: (n_src(1),),
        Ops.ATOMIC_AND: (n_src(2), src_op(0, {Ops.INDEX}), stored_dtype),
        Ops.ATOMIC_OR: (n_src(2, 3), src_op(0, {Ops.INDEX}), stored_dtype),
    }


# ---- the stages ---------------------------------------------------------------------------------

SPEC: dict[str, dict[Ops, tuple[Check, ...]]] = {
    # what the scheduler hands to codegen: tensor-graph ops over PARAM buffers, one STORE
    KERNEL_AST: {
        **ALU,
        **MOVEMENT,
        Ops.PARAM: (n_src(0), BUFFER_ARG),
        Ops.REDUCE_AXIS: (n_src(1), src_dtype(0), arg_is("(ADD or MAX, axes)", reduce_axis_arg)),
        Ops.CONTIGUOUS: (n_src(1), src_dtype(0)),
        Ops.DETACH: (n_src(1), src_dtype(0)),
        Ops.GATHER: (n_src(2), src_dtype(0), gathered),
        Ops.STORE: (n_src(2), src_op(0, {Ops.PARAM}), stored_dtype),
        Ops.SINK: (n_src(1, 1 << 16), all_src_op({Ops.STORE})),
    },
    LOWERED: KERNEL,
    DECOMPOSED: _decomposed(KERNEL),
    # the program a renderer gets: BACKEND_OPS only; accumulators are read and written directly
    LINEAR: _decomposed(
        {
            **{op: KERNEL[op] for op in KERNEL if op in BACKEND_OPS},
            Ops.DEFINE_REG: (n_src(0), BUFFER_ARG),
            Ops.DEFINE_LOCAL: (n_src(0), BUFFER_ARG),
            Ops.LOAD: (
                n_src(1, 3),
                src_op(0, {Ops.INDEX, Ops.DEFINE_REG}),
                src_dtype(0),
                gated_load,
            ),
            Ops.STORE: (
                n_src(2),
                dtype_is(dtypes.void),
                src_op(0, {Ops.INDEX, Ops.DEFINE_REG}),
                stored_dtype,
            ),
            Ops.END: (n_src(1, 64), all_src_op({Ops.RANGE})),
            Ops.PREFETCH: (n_src(1), dtype_is(dtypes.void), src_op(0, {Ops.INDEX})),
            Ops.TRANSPOSE_BLOCK: (
                n_src(2),
                dtype_is(dtypes.void),
                src_op(0, {Ops.INDEX}),
                src_op(1, {Ops.INDEX}),
            ),
            Ops.IF: (n_src(1), src_dtype(0, dtypes.bool)),
            Ops.ENDIF: (n_src(1), src_op(0, {Ops.IF})),
            Ops.BARRIER: (),
        }
    ),
}


def problem_with(u: UOp, stage: str) -> str | None:
    """What is wrong with ``u`` at ``stage``, or None."""
    checks = SPEC[stage].get(u.op)
    if checks is None:
        return f"{u.op.name} may not appear in the {stage}"
    return next((p for check in checks if (p := check(u)) is not None), None)


def verify(uops: UOp | Iterable[UOp], stage: str) -> None:
    """Raise ``SpecError`` naming the stage and the first UOp in ``uops`` (a graph's root, or a
    linear program) that ``SPEC[stage]`` does not allow, and what is wrong with it."""
    if stage not in SPEC:
        raise ValueError(f"unknown stage {stage!r}; the stages are {', '.join(SPEC)}")
    nodes = toposort([uops]) if isinstance(uops, UOp) else list(uops)
    for u in nodes:
        if (problem := problem_with(u, stage)) is not None:
            arg = "" if u.arg is None else f" arg={u.arg!r}"
            raise SpecError(
                f"{u.op.name} {u.dtype.name}{arg} is not valid in the {stage}: {problem}. This is "
                "a bug in the pass that built this stage (or in a plugin's rewrite rules); please "
                "report it with the kernel printed by DEBUG=4"
            )


def check_stage(uops: UOp | Iterable[UOp], stage: str) -> None:
    """``verify(uops, stage)`` when ``Context.VERIFY`` is on; the hook each stage calls."""
    if Context.VERIFY:
        verify(uops, stage)
