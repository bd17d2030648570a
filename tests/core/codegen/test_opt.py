"""The default loop structure of reduction kernels (codegen/opt.py)."""

from __future__ import annotations

import numpy as np

from fusegrad import Device, Tensor
from fusegrad.codegen.kernel import generate
from fusegrad.codegen.opt import KernelOpts, RegisterBudget, heuristic_opts
from fusegrad.renderer import Renderer
from fusegrad.schedule.kernelize import abstract, make_plan
from fusegrad.tensor.movement import _unreshaped
from fusegrad.uop.loops import AxisKind
from fusegrad.uop.ops import Ops


def _target(registers: int, vector_bytes: int) -> Renderer:
    """A renderer with a given SIMD register file, so that the choices do not depend on the host."""
    r = Renderer("TEST")
    r.vector_registers, r.vector_bytes = registers, vector_bytes
    return r


AVX2, AVX512 = _target(16, 32), _target(32, 64)


def _reduce_ast(t: Tensor):
    asts = [s.ast for s in t.schedule() if s.ast.src[0].src[0].arg[1] == t.numel()]
    return asts[-1]


def test_conv_runs_output_channels_as_vectors(avx512_host):
    """The weight is laid out with C_out innermost, so C_out is the vector axis (16 wide) and
    the output width, along which the input is read, is the reused axis."""
    x, w = Tensor.rand(8, 4, 12, 12, device="CPU"), Tensor.rand(32, 4, 3, 3, device="CPU")
    y = x.conv2d(w)
    ast = _reduce_ast(y)
    shape = ast.src[0].src[1].shape
    opts = heuristic_opts(ast, AVX2)
    cout_axis = shape.index(32)
    assert opts.upcast[-1] == (cout_axis, 16)
    assert opts.upcast[0][0] == len(shape) - 1 - shape[::-1].index(10)  # the output width


def test_conv_over_rows_of_7_or_14_takes_seven_outputs_a_tile(avx512_host):
    """A ResNet's last stages output 14x14 and 7x7 positions: rows of 7 of them reuse each
    vector of filters (7 was no row count, so a 7-wide row ran one position a tile: 512 filters
    of 512 channels, 3x3, batch 1, 58 -> 186 GFLOP/s on 2 cores, AVX-512)."""
    for size in (7, 14):
        x = Tensor.rand(1, 64, size, size, device="CPU")
        w = Tensor.rand(64, 64, 3, 3, device="CPU")
        ast = _reduce_ast(x.conv2d(w, padding=1))
        shape = ast.src[0].src[1].shape
        width = len(shape) - 1 - shape[::-1].index(size)  # the output width
        assert (width, 7) in heuristic_opts(ast, AVX512).upcast


def test_matmul_vectorises_the_output_row():
    """Two registers of the output row as vectors; as many rows reuse them as leave the
    accumulators in registers (AVX2: 16 registers of 8 floats; AVX-512: 32 of 16)."""
    a, b = Tensor.rand(96, 32, device="CPU"), Tensor.rand(32, 48, device="CPU")
    assert heuristic_opts(_reduce_ast(a @ b), AVX2).upcast == ((0, 6), (1, 16))
    a, b = Tensor.rand(64, 32, device="CPU"), Tensor.rand(32, 64, device="CPU")
    assert heuristic_opts(_reduce_ast(a @ b), AVX512).upcast == ((0, 8), (1, 32))


def test_register_budget_leaves_room_for_the_loaded_vectors():
    avx2 = RegisterBudget.of(AVX2, 4)
    assert avx2.width == 8 and avx2.vector_amounts()[0] == 16
    assert avx2.accumulators(16) == 12 * 8  # 16 registers - 2 loaded - 2 spare
    assert RegisterBudget.of(AVX512, 4).vector_amounts()[0] == 32
    assert RegisterBudget.of(AVX2, 8).vector_amounts()[0] == 8  # float64: 4 per register


def test_size_one_axes_do_not_shift_the_choice():
    """Loops exist only for axes longer than 1; the analysis maps them back to axes."""
    a, b = Tensor.rand(64, 32, device="CPU"), Tensor.rand(32, 48, device="CPU")
    y = (a.reshape(64, 1, 32, 1) * b.reshape(1, 1, 32, 48)).sum(2, keepdim=True)
    opts = heuristic_opts(_reduce_ast(y), AVX512)
    assert opts.upcast == ((0, 8), (3, 16))


def test_elementwise_kernels_loop_per_axis_only_when_views_need_division():
    x, b = Tensor.rand(64, 32, device="CPU"), Tensor.rand(32, device="CPU")
    (plain,) = (x + x).schedule()
    assert heuristic_opts(plain.ast, AVX2) is None  # same position everywhere: one flat loop
    (broadcast,) = (x + b).schedule()  # b's element is the flat position % 32
    assert heuristic_opts(broadcast.ast, AVX2) == KernelOpts((0, 1))


def test_a_copy_into_panels_reads_several_panels_runs_of_a_row_a_step():
    """A matrix copied into panels of 16 columns (a matmul's right operand on AVX2) reads 64
    bytes of a row for each panel: 4 panels' runs are taken a step (256 bytes of the row), the
    run innermost as a vector; a run of 256 bytes already, or a plain copy, is left alone."""
    m = Tensor.rand(64, 256, device="CPU").realize()
    panels = m.reshape(64, 16, 16).permute(1, 0, 2).contiguous()
    (step,) = panels.schedule()
    assert heuristic_opts(step.ast, AVX2).upcast == ((0, 4), (2, 16))
    np.testing.assert_array_equal(panels.numpy(), m.numpy().reshape(64, 16, 16).transpose(1, 0, 2))
    (wide,) = m.reshape(64, 4, 64).permute(1, 0, 2).contiguous().schedule()
    assert not (heuristic_opts(wide.ast, AVX2) or KernelOpts(())).upcast


