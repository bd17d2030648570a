"""Tests of ``codegen/verify.py``: hand-built kernels that would crash or corrupt memory are
refused before compiling, naming the kernel and the UOp; the kernels core generates pass."""

from __future__ import annotations

import pytest

from fusegrad import Tensor, dtypes
from fusegrad.codegen.kernel import generate
from fusegrad.codegen.verify import verify_program
from fusegrad.errors import KernelVerifyError
from fusegrad.helpers import Context, context
from fusegrad.renderer import Renderer
from fusegrad.schedule.kernelize import KernelStep
from fusegrad.uop.loops import AxisKind, LoopArg
from fusegrad.uop.ops import Ops, UOp

f32, idx = dtypes.float32, dtypes.index


class Listing(Renderer):
    """A loop target whose "source" lists the program's ops."""

    def render(self, name: str, program: list[UOp]) -> str:
        return " ".join(u.op.name for u in program)


def param(number: int, size: int, dtype=f32) -> UOp:
    return UOp(Ops.PARAM, dtype, (), (number, size))


def const(value: int) -> UOp:
    return UOp.const(idx, value)


def copy_program(out_size: int, in_size: int, offset=lambda i: i) -> list[UOp]:
    """``out[i] = in[offset(i)]`` for i < out_size, as a linear program."""
    out, src = param(0, out_size), param(1, in_size)
    loop = UOp(Ops.RANGE, idx, (const(out_size),), LoopArg(0, AxisKind.GLOBAL))
    at = offset(loop)
    load = UOp(Ops.LOAD, f32, (UOp(Ops.INDEX, f32, (src, at)),))
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, f32, (out, loop)), load))
    body = [u for u in (at,) if u is not loop]
    return [
        out,
        src,
        const(out_size),
        loop,
        *body,
        load.src[0],
        load,
        store.src[0],
        store,
        UOp(Ops.END, dtypes.void, (loop,)),
    ]


def test_the_tests_verify_every_kernel():
    assert Context.VERIFY  # tests/conftest.py turns it on for the whole session


def test_an_in_bounds_program_passes():
    verify_program("E_8", copy_program(8, 8), Renderer())


def test_a_load_past_the_end_of_its_buffer_is_refused_naming_kernel_and_uop():
    program = copy_program(8, 4)  # reads in[0..7] of a 4-element buffer
    with pytest.raises(
        KernelVerifyError,
        match=r"kernel 'E_8' for Renderer failed verification at "
        r"#5 LOAD float32: its index ranges over \[0, 7\], outside buffer 1 "
        r"\(4 elements\)",
    ):
        verify_program("E_8", program, Renderer())


def test_a_store_before_the_start_of_its_buffer_is_refused():
    out, src = param(0, 4), param(1, 4)
    loop = UOp(Ops.RANGE, idx, (const(4),), LoopArg(0, AxisKind.GLOBAL))
    back = loop + (-1)
    load = UOp(Ops.LOAD, f32, (UOp(Ops.INDEX, f32, (src, loop)),))
    store = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, f32, (out, back)), load))
    program = [out, src, const(4), loop, load.src[0], load, const(-1), back, store.src[0], store]
    with pytest.raises(
        KernelVerifyError,
        match=r"#9 STORE void: its index ranges over \[-1, 2\], "
        r"outside buffer 0",
    ):
        verify_program("E_4", program, Renderer())


def block_program(dest_size: int, source_size: int, source_stride: int) -> list[UOp]:
    """One 8 x 8 block of ``source`` (rows ``source_stride`` apart) transposed into a local
    array with rows of 8."""
    out, src = param(0, dest_size), param(1, source_size)
    shared = UOp(Ops.DEFINE_LOCAL, f32, (), (0, 64))
    fill = UOp(
        Ops.TRANSPOSE_BLOCK,
        dtypes.void,
        (UOp(Ops.INDEX, f32, (shared, const(0))), UOp(Ops.INDEX, f32, (src, const(0)))),
        (8, source_stride, 8),
    )
    return [out, src, shared, const(0), *fill.src, fill]


