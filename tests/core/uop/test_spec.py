"""uop/spec.py: each stage refuses the UOps it does not allow, naming the stage, the op and why;
the programs the pipeline really builds pass every stage."""

from __future__ import annotations

import pytest
from kernel_corpus import corpus_kernels

from fusegrad.codegen.kernel import generate
from fusegrad.dtype import dtypes
from fusegrad.errors import SpecError
from fusegrad.helpers import Context, context
from fusegrad.renderer import Renderer
from fusegrad.uop import spec
from fusegrad.uop.loops import AxisKind, LoopArg
from fusegrad.uop.ops import BACKEND_OPS, Ops, UOp
from fusegrad.uop.spec import DECOMPOSED, KERNEL_AST, LINEAR, LOWERED, verify

f32, i32, idx = dtypes.float32, dtypes.int32, dtypes.index


def const(dtype, value) -> UOp:
    return UOp.const(dtype, value)


def param(n: int = 0, dtype=f32, size: int = 8) -> UOp:
    return UOp(Ops.PARAM, dtype, (), (n, size))


GLOBAL_LOOP = LoopArg(0, AxisKind.GLOBAL)


def loop(size: int = 8, arg: tuple = GLOBAL_LOOP) -> UOp:
    return UOp(Ops.RANGE, idx, (const(idx, size),), arg)


def kernel(value: UOp, at: UOp | None = None) -> UOp:
    """``SINK(STORE(data0[at], value))``: a lowered kernel writing ``value``."""
    at = loop() if at is None else at
    return UOp(
        Ops.SINK,
        dtypes.void,
        (UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, f32, (param(), at)), value)),),
    )


def load(n: int = 1, dtype=f32) -> UOp:
    return UOp(Ops.LOAD, dtype, (UOp(Ops.INDEX, dtype, (param(n, dtype), loop())),))


BAD = [  # (stage, the graph, a regex the message must match after naming op and stage)
    (
        LOWERED,
        kernel(UOp(Ops.ADD, f32, (load(), const(i32, 1)))),
        "ADD float32",
        "sources are float32, int32",
    ),
    (
        LOWERED,
        kernel(load(), at=UOp(Ops.RANGE, f32, (const(f32, 8.0),), (0, "global"))),
        "RANGE float32",
        "dtype is float32, expected int32",
    ),
    (
        LOWERED,
        kernel(load(), at=UOp(Ops.RANGE, idx, (const(idx, 8),), ("0", "global"))),
        "RANGE int32",
        "not \\(axis id, loop kind\\)",
    ),
    (
        LOWERED,
        UOp(Ops.SINK, dtypes.void, (UOp(Ops.STORE, dtypes.void, (load(), const(f32, 1.0))),)),
        "STORE void",
        "source 0 is LOAD, expected one of INDEX",
    ),
    (
        LOWERED,
        kernel(UOp(Ops.LOAD, f32, (UOp(Ops.INDEX, f32, (load(), loop())),))),
        "INDEX float32",
        "source 0 is LOAD, expected one of DEFINE_LOCAL, DEFINE_REG, PARAM",
    ),
    (
        LOWERED,
        kernel(UOp(Ops.REDUCE_AXIS, f32, (load(),), (Ops.ADD, (0,)))),
        "REDUCE_AXIS float32",
        "may not appear in the lowered",
    ),
    (
        LOWERED,
        kernel(UOp(Ops.RESHAPE, f32, (load(),), (8,))),
        "RESHAPE",
        "may not appear in the lowered",
    ),
    (
        LOWERED,
        kernel(UOp(Ops.CMPLT, f32, (load(), const(f32, 0.0)))),
        "CMPLT float32",
        "gives bool",
    ),
    (
        LOWERED,
        kernel(UOp(Ops.WHERE, f32, (load(), load(2), const(f32, 0.0)))),
        "WHERE float32",
        "source 0 \\(LOAD\\) is float32, expected bool",
    ),
    (LOWERED, kernel(UOp(Ops.CONST, f32, (), 1)), "CONST float32 arg=1", "a float32 holds a float"),
    (
        LOWERED,
        kernel(UOp(Ops.BITCAST, f32, (UOp.const(dtypes.int64, 1),))),
        "BITCAST float32",
        "int64 as float32, of another size",
    ),
    (
        DECOMPOSED,
        kernel(UOp(Ops.REDUCE, f32, (load(), load()), Ops.ADD)),
        "REDUCE float32",
        "reduces over LOAD, not RANGE loops",
    ),
    (
        LINEAR,
        [UOp(Ops.REDUCE, f32, (load(), loop()), Ops.ADD)],
        "REDUCE float32",
        "may not appear in the linear program",
    ),
    (
        KERNEL_AST,
        UOp(Ops.SINK, f32, (UOp(Ops.STORE, f32, (const(f32, 0.0), param())),)),
        "STORE float32",
        "source 0 is CONST, expected one of PARAM",
    ),
    (
        KERNEL_AST,
        UOp(Ops.SINK, f32, (UOp(Ops.STORE, f32, (param(), param(1, i32))),)),
        "STORE float32",
        "stores int32 into PARAM of float32",
    ),
    (
        KERNEL_AST,
        UOp(
            Ops.SINK,
            f32,
            (UOp(Ops.STORE, f32, (param(), UOp(Ops.RESHAPE, f32, (param(1),), (2.5,)))),),
        ),
        "RESHAPE float32",
        "not a tuple of sizes",
    ),
    (
        KERNEL_AST,
        UOp(Ops.SINK, f32, (UOp(Ops.STORE, f32, (param(), load())),)),
        "RANGE int32",
        "may not appear in the kernel AST",
    ),
]