def test_padded_copy_has_no_division_or_modulo():
    """A pad's load is gated: outside the pad the index is never used, so it needs no modulo
    to stay in range, and a loop per axis needs no division."""
    x = Tensor.rand(4, 8, 10, 10, device="CPU")
    (step,) = x.pad((None, None, (2, 2), (2, 2))).contiguous().schedule()
    source = generate(step.ast, Device["CPU"].renderer, opts=heuristic_opts(step.ast, AVX2)).source
    body = source[source.index("{") :]
    assert "%" not in body and "/" not in body
    np.testing.assert_array_equal(
        x.pad((None, None, (2, 2), (2, 2))).numpy(),
        np.pad(x.numpy(), ((0, 0), (0, 0), (2, 2), (2, 2))),
    )


def test_reduction_over_size_one_axes_only_writes_its_output():
    """No reduce loop exists for size-1 axes; the upcast output must still be stored."""
    x = Tensor.rand(1, 32, 5, 5, device="CPU")
    np.testing.assert_array_equal(x.sum(0).numpy(), x.numpy().sum(0))
    np.testing.assert_array_equal(x.max(0, keepdim=True).numpy(), x.numpy().max(0, keepdims=True))
    y = Tensor.rand(4, 1, 64, device="CPU")
    np.testing.assert_array_equal((y * 2).sum(1).numpy(), (y.numpy() * 2).sum(1))


def test_views_under_a_pad_simplify():
    """Below a pad the index may leave the source's range where nothing is loaded; clamping it
    gives the simplifier bounds, so reshapes below the pad leave no division behind."""
    x = Tensor.rand(4, 8, 10, 10, device="CPU").realize()
    y = (x.reshape(4, 800) * 2).reshape(4, 8, 10, 10).pad((None, None, (4, 4), (4, 4)))
    (step,) = y.contiguous().schedule()
    source = generate(step.ast, Device["CPU"].renderer, opts=heuristic_opts(step.ast, AVX2)).source
    body = source[source.index("{") :]
    assert "%" not in body and "/" not in body
    np.testing.assert_array_equal(
        y.numpy(), np.pad(x.numpy() * 2, ((0, 0), (0, 0), (4, 4), (4, 4)))
    )


def test_short_rows_of_a_reduction_merge_into_one_loop():
    """Summing (N, C, 20, 20) over N, H, W: 20 is too short for wide lanes; H and W are one run
    of 400 in memory, so they become one loop (16 lanes) that needs no division."""
    x = Tensor.rand(8, 4, 20, 20, device="CPU")
    (step,) = x.sum((0, 2, 3)).schedule()
    opts = heuristic_opts(step.ast, AVX2)
    assert opts.merge and opts.lanes == (3, 16)
    source = generate(step.ast, Device["CPU"].renderer, opts=opts).source
    assert "/" not in source[source.index("{") :] and "%" not in source[source.index("{") :]
    np.testing.assert_allclose(x.sum((0, 2, 3)).numpy(), x.numpy().sum((0, 2, 3)), rtol=1e-5)


def test_rows_read_with_division_are_not_merged():
    """A pooling's backward reads y // 2 and x // 2: merged, they would be m // 40 and more."""
    g = Tensor.rand(8, 4, 10, 10, device="CPU")
    x = Tensor.rand(8, 4, 20, 20, device="CPU")
    up = g.reshape(8, 4, 10, 1, 10, 1).expand(8, 4, 10, 2, 10, 2).reshape(8, 4, 20, 20)
    (step,) = (x * up).sum((0, 2, 3)).schedule()
    assert not heuristic_opts(step.ast, AVX2).merge