def test_a_transposed_block_is_checked_to_its_last_element():
    verify_program("K", block_program(64, 8 * 8, 8), Renderer())
    verify_program("K", block_program(64, 7 * 16 + 8, 16), Renderer())
    with pytest.raises(
        KernelVerifyError,
        match=r"TRANSPOSE_BLOCK void arg=\(8, 16, 8\): its 8 x 8 block ranges over "
        r"\[0, 119\], outside buffer 1 \(119 elements\)",
    ):
        verify_program("K", block_program(64, 7 * 16 + 7, 16), Renderer())


def test_a_division_by_constant_zero_is_refused():
    program = copy_program(8, 8, offset=lambda i: i.alu(Ops.MOD, const(0)))
    with pytest.raises(KernelVerifyError, match=r"#4 MOD int32: its divisor is always 0"):
        verify_program("E_8", program, Renderer())


def test_a_dtype_the_renderer_does_not_declare_is_refused():
    class NoDoubles(Renderer):
        supported_dtypes = frozenset(dtypes.all()) - {dtypes.float64}

    program = copy_program(4, 4)
    wide = program[5].cast(dtypes.float64)
    with pytest.raises(
        KernelVerifyError,
        match=r"CAST float64: its dtype float64 is not among the "
        r"renderer's supported_dtypes",
    ):
        verify_program("E_4", [*program, wide], NoDoubles("DOUBLELESS"))


def ast_of(t: Tensor) -> UOp:
    return [s.ast for s in t.schedule() if isinstance(s, KernelStep)][-1]


def shrunk_past_the_end() -> UOp:
    """The AST of ``out[i] = in[i + 2]`` over 8 outputs, from a 4-element input."""
    src = param(1, 4)
    view = UOp(Ops.SHRINK, f32, (src,), ((2, 10),))
    return UOp(Ops.SINK, f32, (UOp(Ops.STORE, f32, (param(0, 8), view)),))


def test_generate_refuses_a_hand_built_kernel_ast_reading_out_of_bounds():
    with pytest.raises(
        KernelVerifyError,
        match=r"kernel 'E_8'.*LOAD float32: its index ranges "
        r"over \[2, 9\], outside buffer 1 \(4 elements\)",
    ):
        generate(shrunk_past_the_end(), Listing())


def test_without_the_flag_generate_does_not_verify():
    with context(VERIFY=0):
        kernel = generate(shrunk_past_the_end(), Listing(), opts=None)
    assert kernel.name == "E_8" and "LOAD" in kernel.source


def test_a_kernel_over_a_size_0_axis_is_refused_for_its_modulo_by_zero():
    """What made ``cat`` of two (45, 0, 9) tensors kill the process: an index ``% 0`` that gcc
    turned into a trap. The scheduler no longer makes such kernels; the verifier names one."""
    src = param(1, 0)
    value = UOp(Ops.EXPAND, f32, (UOp(Ops.RESHAPE, f32, (src,), (1, 0, 3)),), (4, 0, 3))
    ast = UOp(Ops.SINK, f32, (UOp(Ops.STORE, f32, (param(0, 0), value)),))
    with pytest.raises(
        KernelVerifyError, match=r"kernel 'E_4_0_3'.*(MOD|IDIV) int32: its divisor is always 0"
    ):
        generate(ast, Listing(), opts=None)


@pytest.mark.parametrize(
    "build",
    [
        lambda: Tensor.rand(6, 7, device="PYTHON").realize().sum(1),
        lambda: (
            Tensor.rand(5, 3, device="PYTHON").realize()
            @ Tensor.rand(3, 4, device="PYTHON").realize()
        ),
        lambda: Tensor.rand(4, 6, device="PYTHON").realize().pad(((1, 2), None)).flip(0)[1:4],
        lambda: Tensor.rand(8, device="PYTHON").realize().cast(dtypes.int8) // 3,
    ],
)
def test_kernels_core_generates_pass(build):
    ast = ast_of(build())
    kernel = generate(ast, Listing())  # verified on the way (the flag is on)
    verify_program(kernel.name, list(kernel.program), Listing())
    assert "STORE" in kernel.source
