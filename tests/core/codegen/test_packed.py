"""A matmul operand read across its rows is packed by the kernel itself (codegen/packed.py)."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from fusegrad import Device, Tensor
from fusegrad.codegen.kernel import generate
from fusegrad.codegen.opt import GROUP_PANELS, heuristic_opts
from fusegrad.codegen.packed import pack_operands
from fusegrad.uop.loops import AxisKind, LoopHint
from fusegrad.uop.ops import Ops


def _programs(t: Tensor, renderer=None) -> list[list]:
    rt = Device["CPU"]
    return [list(generate(s.ast, renderer or rt.renderer, rt.rules).program) for s in t.schedule()]


def _realized(*shape: int, seed: int = 0) -> tuple[np.ndarray, Tensor]:
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return x, Tensor(x, device="CPU").realize()


def test_attention_scores_are_one_kernel_that_packs_the_keys_per_block_of_columns():
    """``q @ k^T`` with a head of 64: no copy kernel; the keys of a block of columns go into a
    local array (the head's length times the vector of columns) filled before the loop over the
    blocks of rows, inside the loop shared out between the cores; the tile reads only it."""
    qn, q = _realized(4, 4, 128, 64)
    kn, k = _realized(4, 4, 128, 64, seed=1)
    scores = q @ k.transpose(-1, -2)
    (program,) = _programs(scores)
    (shared,) = [u for u in program if u.op is Ops.DEFINE_LOCAL]
    vector = Device["CPU"].renderer.vector_bytes * 2 // 4
    assert shared.arg[1] == 64 * vector
    loops = [u for u in program if u.op is Ops.RANGE]
    at = program.index(shared)
    opened_before = [u for u in loops if program.index(u) < at]
    assert opened_before[0].arg.kind is AxisKind.PARALLEL  # (a local array per thread)
    rows = [u for u in loops if u.arg.kind is AxisKind.GLOBAL and program.index(u) > at]
    assert rows, "the blocks of rows loop after the filling"
    reads = [u for u in program if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
    inner = [u for u in reads if u.src[0].src[0] is shared]
    assert len(inner) == 1 and program.index(inner[0]) > program.index(rows[0])
    assert len([u for u in reads if u.src[0].src[0].op is Ops.PARAM]) == 1  # q
    # k fills it by blocks of 8 x 8 (the CPU's transpose_block), before the rows' loop
    fills = [u for u in program if u.op is Ops.TRANSPOSE_BLOCK]
    assert len(fills) == 1 and at < program.index(fills[0]) < program.index(rows[0])
    assert fills[0].src[0].src[0] is shared and fills[0].arg == (8, 64, vector)
    np.testing.assert_allclose(scores.numpy(), qn @ np.swapaxes(kn, -1, -2), rtol=1e-4, atol=1e-4)


def test_without_transpose_block_the_array_is_filled_one_element_at_a_time():
    """A renderer without ``transpose_block`` gets the filling as loads and stores; it computes
    the same values (so does a side the block does not divide, below)."""
    qn, q = _realized(2, 2, 64, 64)
    kn, k = _realized(2, 2, 64, 64, seed=1)
    (step,) = (q @ k.transpose(-1, -2)).schedule()
    renderer = copy.copy(Device["CPU"].renderer)
    for block, blocks in ((8, 1), (0, 0), (3, 0)):  # (3: no side of 64 x vector divides)
        renderer.transpose_block = block
        program = list(generate(step.ast, renderer).program)
        assert sum(u.op is Ops.TRANSPOSE_BLOCK for u in program) == blocks
        reads = [u for u in program if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.PARAM]
        assert len(reads) == 2 - blocks  # q, and k where it fills the array element by element


@pytest.mark.parametrize(
    "shape",
    [
        (2, 3, 64, 32),  # MiniLM's head
        (1, 1, 48, 64),  # columns a vector divides, rows the tile does not (clamped)
        (3, 100, 16),  # rows and columns no register width divides
        (1, 2, 96, 128),  # the longest head packed (16 KB on AVX-512)
        (2, 40, 60),  # a head the transposed 8 x 8 blocks do not divide: element by element
        (2, 64, 512),  # a head too long to pack: the layout pass's panels
    ],
)
def test_products_with_the_second_operand_transposed_compute_what_numpy_does(shape):
    an, a = _realized(*shape)
    bn, b = _realized(*shape, seed=1)
    np.testing.assert_allclose(
        (a @ b.transpose(-1, -2)).numpy(), an @ np.swapaxes(bn, -1, -2), rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize("dtype", [np.int32, np.float32])
def test_the_blocks_move_every_bit_of_four_byte_elements(dtype):
    """The blocks are shuffled as bits: integers and NaN payloads come through unchanged."""
    rng = np.random.default_rng(0)
    an = rng.integers(-1000, 1000, (2, 64, 32)).astype(dtype)
    bn = rng.integers(-1000, 1000, (2, 64, 32)).astype(dtype)
    expected = an.astype(np.int64) @ np.swapaxes(bn, -1, -2).astype(np.int64)
    a, b = Tensor(an, device="CPU"), Tensor(bn, device="CPU")
    product = a @ b.transpose(-1, -2)
    (program,) = _programs(product)
    assert any(u.op is Ops.TRANSPOSE_BLOCK for u in program)
    np.testing.assert_array_equal(product.numpy(), expected.astype(dtype))


def test_the_gradients_of_attention_scores_match_numpy():
    """Forward ``q @ k^T``, backward ``dy @ k`` and ``dy^T @ q`` (with ``dy`` from a square)."""
    qn, kn = (np.random.default_rng(s).standard_normal((2, 2, 64, 32), np.float32) for s in (0, 1))
    q, k = Tensor(qn, requires_grad=True), Tensor(kn, requires_grad=True)
    (q @ k.transpose(-1, -2)).square().sum().backward()
    dy = 2 * (qn @ np.swapaxes(kn, -1, -2))
    np.testing.assert_allclose(q.grad.numpy(), dy @ kn, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(k.grad.numpy(), np.swapaxes(dy, -1, -2) @ qn, rtol=1e-4, atol=1e-3)


def test_a_plain_matmul_keeps_its_tile_and_packs_nothing():
    """``a @ b`` with ``b``'s columns innermost: the tile loads vectors of ``b`` where they are;
    the broadcast rows of ``a`` (read across its rows too) are not an operand to pack."""
    _, a = _realized(64, 256)
    _, b = _realized(256, 128, seed=1)
    for program in _programs(a @ b):
        assert not any(u.op is Ops.DEFINE_LOCAL for u in program)


def test_without_pack_bytes_nothing_is_packed_and_the_pass_changes_nothing():
    _, q = _realized(2, 64, 32)
    _, k = _realized(2, 64, 32, seed=1)
    renderer = copy.copy(Device["CPU"].renderer)
    renderer.pack_bytes = 0
    (step,) = (q @ k.transpose(-1, -2)).schedule()
    program = list(generate(step.ast, renderer, opts=heuristic_opts(step.ast, renderer)).program)
    assert not any(u.op is Ops.DEFINE_LOCAL for u in program)
    assert pack_operands(program, 0) is program
    assert pack_operands(program, 1 << 20) == program  # (a dot-product tile: nothing to pack)


def test_a_panel_longer_than_pack_bytes_is_not_packed():
    """The tile chosen for the CPU (packing a panel of 64 x vector floats), generated for a
    renderer allowing half that: the pass packs nothing, and that renderer's own plan is
    another one."""
    _, q = _realized(2, 64, 64)
    _, k = _realized(2, 64, 64, seed=1)
    (step,) = (q @ k.transpose(-1, -2)).schedule()
    renderer = Device["CPU"].renderer
    packed = list(generate(step.ast, renderer).program)
    (shared,) = [u for u in packed if u.op is Ops.DEFINE_LOCAL]
    small = copy.copy(renderer)
    small.pack_bytes = shared.arg[1] * 4 // 2
    tile = heuristic_opts(step.ast, renderer)
    assert heuristic_opts(step.ast, small) != tile
    for opts in (tile, heuristic_opts(step.ast, small)):
        program = generate(step.ast, small, opts=opts).program
        assert not any(u.op is Ops.DEFINE_LOCAL for u in program)


def test_a_product_with_fewer_columns_than_a_register_sums_in_lanes_instead(avx512_host):
    """silero-vad's STFT, (258, 256) @ (4, 256)^T: a tile of 4 columns (less than a register)
    ran slower than a dot product per output over vector lanes, which it keeps."""
    an, a = _realized(258, 256)
    bn, b = _realized(4, 256, seed=1)
    product = a @ b.transpose(-1, -2)
    (step,) = product.schedule()
    opts = heuristic_opts(step.ast, Device["CPU"].renderer)
    assert opts is not None and opts.lanes is not None
    np.testing.assert_allclose(product.numpy(), an @ bn.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows", [(96,), (100,), (4, 30)])
def test_a_row_major_right_operand_is_packed_a_group_of_panels_at_a_time(rows):
    """``a @ b`` with ``b`` (256, 1024) row-major, no layout copy: the kernel loops over groups
    of column panels outermost (shared out between the cores); each fills a local array of
    (panels, 256, vector) floats from ``b`` before its loop over the blocks of rows, and the
    register tile reads only that array. Rows the tile does not divide too (100 of 6 or 8), and
    a batch of rows (a linear layer's (batch, time, features) input)."""
    an, a = _realized(*rows, 256)
    bn, b = _realized(256, 1024, seed=1)
    (program,) = _programs(a @ b)
    (shared,) = [u for u in program if u.op is Ops.DEFINE_LOCAL]
    vector = Device["CPU"].renderer.vector_bytes * 2 // 4
    panels = shared.arg[1] // (256 * vector)
    assert panels in GROUP_PANELS and shared.arg[1] == panels * 256 * vector
    loops = [u for u in program if u.op is Ops.RANGE]
    at = program.index(shared)
    assert [u for u in loops if program.index(u) < at][0].arg.kind is AxisKind.PARALLEL
    rows_loop = next(u for u in loops if u.arg.kind is AxisKind.GLOBAL and program.index(u) > at)
    reads = [u for u in program if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX]
    inner = [u for u in reads if u.src[0].src[0] is shared]
    assert len(inner) == 1 and program.index(inner[0]) > program.index(rows_loop)
    fills = [u for u in reads if program.index(u) < program.index(rows_loop)]
    assert len(fills) == 1 and fills[0].src[0].src[0].op is Ops.PARAM  # b, before the rows
    np.testing.assert_allclose((a @ b).numpy(), an @ bn, rtol=1e-4, atol=1e-4)


def test_a_group_larger_than_group_bytes_is_not_packed():
    """The group chosen for the CPU, generated for a renderer allowing less: nothing packed,
    and the values are the same."""
    an, a = _realized(96, 256)
    bn, b = _realized(256, 1024, seed=1)
    (step,) = (a @ b).schedule()
    renderer = Device["CPU"].renderer
    (shared,) = [u for u in generate(step.ast, renderer).program if u.op is Ops.DEFINE_LOCAL]
    small = copy.copy(renderer)
    small.group_pack_bytes = shared.arg[1] * 4 // 2
    program = generate(step.ast, small, opts=heuristic_opts(step.ast, renderer)).program
    assert not any(u.op is Ops.DEFINE_LOCAL for u in program)
    assert pack_operands(list(program), 0, 0, 1 << 20) != list(program)  # (with room: packed)


def _blocked_renderer(block: int):
    renderer = copy.copy(Device["CPU"].renderer)
    renderer.transpose_block = block
    return renderer


def test_an_elementwise_kernel_reading_an_input_transposed_reads_it_by_square_blocks():
    """``m * 0.9 + g.T * 0.1`` (an optimizer update of a gradient stored transposed, as GPT's
    tied embedding gets it): both output axes upcast by the CPU's block of 8, the gradient
    transposed 8 x 8 at a time into a local array before the block's rows, and the innermost
    loop, along the output's rows, reads that array and ``m`` as runs: it runs as vectors."""
    mn, m = _realized(64, 128)
    gn, g = _realized(128, 64, seed=1)
    update = m * 0.9 + g.T * 0.1
    (step,) = update.schedule()
    assert heuristic_opts(step.ast, Device["CPU"].renderer).upcast == ((0, 8), (1, 8))
    (program,) = _programs(update)
    (fill,) = [u for u in program if u.op is Ops.TRANSPOSE_BLOCK]
    (shared,) = [u for u in program if u.op is Ops.DEFINE_LOCAL]
    assert shared.arg[1] == 64 and fill.src[0].src[0] is shared
    assert fill.arg == (8, 64, 8)  # (g's rows are 64 elements apart; the array's are 8)
    rows, columns = [u for u in program if u.op is Ops.RANGE][-2:]
    assert program.index(fill) < program.index(rows) < program.index(columns)
    assert columns.arg.hint is LoopHint.SIMD
    params = [u for u in program if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.PARAM]
    assert len(params) == 1  # m; g only through the blocks
    np.testing.assert_allclose(update.numpy(), mn * 0.9 + gn.T * 0.1, rtol=1e-6)


@pytest.mark.parametrize(
    "shape",
    [
        (256, 1024),  # a weight's transpose, copied
        (64, 40),  # both sides multiples of 8, one of them not of 16
        (60, 100),  # no side the block divides: rows taken 8 at a time, as without blocks
        (3, 5, 24, 16),  # the transpose of the last two axes of a batch
    ],
)
def test_a_transposed_copy_equals_numpys_with_and_without_blocks(shape):
    xn, x = _realized(*shape)
    step = x.transpose(-1, -2).contiguous()
    (ast,) = [s.ast for s in step.schedule()]
    for block in (8, 0):
        program = list(generate(ast, _blocked_renderer(block)).program)
        blocks = sum(u.op is Ops.TRANSPOSE_BLOCK for u in program)
        assert blocks == (1 if block and shape[-1] % 8 == 0 == shape[-2] % 8 else 0)
    np.testing.assert_array_equal(step.numpy(), np.swapaxes(xn, -1, -2))


@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.float64, np.uint8])
def test_transposed_reads_of_every_element_size_keep_their_values(dtype):
    """Only 4-byte elements go through the blocks (their bits shuffled unchanged: integers too);
    the other sizes keep the row tile, with the same values."""
    rng = np.random.default_rng(3)
    an = rng.integers(0, 100, (64, 32)).astype(dtype)
    bn = rng.integers(0, 100, (32, 64)).astype(dtype)
    out = Tensor(an) + Tensor(bn).T
    (program,) = _programs(out)
    assert any(u.op is Ops.TRANSPOSE_BLOCK for u in program) == (an.itemsize == 4)
    np.testing.assert_array_equal(out.numpy(), an + bn.T)


def test_a_transposed_read_under_a_pad_keeps_its_row_tile():
    """A read behind a pad's gate (the transposed input padded) is not a plain run of blocks:
    left as it is, with numpy's values."""
    xn, x = _realized(64, 32)
    out = x.T.pad(((0, 0), (8, 8))) + 1
    np.testing.assert_array_equal(out.numpy(), np.pad(xn.T, ((0, 0), (8, 8))) + 1)