def test_blocks_of_rows_go_outside_when_rows_alias_and_the_operand_fits_the_cache(avx512_host):
    """Rows 4 KB long (1024 floats) share cache sets: with a 32 MB cache the row blocks loop
    outside the column panels (the 4 MB operand streams past a block kept in L1); rows of 768
    floats, or no cache size known, or a 16 MB operand, keep the columns outside."""
    big_cache = _target(16, 32)
    big_cache.cache_bytes = 32 << 20

    def order(n: int, target: Renderer) -> tuple[int, ...]:
        ast = _reduce_ast(Tensor.empty(n, n, device="CPU") @ Tensor.empty(n, n, device="CPU"))
        opts = heuristic_opts(ast, target)
        rows, cols = opts.upcast[0][0], opts.upcast[1][0]
        return tuple(d for d in opts.order if d in (rows, cols)), (rows, cols)

    loops, (rows, cols) = order(1024, big_cache)
    assert loops == (rows, cols)
    for n, target in ((768, big_cache), (1024, AVX2), (2048, big_cache)):
        loops, (rows, cols) = order(n, target)
        assert loops == (cols, rows), n
    a, b = (
        Tensor.rand(96, 1024, device="CPU").realize(),
        Tensor.rand(1024, 256, device="CPU").realize(),
    )
    *_, step = (a @ b).schedule()
    opts = heuristic_opts(step.ast, big_cache)
    rt = Device["CPU"]
    kernel = generate(step.ast, rt.renderer, rt.rules, opts)
    program = rt.program(kernel.name, rt.compiler.compile_cached(kernel.source))
    out = Tensor.zeros(96 * 256, device="CPU").contiguous().realize()
    width = 2 * rt.renderer.vector_bytes // 4  # the host's panels (schedule/layout.py)
    panels = b.reshape(1024, 256 // width, width).permute(1, 0, 2).contiguous().realize()
    program(out._buffer().handle, a._buffer().handle, panels._buffer().handle, global_size=None)
    np.testing.assert_allclose(out.numpy().reshape(96, 256), a.numpy() @ b.numpy(), rtol=1e-4)


def test_rows_that_alias_keep_the_columns_outside_in_a_first_level_cache_of_many_ways(avx512_host):
    """Rows of 4 KB share cache sets; a 12-way first-level cache (Intel since Ice Lake) holds a
    tile's 8 rows and the panel's lines beside them, so the column panels stay outside (1024²
    measured 1.0-1.5x faster so on a 2-core Emerald Rapids); an 8-way one (Zen 3, Skylake) or
    an unknown one puts the row blocks outside."""
    for ways, rows_outside in ((12, False), (8, True), (0, True)):
        target = _target(32, 64)
        target.cache_bytes, target.cache_ways = 32 << 20, ways
        ast = _reduce_ast(
            Tensor.empty(1024, 1024, device="CPU") @ Tensor.empty(1024, 1024, device="CPU")
        )
        opts = heuristic_opts(ast, target)
        rows, cols = opts.upcast[0][0], opts.upcast[1][0]
        loops = tuple(d for d in opts.order if d in (rows, cols))
        assert loops == ((rows, cols) if rows_outside else (cols, rows)), ways


def test_blocks_of_rows_go_outside_a_right_operand_that_fits_a_cores_cache():
    """96 columns make 3 column panels (AVX-512) or 6 vectors (AVX2): as the parallel loop, too
    few to share out; its 192 KB fit a core's cache share, so the 64 or 86 row blocks go outside.
    A 1 MB operand (512 columns) keeps the columns outside."""
    for target in (AVX2, AVX512):
        for m, rows_first in ((96, True), (512, False)):
            a, b = Tensor.empty(512, 512, device="CPU"), Tensor.empty(512, m, device="CPU")
            opts = heuristic_opts(_in_place_ast(a @ b), target)
            rows, cols = opts.upcast[0][0], opts.upcast[1][0]
            loops = tuple(d for d in opts.order if d in (rows, cols))
            assert loops == ((rows, cols) if rows_first else (cols, rows)), (target, m)


def _wide_matmul(rows: int) -> tuple[Tensor, Tensor]:
    """(rows, 2048) @ (2048, 256), realized (see ``_in_place_ast``)."""
    a, b = Tensor.rand(rows, 2048, device="CPU"), Tensor.rand(2048, 256, device="CPU")
    return a.realize(), b.realize()


def _in_place_ast(t: Tensor):
    """The kernel of ``t`` scheduled without the layout pass: a matmul then reads its right
    operand in place, not from panels as wide as the host's vectors (the same AST on any host)."""
    roots, inputs, _ = abstract([_unreshaped(t.uop)])
    (step,) = make_plan(roots, [t.device], [b.device for b in inputs]).steps
    return step.ast


def _run_with(opts: KernelOpts, ast, a: Tensor, b: Tensor) -> np.ndarray:
    rt = Device["CPU"]
    kernel = generate(ast, rt.renderer, rt.rules, opts)
    program = rt.program(kernel.name, rt.compiler.compile_cached(kernel.source))
    out = Tensor.zeros(a.shape[0] * b.shape[1], device="CPU").contiguous().realize()
    program(out._buffer().handle, a._buffer().handle, b._buffer().handle, global_size=None)
    return out.numpy().reshape(a.shape[0], b.shape[1])


def test_panel_group_is_sized_from_the_core_cache():
    """A reduction of 2048 by two AVX-512 panels of 32 floats is 512 KB: more than the default
    TILE_BYTES, within half of a 1 MB level-2 cache. (132 rows: 8 do not divide them.)"""
    a, b = _wide_matmul(132)
    ast = _in_place_ast(a @ b)
    assert heuristic_opts(ast, AVX512).tile == ()
    big_core = _target(32, 64)
    big_core.core_cache_bytes = 1 << 20
    opts = heuristic_opts(ast, big_core)
    assert opts.tile == ((opts.upcast[-1][0], 2),) and opts.upcast == ((0, 8), (1, 32))
    np.testing.assert_allclose(_run_with(opts, ast, a, b), a.numpy() @ b.numpy(), rtol=1e-4)


def _two_core_avx2(first_cache_bytes: int) -> Renderer:
    """An AVX2 target with 2 cores, 32 MB of last-level cache, 1 MB of L2 each."""
    target = _target(16, 32)
    target.cache_bytes, target.core_cache_bytes, target.cache_threads = 32 << 20, 1 << 20, 2
    target.first_cache_bytes = first_cache_bytes
    return target


def test_rows_longer_than_the_first_level_cache_walk_wider_groups_of_panels():
    """6 rows of 2048 floats (48 KB) outgrow a 32 KB first-level cache: the group of panels
    widens from what fits half of L2 (4 panels of 2048 x 16 floats) to 32, a quarter of each
    core's share of the last level (4 MB). Unknown first-level size: the L2 group."""
    a = Tensor.rand(48, 2048, device="CPU").realize()
    b = Tensor.rand(2048, 1024, device="CPU").realize()
    ast = _in_place_ast(a @ b)
    wide = heuristic_opts(ast, _two_core_avx2(32 * 1024))
    assert wide.upcast == ((0, 6), (1, 16)) and wide.tile == ((1, 32),)
    assert heuristic_opts(ast, _two_core_avx2(0)).tile == ((1, 4),)
    np.testing.assert_allclose(_run_with(wide, ast, a, b), a.numpy() @ b.numpy(), rtol=1e-4)


def test_rows_within_the_first_level_cache_keep_the_level_2_group():
    """6 rows of 256 floats (6 KB) stay in L1 across the group: at most 8 panels (a GPT's
    512x256 @ 256x1024 ran slower with 32)."""
    a = Tensor.rand(48, 256, device="CPU").realize()
    b = Tensor.rand(256, 1024, device="CPU").realize()
    opts = heuristic_opts(_in_place_ast(a @ b), _two_core_avx2(32 * 1024))
    assert opts.tile == ((1, 8),)


def test_tile_whose_rows_divide_their_axis_walks_two_panels_even_past_the_cache():
    """64 rows by 8 divide exactly, so nothing clamps them: gcc then packs the tile whole only
    inside a loop over panels, which it gets even though the 512 KB group exceeds TILE_BYTES."""
    a, b = _wide_matmul(64)
    ast = _in_place_ast(a @ b)
    opts = heuristic_opts(ast, AVX512)
    assert opts.tile == ((opts.upcast[-1][0], 2),) and opts.upcast == ((0, 8), (1, 32))
    np.testing.assert_allclose(_run_with(opts, ast, a, b), a.numpy() @ b.numpy(), rtol=1e-4)


def _weight_gradient(batch: int, cin: int, cout: int, size: int, k: int):
    """A conv's weight gradient (C_out innermost in the incoming gradient, as conv2d's backward
    lays it out): the AST of its k x k reduction kernel and a check of the values against numpy."""
    x = Tensor.rand(batch, cin, size, size, device="CPU")
    w = Tensor.rand(cout, cin, k, k, device="CPU", requires_grad=True)
    out = size - k + 1
    g = Tensor.rand(batch, out, out, cout, device="CPU").permute(0, 3, 1, 2)
    (x.conv2d(w) * g).sum().backward()
    (ast,) = [s.ast for s in w.grad.schedule() if s.ast.src[0].src[1].shape[-2:] == (k, k)]

    def check() -> None:
        windows = np.lib.stride_tricks.sliding_window_view(x.numpy(), (k, k), axis=(2, 3))
        expected = np.einsum("bcyxij,boyx->ocij", windows, g.numpy())  # b, c, y, x, ky, kx
        np.testing.assert_allclose(w.grad.numpy(), expected, rtol=1e-4, atol=1e-3)

    return ast, check


def test_weight_gradient_tile_spans_the_whole_window_row():
    """A conv's weight gradient: C_out runs as vectors, and the rows reusing each loaded vector
    are the 5 window columns (read from neighbouring input elements), the whole short axis,
    rather than 4 of the input channels. The kernel still computes the gradient."""
    ast, check = _weight_gradient(8, 4, 32, 12, 5)
    shape = ast.src[0].src[1].shape
    assert heuristic_opts(ast, AVX2).upcast == ((len(shape) - 1, 5), (shape.index(32), 16))
    check()


def test_conv_tile_rows_span_a_short_output_row(avx512_host):
    """A 3x3 conv over rows of 6: the tile takes all 6 output columns with 16 channels as
    vectors (6 x 16 fits AVX2's registers), not 3 of them; over rows of 8, which 8 x 16 would not
    fit, it halves the vectors and still takes the whole row (8 x 8)."""
    w = Tensor.rand(64, 32, 3, 3, device="CPU")
    for width, rows, vector in ((6, 6, 16), (8, 8, 8)):
        x = Tensor.rand(4, 32, width + 2, width + 2, device="CPU")
        ast = _reduce_ast(x.conv2d(w))
        shape = ast.src[0].src[1].shape
        width_axis = len(shape) - 1 - shape[::-1].index(width)
        assert heuristic_opts(ast, AVX2).upcast == ((width_axis, rows), (shape.index(64), vector))
    out = x.conv2d(w).numpy()
    windows = np.lib.stride_tricks.sliding_window_view(x.numpy(), (3, 3), axis=(2, 3))
    np.testing.assert_allclose(
        out, np.einsum("bcyxij,ocij->boyx", windows, w.numpy()), rtol=1e-4, atol=1e-4
    )


def test_weight_gradient_tile_adds_rows_along_a_second_axis_when_registers_are_left():
    """A 3x3 conv's weight gradient: 3 window columns x 16 output channels fill half of AVX2's
    registers, so the tile also takes 2 input channels (2 x 3 x 16 = 12 registers)."""
    ast, check = _weight_gradient(8, 32, 64, 8, 3)
    shape = ast.src[0].src[1].shape
    cin, cout = shape.index(32), shape.index(64)
    assert heuristic_opts(ast, AVX2).upcast == ((cin, 2), (len(shape) - 1, 3), (cout, 16))
    check()


def _channel_sums(x: Tensor) -> Tensor:
    """A BatchNorm-style sum per channel of a costly expression (a ReLU mask times x²)."""
    return ((x > 0.5).where(x * x, 0.0)).sum((0, 2, 3))


def test_channel_sums_over_short_runs_upcast_the_channels():
    """Summing (batch, height, width) for each channel reads a short run per batch for each
    output; a register of neighbouring channels reads one block per batch instead, and the
    result is the same as numpy's."""
    a = np.random.default_rng(0).random((16, 64, 6, 6), dtype=np.float32)
    x = Tensor(a, device="CPU")
    ast = _reduce_ast(_channel_sums(x))
    assert heuristic_opts(ast, AVX512).upcast == ((1, 16),)
    assert heuristic_opts(ast, AVX2).upcast == ((1, 8),)
    expected = np.where(a > 0.5, a * a, 0).sum((0, 2, 3))
    np.testing.assert_allclose(_channel_sums(x).numpy(), expected, rtol=1e-5)


def test_channel_sums_over_long_runs_keep_their_lanes():
    """Runs of 400 give 16 lanes along the run: those stay (4.5x faster than the upcast)."""
    x = Tensor.rand(16, 32, 20, 20, device="CPU")
    opts = heuristic_opts(_reduce_ast(x.sum((0, 2, 3))), AVX512)
    assert opts.upcast == () and opts.lanes is not None and opts.lanes[1] >= 16


def test_conv_channels_fill_two_registers_when_the_batch_is_left_to_split(avx512_host):
    """32 output channels on AVX-512 are two registers, the whole axis: each loaded input feeds
    two FMAs (a 5x5 conv ran 8-15% faster than 16 channels with more rows); the batch axis is
    left for the cores. With only the channels to split, they keep a loop."""
    w = Tensor.rand(32, 4, 5, 5, device="CPU")
    ast = _reduce_ast(Tensor.rand(8, 4, 12, 12, device="CPU").conv2d(w))
    shape = ast.src[0].src[1].shape
    assert heuristic_opts(ast, AVX512).upcast[-1] == (shape.index(32), 32)
    assert heuristic_opts(ast, AVX2).upcast[-1][1] <= 16  # (two AVX2 registers at most)
    a = np.random.default_rng(0).random((8, 4, 12, 12), dtype=np.float32)
    wn = w.numpy()
    got = Tensor(a, device="CPU").conv2d(w).numpy()
    windows = np.lib.stride_tricks.sliding_window_view(a, (5, 5), axis=(2, 3))  # (8, 4, 8, 8, 5, 5)
    np.testing.assert_allclose(
        got, np.einsum("bcyxij,ocij->boyx", windows, wn), rtol=1e-4, atol=1e-4
    )


def test_an_elementwise_kernel_reading_a_transposed_input_takes_rows_together():
    """``m * 0.9 + g.T * 0.1`` (an optimizer update of a gradient stored transposed): rows of
    the output run 8 at a time, so each cache line of ``g`` read serves 8 outputs. A broadcast
    input is no transpose, and rows shorter than 128 are read again while still in cache: their
    kernels keep plain loops."""
    m, g = (
        Tensor.rand(64, 128, device="CPU").realize(),
        Tensor.rand(128, 64, device="CPU").realize(),
    )
    (update,) = (m * 0.9 + g.T * 0.1).schedule()
    assert heuristic_opts(update.ast, AVX2) == KernelOpts((0, 1), ((0, 8),))
    (broadcast,) = (m + Tensor.rand(128, device="CPU").realize()).schedule()
    assert heuristic_opts(broadcast.ast, AVX2) == KernelOpts((0, 1))
    (short,) = (g * 0.9 + m.T * 0.1).schedule()  # rows of 64
    assert heuristic_opts(short.ast, AVX2) == KernelOpts((0, 1))
    np.testing.assert_allclose(
        (m * 0.9 + g.T * 0.1).numpy(), m.numpy() * 0.9 + g.numpy().T * 0.1, rtol=1e-6
    )


def test_a_short_transposed_read_whose_rows_alias_takes_rows_together():
    """``dy @ w.T`` copies ``w`` (256, 1024) into panels of 32 columns read across its rows:
    an innermost loop of 32, each element 4 KB from the last, so the 32 lines fall in one cache
    set and are gone before the next step reads them again. That copy takes its rows 8 at a
    time; the same copy of a (256, 768) weight (3 KB apart: its lines spread over the sets)
    keeps plain loops, and so does one of 8 rows 4 KB apart (no more than a set's ways)."""

    def panel_copy(rows: int, length: int, w: Tensor | None = None) -> Tensor:
        w = Tensor.rand(rows, length, device="CPU").realize() if w is None else w
        return w.reshape(rows // 32, 32, length).permute(0, 2, 1)  # panels of w.T's columns

    (aliasing,) = panel_copy(256, 1024).contiguous().schedule()
    assert heuristic_opts(aliasing.ast, AVX2) == KernelOpts((0, 1, 2), ((1, 8),))
    (spread,) = panel_copy(256, 768).contiguous().schedule()
    assert heuristic_opts(spread.ast, AVX2) == KernelOpts((0, 1, 2))
    w = Tensor.rand(64, 1024, device="CPU").realize()
    (few,) = w.reshape(8, 8, 1024).permute(0, 2, 1).contiguous().schedule()
    assert heuristic_opts(few.ast, AVX2) == KernelOpts((0, 1, 2))
    w = Tensor.rand(256, 1024, device="CPU").realize()
    panels = w.numpy().reshape(8, 32, 1024).transpose(0, 2, 1)
    np.testing.assert_array_equal(panel_copy(256, 1024, w).contiguous().numpy(), panels)
    a = Tensor.rand(64, 1024, device="CPU").realize()
    np.testing.assert_allclose((a @ w.T).numpy(), a.numpy() @ w.numpy().T, rtol=1e-4, atol=1e-4)


def _cached_attention(length: int) -> tuple[Tensor, np.ndarray]:
    """SmolLM2's decode attention over the first ``length`` rows of a KV cache (a Variable), the
    way models/llama.py views it; and numpy's result."""
    import math

    from fusegrad import Variable

    rng = np.random.default_rng(length)
    cache_np = rng.standard_normal((64, 1, 192), dtype=np.float32)
    q_np = rng.standard_normal((1, 1, 9, 64), dtype=np.float32)
    n = Variable("context", 1, 64).bind(length)
    keys = Tensor(cache_np, device="CPU").shrink(((0, n), None, None)).permute(1, 0, 2)
    q = Tensor(q_np, device="CPU").reshape(1, 1, 3, 3, 64).permute(0, 2, 3, 1, 4)
    k = keys.reshape(1, n, 3, 1, 64).permute(0, 2, 3, 4, 1)
    v = keys.reshape(1, n, 3, 1, 64).permute(0, 2, 3, 1, 4)
    out = ((q @ k) * (1 / math.sqrt(64))).softmax(-1) @ v  # (1, 3, 3, 1, 64)
    kv = cache_np[:length, 0].reshape(length, 3, 64)
    qn = q_np.reshape(3, 3, 64)
    s = np.einsum("hgd,lhd->hgl", qn, kv) / 8
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return out, np.einsum("hgl,lhd->hgd", p, kv).reshape(1, 3, 3, 1, 64)


def test_kernels_of_a_variable_length_loop_per_axis_without_division():
    """Attention over a KV cache of variable length: each kernel loops per axis (no flat loop
    over ``9 * context`` whose position is divided back into axes), the views through reshapes
    of that length simplify to sums of counters (no ``/`` or ``%`` left), the scores' dot runs
    in lanes for the 3 queries of a group at once (rows of a tile: they share each key's load,
    and their sums wait on no one else's adds), over the positions outermost (the loop the
    cores share: many trips), and the weighted sum as vectors of the head's 64 values; values
    match numpy at each length."""
    out, _ = _cached_attention(5)
    rt = Device["CPU"]
    kernels = [generate(s.ast, rt.renderer, rt.rules) for s in out.schedule()]
    for kernel in kernels:
        assert kernel.opts is not None, kernel.name
        assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in kernel.program), kernel.source
    scores, weighted = kernels[0], kernels[-1]
    assert scores.opts.lanes is not None and scores.opts.upcast == ((2, 3),)
    assert scores.opts.order[0] == 4  # the positions outermost: the loop the cores share
    assert weighted.opts.upcast and weighted.opts.upcast[0][0] == 4
    for length in (1, 5, 17, 64):
        out, want = _cached_attention(length)
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)