@pytest.mark.parametrize("stage, graph, names, why", BAD, ids=[f"{s}-{n}" for s, _, n, _ in BAD])
def test_a_uop_its_stage_does_not_allow_is_refused_naming_op_stage_and_why(
    stage, graph, names, why
):
    with pytest.raises(SpecError, match=f"{names}.* is not valid in the {stage}: .*{why}"):
        verify(graph, stage)


@pytest.mark.parametrize("kind", ["global", AxisKind.REDUCE])
def test_a_loop_kind_may_be_a_name_or_an_enum_member(kind):
    verify(kernel(load(), at=loop(arg=(3, kind))), LOWERED)


def test_the_linear_program_holds_only_backend_ops():
    assert set(spec.SPEC[LINEAR]) <= BACKEND_OPS


def test_an_unknown_stage_is_refused():
    with pytest.raises(ValueError, match="unknown stage 'optimised'"):
        verify([], "optimised")


class ListRenderer(Renderer):
    """A loop target; ``render`` lists the program's ops."""

    def render(self, name: str, program: list[UOp]) -> str:
        return " ".join(u.op.name for u in program)


class GridRenderer(ListRenderer):
    """A grid target with shared memory: long reductions take the grouped path (codegen/grid.py)."""

    grid_dims, local_size, max_group_size, has_local, local_memory_bytes = 1, 256, 1024, True, 32768


@pytest.mark.parametrize("renderer", [ListRenderer(), GridRenderer()], ids=["loops", "grid"])
def test_every_stage_of_real_kernels_passes(renderer):
    """The corpus's kernels (every dtype, movement op, reduction) pass each stage's spec: with
    ``Context.VERIFY`` on, ``generate`` checks every stage it builds."""
    assert Context.VERIFY  # tests/conftest.py turns it on for the whole session
    for _, ast in corpus_kernels():
        verify(ast, KERNEL_AST)
        program = generate(ast, renderer).program
        verify(program, LINEAR)


def test_stages_are_checked_only_with_verify_on():
    bad = kernel(UOp(Ops.ADD, f32, (load(), const(i32, 1))))
    with context(VERIFY=0):
        spec.check_stage(bad, LOWERED)
    with pytest.raises(SpecError):
        spec.check_stage(bad, LOWERED)