def test_a_tile_summed_over_two_adjacent_axes_runs_them_as_one_loop(avx512_host):
    """``sum over (batch, time) of x[..., :, None] * dy[..., None, :]``: both axes are one run in
    both operands, so the register tile sums them in one loop (inside two, gcc kept its
    accumulators in memory); merged only when that adds no division."""
    x, dy = Tensor.empty(4, 128, 256, device="CPU"), Tensor.empty(4, 128, 1024, device="CPU")
    grad = (x.reshape(4, 128, 256, 1) * dy.reshape(4, 128, 1, 1024)).sum((0, 1))
    opts = heuristic_opts(_reduce_ast(grad), AVX512)
    assert opts.merge and len(opts.upcast) == 2
    rt = Device["CPU"]
    kernel = generate(_reduce_ast(grad), rt.renderer, rt.rules, opts)
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in kernel.program)
    assert sum(1 for u in kernel.program if u.op is Ops.RANGE and u.arg.kind.name == "REDUCE") == 1


def test_a_kernel_of_several_sums_runs_each_in_lanes():
    """An LSTM gate's two matrix-vector products in one kernel (``W x + R h``, through views of
    different shapes): each sum's own innermost axis runs in lanes (as one flat loop each ran
    scalar, 4x slower); values as numpy's."""
    from fusegrad.codegen.lower import INNERMOST

    rng = np.random.default_rng(0)
    w, r = (rng.standard_normal((512, 128), dtype=np.float32) for _ in range(2))
    x, h = (rng.standard_normal(128, dtype=np.float32) for _ in range(2))
    tw, tr = Tensor(w, device="CPU"), Tensor(r, device="CPU").reshape(1, 512, 128)
    gates = (tw * Tensor(x, device="CPU")).sum(-1) + (tr * Tensor(h, device="CPU")).sum(-1)[0]
    out = gates[:128].sigmoid() * gates[128:256].tanh()
    (step,) = out.schedule()
    opts = heuristic_opts(step.ast, AVX512)
    assert opts is not None and opts.lanes == (INNERMOST, 16)
    g = w @ x + r @ h
    want = 1 / (1 + np.exp(-g[:128])) * np.tanh(g[128:256])
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)


def test_lanes_reading_every_other_element_run_as_vectors(avx512_host):
    """A matrix-vector product whose vector is every other element of an input, through a relu
    (a select): the lanes cannot be unrolled into registers (gcc leaves selects scalar), and a
    load moving by 2 still takes the SIMD hint, not none (scalar: silero-vad's LSTM input)."""
    from fusegrad.uop.loops import LoopHint

    rng = np.random.default_rng(0)
    w = rng.standard_normal((512, 128), dtype=np.float32)
    x = rng.standard_normal(256, dtype=np.float32)
    tx = Tensor(x, device="CPU")
    out = Tensor(w, device="CPU") @ tx.reshape(128, 2)[:, 0].relu()
    rt = Device["CPU"]
    (step,) = out.schedule()
    kernel = generate(step.ast, rt.renderer, rt.rules)
    lanes = [u for u in kernel.program if u.op is Ops.RANGE and u.arg.kind.name == "LANE"]
    assert lanes and all(u.arg.hint is LoopHint.SIMD for u in lanes)
    np.testing.assert_allclose(out.numpy(), w @ np.maximum(x[::2], 0), rtol=1e-4, atol=1e-4)


def test_a_short_block_inside_a_long_reduction_takes_a_register_of_lanes():
    """Rows of 18 blocks of 32 (an 8-bit quantized weight's groups, scaled per block): the
    lanes add up over all 18 blocks, so they take a register's width, as a 4-bit block's 16
    do (32 took 4 lanes: SmolLM2's Q8_0 head ran at half speed in xmm registers)."""
    x = Tensor.rand(1, 1, 18, 32, device="CPU").realize()
    w = Tensor.rand(4096, 18, 1, device="CPU").realize()
    q = Tensor.rand(4096, 18, 32, device="CPU").realize()
    out = (x * (w * q)).sum((2, 3))
    for target, width in ((AVX2, 8), (AVX512, 16)):
        opts = heuristic_opts(_reduce_ast(out), target)
        assert opts is not None and opts.lanes is not None and opts.lanes[1] == width, opts
    np.testing.assert_allclose(
        out.numpy(), (x.numpy() * (w.numpy() * q.numpy())).sum((2, 3)), rtol=1e-4
    )


def _loop_kinds(t: Tensor) -> set:
    (step,) = t.schedule()
    rt = Device["CPU"]
    kernel = generate(step.ast, rt.renderer, rt.rules)
    return {u.arg.kind for u in kernel.program if u.op is Ops.RANGE}


def test_costly_elements_run_on_all_cores():
    """An elementwise kernel of 38,400 elements runs on one core when each is a few operations
    (a copy's pass over memory is cheaper than waking the others), on all of them when each is
    a 25-tap sum (a depthwise convolution: 63 us on one core)."""
    x = Tensor.rand(200, 2, 96 + 24, device="CPU")
    assert AxisKind.PARALLEL not in _loop_kinds((x[:, :, :96] * 2 + 1).contiguous())
    total = x[:, :, :96] * 0.5
    for t in range(1, 25):
        total = total + x[:, :, t : t + 96] * (0.5 + t)
    assert AxisKind.PARALLEL in _loop_kinds(total.contiguous())
    xn = x.numpy()
    want = sum(xn[:, :, t : t + 96] * np.float32(0.5 + t) for t in range(25))
    np.testing.assert_allclose(total.numpy(), want, rtol=1e-5, atol=1e-4)


def test_a_matvec_sums_in_lanes_over_a_tile_of_rows():
    """``x @ w.T`` for one row of x: the sum runs in lanes along w's rows, and several rows of
    w at once share each load of x (one row at a time, a (512, 128) weight took 46-54 us in a
    TinyJit call, 19-30 with 8 rows)."""
    x, w = Tensor.rand(1, 128, device="CPU"), Tensor.rand(512, 128, device="CPU")
    ast = _reduce_ast(x @ w.T)
    opts = heuristic_opts(ast, AVX512)
    assert opts.lanes is not None and opts.lanes[1] == 16
    assert opts.upcast == ((1, 8),)  # the output's 512 in rows of 8
    np.testing.assert_allclose((x @ w.T).numpy(), x.numpy() @ w.numpy().T, rtol=1e-5)


def test_a_short_sum_takes_a_register_of_lanes_not_two():
    """silero-vad's STFT, 258 filters of 256 taps over 5 frames: each output ends by adding
    its lanes up one by one, so a sum of 256 runs in 16 lanes (16 trips each), not 32 (8 trips:
    the adds at the end cost more than the multiply-adds); a sum of 4,096 keeps 64 lanes, and
    one of 128 a register's 16. Values as numpy's."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 1, 640), dtype=np.float32)
    w = rng.standard_normal((258, 1, 256), dtype=np.float32)
    y = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"), stride=128)
    opts = heuristic_opts(_reduce_ast(y), AVX512)
    assert opts.lanes is not None and opts.lanes[1] == 16
    frames = np.stack([x[0, 0, t * 128 : t * 128 + 256] for t in range(4)], axis=1)
    np.testing.assert_allclose(y.numpy()[0], w[:, 0] @ frames, rtol=1e-4, atol=1e-4)
    for length, lanes in ((4096, 64), (128, 16)):
        total = Tensor.rand(8, length, device="CPU").sum(1)
        assert heuristic_opts(_reduce_ast(total), AVX512).lanes == (1, lanes)


def test_a_sum_over_a_length_no_power_of_two_divides_still_runs_in_lanes():
    """6,625 (PP-OCR's characters, 5**3 * 53): 25 lanes, not one chain of dependent adds (its
    softmax's max and sum over 40 rows took 0.5 and 0.9 ms, 0.1 and 0.2 in lanes)."""
    x = Tensor.rand(40, 6625, device="CPU")
    opts = heuristic_opts(_reduce_ast(x.max(1)), AVX512)
    assert opts.lanes == (1, 25)
    np.testing.assert_allclose(x.softmax(1).numpy().sum(1), np.ones(40), rtol=1e-5)
    np.testing.assert_array_equal(x.max(1).numpy(), x.numpy().max(1))


def test_ragged_columns_run_as_full_vectors_with_the_last_block_shifted(avx512_host):
    """100 or 50 columns: no register-wide vector divides them (100 ran in vectors of 4 at 87
    GFLOP/s, 50 in none at 34); a vector of 32 runs at 0, 32, 64 and 68 (its last block shifted
    back to end at the axis's end), and the values are the product's."""
    for (m, k, n), vector in (((256, 784, 100), 32), ((50, 50, 50), 32), ((40, 30, 20), 8)):
        a, b = Tensor.rand(m, k, device="CPU"), Tensor.rand(k, n, device="CPU")
        opts = heuristic_opts(_reduce_ast(a @ b), AVX512)
        assert opts.upcast[-1] == (1, vector) and 1 in opts.shifted
        source = generate(_reduce_ast(a @ b), Device["CPU"].renderer, opts=opts).source
        assert f"-{n - vector}" in source  # (the clamp of a block's start: max(-start, -68))
        np.testing.assert_allclose((a @ b).numpy(), a.numpy() @ b.numpy(), rtol=1e-5, atol=1e-4)
    a, b = Tensor.rand(64, 32, device="CPU"), Tensor.rand(32, 96, device="CPU")
    assert heuristic_opts(_reduce_ast(a @ b), AVX512).shifted == ()  # (32 divides 96, 8 64)


def test_ragged_rows_of_a_tile_end_at_the_axis_end():
    """1024 rows in tiles of 6 (AVX2): the last tile starts at row 1018, overlapping the one
    before, instead of clamping each row into the axis; its rows then lie a fixed stride apart
    (gcc loaded two clamped rows as whole vectors to broadcast one element: 2-3% slower). The
    overlap is computed twice from the same inputs, so values, an in-place residual add among
    them, are the product's."""
    a, b = Tensor.rand(1024, 256, device="CPU"), Tensor.rand(256, 64, device="CPU")
    opts = heuristic_opts(_reduce_ast(a @ b), AVX2)
    assert opts.upcast[0] == (0, 6) and 0 in opts.shifted
    source = generate(_reduce_ast(a @ b), Device["CPU"].renderer, opts=opts).source
    assert "-1018" in source and "-1023" not in source  # (the block's start, not each row)
    even = _reduce_ast(Tensor.rand(1020, 8) @ Tensor.rand(8, 64))  # (6 divides 1020)
    assert heuristic_opts(even, AVX2).shifted == ()
    rng = np.random.default_rng(1)
    for rows in (1024, 1000, 7):
        x0, y, w = (rng.standard_normal(s, np.float32) for s in ((rows, 64), (rows, 96), (96, 64)))
        x = Tensor(x0).realize()
        x.assign(x + Tensor(y) @ Tensor(w)).realize()
        np.testing.assert_allclose(x.numpy(), x0 + y @ w, rtol=1e-4, atol=1e-4)


def test_ragged_batched_products_and_gradients_match_numpy():
    rng = np.random.default_rng(0)
    for sa, sb in (((32, 50, 50), (32, 50, 50)), ((7, 33), (33, 20)), ((5, 4, 30, 9), (9, 30))):
        x, y = rng.standard_normal(sa, np.float32), rng.standard_normal(sb, np.float32)
        tx, ty = Tensor(x, requires_grad=True), Tensor(y, requires_grad=True)
        out = tx @ ty
        gx, gy = (out * out).sum().gradient(tx, ty)
        ref = x @ y
        np.testing.assert_allclose(out.numpy(), ref, rtol=1e-4, atol=1e-4)
        want_x = 2 * ref @ np.swapaxes(y, -1, -2)
        want_y = (np.swapaxes(x, -1, -2) @ (2 * ref)).reshape(-1, *sb).sum(0)
        np.testing.assert_allclose(gx.numpy(), want_x, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(gy.numpy(), want_y, rtol=1e-4, atol=1e-3)


def test_a_single_row_product_streams_runs_of_columns():
    """(1, 2048) @ (2048, 2048) with w read in place: each of 2 cores sums 1024 columns at a
    time down w's rows (runs of 4 KB), not a panel of 32 down all 2048 rows (a page a step:
    0.65x torch); two rows, or a sum over rows alone, keep the register tile."""
    two_cores = _target(32, 64)
    two_cores.cache_threads = 2
    x, w = Tensor.rand(1, 2048, device="CPU"), Tensor.rand(2048, 2048, device="CPU")
    opts = heuristic_opts(_reduce_ast(x @ w), two_cores)
    assert opts.upcast == ((1, 1024),) and opts.shifted == ()
    odd = heuristic_opts(
        _reduce_ast(Tensor.rand(1, 64, device="CPU") @ Tensor.rand(64, 600)), two_cores
    )
    assert odd.upcast == ((1, 256),) and odd.shifted == (1,)  # (blocks at 0, 256 and 344)
    two = heuristic_opts(_reduce_ast(Tensor.rand(2, 2048, device="CPU") @ w), two_cores)
    assert two.upcast[-1][1] <= 32
    column_sums = heuristic_opts(
        _reduce_ast(Tensor.rand(2048, 2048, device="CPU").sum(0)), two_cores
    )
    assert column_sums is None or all(amount <= 32 for _, amount in column_sums.upcast)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((1, 600), np.float32), rng.standard_normal((600, 900), np.float32)
    np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-3)
