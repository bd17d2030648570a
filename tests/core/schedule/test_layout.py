"""The layout pass (schedule/layout.py): copies and splits for the target, made at schedule time."""

from __future__ import annotations

import numpy as np

from fusegrad import Tensor
from fusegrad.schedule.layout import Capabilities, lay_out
from fusegrad.tensor.movement import _unreshaped
from fusegrad.uop.ops import Ops, UOp, toposort

CPU = Capabilities(vector_bytes=32)  # loops over its output, on several threads
GRID = Capabilities(vector_bytes=16, grid_dims=1)
ONE_THREAD = Capabilities(vector_bytes=32, parallel_threshold=1 << 40)


def _laid_out(t: Tensor, caps: Capabilities) -> list[UOp]:
    (root,) = lay_out((_unreshaped(t.uop),), [t.device], lambda _device: caps)
    return toposort([root])


def _count(nodes: list[UOp], op: Ops) -> int:
    return sum(u.op is op for u in nodes)


def _realized(*shape: int) -> Tensor:
    return Tensor.empty(*shape, device="CPU")


def test_the_tensor_graph_has_no_layout_copies_or_splits():
    """Tensor builds the math only: no panel copy, no weight copy, one reduce for a long sum."""
    matmul = _realized(256, 256) @ _realized(256, 256)
    conv = _realized(8, 3, 28, 28).conv2d(_realized(16, 3, 5, 5))
    for t in (matmul, conv):
        assert _count(toposort([t.uop]), Ops.CONTIGUOUS) == 0
    assert _count(toposort([_realized(1 << 20).sum().uop]), Ops.REDUCE_AXIS) == 1


def test_matmul_reads_its_right_operand_from_panels_on_a_target_that_loops_over_its_output():
    nodes = _laid_out(_realized(64, 256) @ _realized(256, 512), CPU)
    (copy,) = [u for u in nodes if u.op is Ops.CONTIGUOUS]
    assert copy.shape == (512 // 16, 256, 16)  # (m / p, k, p): p = two 32-byte registers of floats


def test_a_right_operand_that_fits_a_quarter_of_l2_is_read_as_it_is():
    """A GPT's (256, 256) projection weight (256 KB) is read from L2 whatever its layout: the
    product reads it in place (the copy was a tenth of the product's time); one twice as large
    is copied into panels, unless the target's vectors are 64 bytes."""
    small = _laid_out(_realized(512, 256) @ _realized(256, 256), CPU)
    assert _count(small, Ops.CONTIGUOUS) == 0
    large = _laid_out(_realized(512, 256) @ _realized(256, 512), CPU)
    assert _count(large, Ops.CONTIGUOUS) == 1
    # with 64-byte vectors (AVX-512) twice as large an operand is read in place
    wide = Capabilities(vector_bytes=64)
    assert _count(_laid_out(_realized(512, 256) @ _realized(256, 512), wide), Ops.CONTIGUOUS) == 0
    assert _count(_laid_out(_realized(512, 512) @ _realized(512, 512), wide), Ops.CONTIGUOUS) == 1


def test_a_right_operand_of_columns_no_panel_divides_is_padded_into_panels():
    """PP-OCR's last product (40, 120) @ (120, 6625 characters): the weight is copied into
    panels with zero columns after its last one, the product computed over 6,640 columns and
    the extra ones cut off; values, bias and a softmax over the classes are numpy's. Padding
    that would add more than a quarter of the work is not done."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((40, 120), np.float32), rng.standard_normal((120, 6625), np.float32)
    bias = rng.standard_normal(6625, np.float32)
    y = Tensor(x, device="CPU") @ Tensor(w, device="CPU")
    nodes = _laid_out(y, CPU)
    copy, product = [u for u in nodes if u.op is Ops.CONTIGUOUS]
    assert copy.shape == (6640 // 16, 120, 16)  # p = 16 here: two 32-byte registers of floats
    # the product stored whole (a kernel storing the kept columns only would loop over those)
    assert product.src[0].op is Ops.REDUCE_AXIS and product.shape == (40, 6640, 1)
    assert nodes[-1].op is Ops.SHRINK and nodes[-1].shape == (40, 6625, 1)
    want = x @ w
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
    probs = (y + Tensor(bias, device="CPU")).softmax(-1).numpy()
    e = np.exp(want + bias - (want + bias).max(-1, keepdims=True))
    np.testing.assert_allclose(probs, e / e.sum(-1, keepdims=True), rtol=1e-3, atol=1e-6)
    assert _copies(_realized(64, 512) @ _realized(512, 200))[0] == (13, 512, 16)  # 4% more
    assert _copies(_realized(64, 2048) @ _realized(2048, 40))[0] == (3, 2048, 16)  # 20% more
    assert _copies(_realized(64, 2048) @ _realized(2048, 36)) == []  # 36 -> 48: a third more


def test_matmul_reads_its_right_operand_in_place_on_a_grid_or_when_small():
    assert _count(_laid_out(_realized(64, 256) @ _realized(256, 512), GRID), Ops.CONTIGUOUS) == 0
    assert _count(_laid_out(_realized(64, 128) @ _realized(128, 128), CPU), Ops.CONTIGUOUS) == 0


def test_convolution_weight_is_copied_with_output_channels_innermost():
    nodes = _laid_out(_realized(8, 3, 28, 28).conv2d(_realized(16, 3, 5, 5)), GRID)
    (copy,) = [u for u in nodes if u.op is Ops.CONTIGUOUS]
    assert copy.shape == (1, 3, 5, 5, 16)  # (groups, C_in, *kernel, C_out)


def test_convolution_weight_is_copied_in_panels_of_filters_on_a_loop_target():
    """64 filters on a target whose panel is 16 floats: (groups, C_out / 16, C_in * kernel, 16),
    each step along C_in reading the tile's filters as one run, the copy a transpose of two
    axes (C_in and the kernel one axis of taps); values are numpy's."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 12, 12), dtype=np.float32)
    w = rng.standard_normal((64, 3, 3, 3), dtype=np.float32)
    y = Tensor(x, device="CPU").conv2d(Tensor(w, device="CPU"))
    assert _copies(y) == [(1, 4, 27, 16)]
    windows = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(2, 3))
    np.testing.assert_allclose(
        y.numpy(), np.einsum("nchwij,ocij->nohw", windows, w), rtol=1e-4, atol=1e-4
    )


def test_pointwise_convolution_reads_its_input_from_panels_of_positions():
    """A 1x1 convolution of 64 filters over 64 channels is ``w @ x`` per image: its input is
    copied into panels of 16 positions (N, P / 16, C_in, 16), the positions one axis (40x40:
    rows of 40 split into panels of 16 cost a division per load), its weight read in place;
    the input's own computation (x * 2) stays a kernel of its own. Values, with a bias and a
    ReLU after, are numpy's; 32 filters, strides, pads and groups keep the usual plan."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 64, 40, 40), dtype=np.float32)
    w = rng.standard_normal((64, 64, 1, 1), dtype=np.float32)
    bias = rng.standard_normal(64, dtype=np.float32)
    tx, tw = Tensor(x, device="CPU"), Tensor(w, device="CPU")
    y = (tx * 2).conv2d(tw, Tensor(bias, device="CPU")).relu()
    nodes = _laid_out(y, CPU)
    computed, panels = [u for u in nodes if u.op is Ops.CONTIGUOUS]
    assert computed.src[0].op is Ops.MUL and panels.shape == (2, 100, 64, 16)
    (red,) = [u for u in nodes if u.op is Ops.REDUCE_AXIS]
    assert red.shape == (2, 1, 64, 1, 1600, 1, 1, 1)
    want = np.maximum(np.einsum("nchw,oc->nohw", 2 * x, w[:, :, 0, 0]) + bias[:, None, None], 0)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
    assert len(_copies(tx.conv2d(_realized(64, 64, 1, 1)))) == 1  # the input as it is: a copy
    half = w.astype(np.float16)  # a weight of another dtype: cast where it is broadcast
    np.testing.assert_allclose(
        tx.conv2d(Tensor(half, device="CPU")).numpy(),
        np.einsum("nchw,oc->nohw", x, half[:, :, 0, 0].astype(np.float32)),
        rtol=1e-4,
        atol=1e-4,
    )
    for other in (
        tx.conv2d(_realized(32, 64, 1, 1)),
        tx.conv2d(_realized(64, 64, 1, 1), stride=2),
        tx.conv2d(_realized(64, 64, 1, 1), padding=1),
        tx.conv2d(_realized(64, 32, 1, 1), groups=2),
    ):
        # the weight's panels only (64 x 64 elements or fewer), no copy of the input
        assert all(np.prod(shape) <= 64 * 64 for shape in _copies(other))


def test_filters_of_no_vector_width_keep_their_layout_and_a_one_sided_reflect_pad_is_copied():
    """An STFT as a strided conv (silero-vad): 258 filters make no vector, so the weight keeps
    its taps innermost (read transposed, each tap came from a line of its own); the input
    reflect-padded on one side only is still copied (cat drops the empty left piece, whose
    zero term hid the join from the layout pass), and the values are torch-like."""
    x = Tensor(np.random.default_rng(0).standard_normal((1, 1, 576), dtype=np.float32))
    w = Tensor(np.random.default_rng(1).standard_normal((258, 1, 256), dtype=np.float32))
    y = x.pad(((0, 0), (0, 0), (0, 64)), mode="reflect").conv2d(w, stride=128)
    (copy,) = [u for u in _laid_out(y, CPU) if u.op is Ops.CONTIGUOUS]
    assert copy.shape == (1, 1, 640)  # the padded input; no weight copy
    xp = np.pad(x.numpy()[0, 0], (0, 64), mode="reflect")
    frames = np.stack([xp[t * 128 : t * 128 + 256] for t in range(4)], axis=1)
    np.testing.assert_allclose(y.numpy()[0], w.numpy()[:, 0] @ frames, rtol=1e-4, atol=1e-4)


def test_cat_of_an_empty_piece_adds_no_term():
    a, empty = Tensor([1.0, 2.0]), Tensor.empty(0)
    joined = a.cat(empty, a, dim=0)
    assert _count(toposort([joined.uop]), Ops.ADD) == 1
    assert joined.tolist() == [1.0, 2.0, 1.0, 2.0]
    assert Tensor.cat(empty, empty).shape == (0,)


def test_long_full_sum_is_split_where_the_device_runs_parts_in_parallel():
    big = _realized(1 << 20).sum()
    assert _count(_laid_out(big, CPU), Ops.REDUCE_AXIS) == 2
    assert _count(_laid_out(big, GRID), Ops.REDUCE_AXIS) == 2
    assert _count(_laid_out(big, ONE_THREAD), Ops.REDUCE_AXIS) == 1
    assert _count(_laid_out(_realized(1 << 10).sum(), CPU), Ops.REDUCE_AXIS) == 1


def test_laid_out_kernels_compute_the_same_values():
    Tensor.manual_seed(0)
    x = Tensor.rand(1 << 19, device="CPU")
    a, b = Tensor.rand(96, 256, device="CPU"), Tensor.rand(256, 1024, device="CPU")
    assert len(x.sum().schedule()) == 2  # the 64 partial sums, their sum
    # (one kernel: the product packs its right operand's panels itself, a group at a time)
    assert len((a.realize() @ b.realize()).schedule()) == 1
    np.testing.assert_allclose(x.sum().numpy(), x.numpy().astype(np.float64).sum(), rtol=1e-5)
    np.testing.assert_allclose(x.max().numpy(), x.numpy().max())
    np.testing.assert_allclose((a @ b).numpy(), a.numpy() @ b.numpy(), rtol=1e-4)


def test_gradients_are_taken_on_the_plain_graph():
    """The split happens after autograd: the max's gradient is shared equally among its ties,
    two in the first of the 64 parts and one in the last (split first, they got 1/4, 1/4, 1/2)."""
    values = np.zeros(1 << 18, np.float32)
    values[[0, 1, -1]] = 1.0
    x = Tensor(values, device="CPU", requires_grad=True)
    x.max().backward()
    np.testing.assert_allclose(x.grad.numpy()[[0, 1, -1]], [1 / 3] * 3, rtol=1e-6)
    assert x.grad.numpy()[2:-1].sum() == 0


def _copies(t: Tensor, caps: Capabilities = CPU) -> list[tuple[int, ...]]:
    return [u.shape for u in _laid_out(t, caps) if u.op is Ops.CONTIGUOUS]


def test_attention_scores_read_the_keys_from_panels():
    """``q @ k.T``: the keys (..., m, k) hold k innermost; they are copied into panels of p
    columns of the product, (..., m / p, k, p), batch axes kept."""
    q, k = _realized(4, 4, 128, 64), _realized(4, 4, 128, 64)
    assert _copies(q @ k.transpose(-1, -2)) == [(4, 4, 1, 128 // 16, 64, 16)]
    assert _copies(q @ k.transpose(-1, -2), GRID) == []


def test_backward_matmul_over_the_second_last_axis_reads_a_transposed_weight_from_panels():
    """Autograd sums ``dy[..., k, 1] * w.T[1, k, m]`` over the second-last axis; with ``w``
    (m, k) row-major the columns m are 256 apart, so ``w`` is copied into (m / p, k, p)."""
    dy, w = _realized(4, 128, 256), _realized(1024, 256)
    product = dy.reshape(4, 128, 256, 1) * w.T.reshape(1, 1, 256, 1024)
    assert _copies(product.sum(2)) == [(1, 1, 1024 // 16, 256, 16)]


def test_a_right_operand_with_its_columns_innermost_is_read_in_place():
    p, v = _realized(4, 4, 128, 128), _realized(4, 4, 128, 64)
    assert _copies(p @ v) == []
    small = _realized(16, 64) @ _realized(16, 64).T  # 16 x 64: a copy would cost as much
    assert _copies(small) == []


def test_panelled_matmuls_compute_the_same_values():
    rng = np.random.default_rng(0)
    # (a head of 2048: longer than the CPU kernel packs itself, codegen/packed.py, at any
    # vector width: 2048 x 8 floats are 64 KB)
    q, k = (rng.standard_normal((2, 3, 64, 2048), dtype=np.float32) for _ in range(2))
    dy = rng.standard_normal((3, 24, 2048), np.float32)
    w = rng.standard_normal((96, 2048), np.float32)
    got = Tensor(q, device="CPU") @ Tensor(k, device="CPU").transpose(-1, -2)
    assert len(got.schedule()) == 2  # the panels, the matmul
    np.testing.assert_allclose(got.numpy(), q @ np.swapaxes(k, -1, -2), rtol=1e-4, atol=1e-4)
    t_dy, t_w = Tensor(dy, device="CPU"), Tensor(w, device="CPU")
    summed = (t_dy.reshape(3, 24, 2048, 1) * t_w.T.reshape(1, 1, 2048, 96)).sum(2)
    assert len(summed.schedule()) == 2
    np.testing.assert_allclose(summed.numpy(), dy @ w.T, rtol=1e-4, atol=1e-4)


def test_a_weight_gradient_is_summed_in_the_weights_layout():
    """Autograd gives ``w``'s gradient as the transpose of a sum shaped like ``w.T``; the pass
    moves the permute onto the sum's source, so the gradient is written as ``w`` is laid out
    and the optimizer reads it row by row."""
    x = Tensor.rand(4, 8, 16, device="CPU").realize()
    w = Tensor.rand(16, 24, device="CPU", requires_grad=True).realize()
    (x @ w).square().sum().backward()
    nodes = _laid_out(w.grad * 2, CPU)
    (red,) = [u for u in nodes if u.op is Ops.REDUCE_AXIS and u.shape[-2:] == (16, 24)]
    assert red.src[0].op is Ops.PERMUTE
    assert not any(u.op is Ops.PERMUTE and u.shape == (16, 24) for u in nodes)
    xs = x.numpy().reshape(-1, 16)
    want = 2 * xs.T @ (2 * (xs @ w.numpy()))
    np.testing.assert_allclose((w.grad * 2).numpy(), want, rtol=1e-4)


def test_a_sum_read_also_unpermuted_is_left_in_its_order():
    s = _realized(8, 16, 16).sum(0)
    both = s.T + s  # read through a permute and directly
    nodes = _laid_out(both, CPU)
    assert all(u.src[0].op is not Ops.PERMUTE for u in nodes if u.op is Ops.REDUCE_AXIS)


def test_a_weight_gradient_reads_its_aliasing_operand_from_panels():
    """A linear layer's weight gradient ``x^T @ dy`` (autograd sums it through a permute, over
    batch and time): the operand whose rows are 4 KB long (1024 floats) is read from panels of
    all 512 rows, whichever side of the product it is on, for both layers' shapes; values as
    numpy's. With 32-byte vectors the (256, 1024) layer's rows, ``x`` read across its rows of
    256, are copied along the sum too (``rows_along_sum``); with 64-byte ones they are not."""
    rng = np.random.default_rng(0)
    wide = Capabilities(vector_bytes=64)
    for n_in, n_out in ((256, 1024), (1024, 256)):
        x = Tensor(rng.standard_normal((4, 128, n_in), dtype=np.float32), requires_grad=True)
        w = Tensor(rng.standard_normal((n_in, n_out), dtype=np.float32), requires_grad=True)
        dy = rng.standard_normal((4, 128, n_out), dtype=np.float32)
        ((x @ w) * Tensor(dy)).sum().backward()
        copies = [u for u in _laid_out(w.grad, CPU) if u.op is Ops.CONTIGUOUS]
        rows = [(256, 4, 128)] if n_in == 256 else []  # (x's rows, its sum's axes last)
        assert sorted(_unpadded(c.shape) for c in copies) == [(64, 512, 16), *rows]
        copies = [u for u in _laid_out(w.grad, wide) if u.op is Ops.CONTIGUOUS]
        assert [c.shape[-3:] for c in copies] == [(1024 // 32, 512, 32)], (n_in, n_out)
        want = x.numpy().reshape(512, n_in).T @ dy.reshape(512, n_out)
        np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-4, atol=1e-3)


def _unpadded(shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` without its leading 1s."""
    while shape and shape[0] == 1:
        shape = shape[1:]
    return shape


def test_a_tied_weights_two_gradients_are_summed_in_its_layout():
    """A weight used as ``x @ w`` and as ``y @ w.T`` (a tied embedding and output head): autograd
    adds the two gradients, then transposes the sum; the pass moves the permute into both sums,
    so nothing reads the gradient transposed (the GPT's embedding update ran 2.6 -> 1.6 ms)."""
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((4, 8, 16), dtype=np.float32))
    y = Tensor(rng.standard_normal((4, 8, 24), dtype=np.float32))
    w = Tensor(rng.standard_normal((16, 24), dtype=np.float32), requires_grad=True)
    ((x @ w).square().sum() + (y @ w.T).square().sum()).backward()
    nodes = _laid_out(w.grad * 2, CPU)

    def below_reshapes(u: UOp) -> UOp:
        return below_reshapes(u.src[0]) if u.op is Ops.RESHAPE else u

    permuted = [u for u in nodes if u.op is Ops.PERMUTE and u.shape == (16, 24)]
    assert not any(below_reshapes(u.src[0]).op in (Ops.REDUCE_AXIS, Ops.ADD) for u in permuted)
    sums = [u for u in nodes if u.op is Ops.REDUCE_AXIS and u.size == 16 * 24]
    assert len(sums) == 2
    xs, ys, wn = x.numpy().reshape(-1, 16), y.numpy().reshape(-1, 24), w.numpy()
    want = 2 * (xs.T @ (2 * xs @ wn) + (ys.T @ (2 * ys @ wn.T)).T)
    np.testing.assert_allclose((w.grad * 2).numpy(), want, rtol=1e-4, atol=1e-4)


def test_a_narrow_product_copies_its_panels_in_a_kernel_of_their_own():
    """With 32 KB to pack (the CPU's ``pack_bytes``) and 64-byte vectors, a transposed operand of
    256 x 32 floats per panel is packed inside the kernel when the product has 8 blocks of
    columns or more; with 2 or 4 and no batch axes, the loop over them would run together with
    the rows' and each block of rows would fill its panel again: it is copied into panels first,
    a kernel of its own. Attention's keys, 4 x 4 heads of 4 blocks, are packed inside (the heads'
    loop merges with the blocks', the rows stay inside)."""
    caps = Capabilities(vector_bytes=64, pack_bytes=32 * 1024)
    x = _realized(512, 256)
    assert _copies(x @ _realized(256, 256).T, caps) == []  # 8 blocks of 32 columns
    assert _copies(x @ _realized(64, 256).T, caps) == [(1, 2, 256, 32)]  # 2 blocks
    assert _copies(x @ _realized(128, 256).T, caps) == [(1, 4, 256, 32)]
    assert _copies(_realized(512, 128) @ _realized(64, 128).T, caps) == [(1, 2, 128, 32)]
    q, k = _realized(4, 4, 128, 64), _realized(4, 4, 128, 64)
    assert _copies(q @ k.transpose(-1, -2), caps) == []


def test_a_row_operand_read_across_its_rows_is_copied_along_the_sum_with_narrow_vectors():
    """``x.T @ dy`` reads x (512, 1024) across its rows: each step of the sum a line of its own,
    4 KB after the last. With 32-byte vectors (AVX2) x is copied with the sum innermost, (1024,
    512) in memory, and the kernel reads each row as one run; with 64-byte vectors it is read
    in place. Values as numpy's, with the copy."""
    rng = np.random.default_rng(1)
    x_np = rng.standard_normal((512, 1024), dtype=np.float32)
    dy_np = rng.standard_normal((512, 256), dtype=np.float32)
    x, dy = Tensor(x_np), Tensor(dy_np)
    product = x.T @ dy
    copies = [u for u in _laid_out(product, CPU) if u.op is Ops.CONTIGUOUS]
    assert sorted(_unpadded(c.shape) for c in copies) == [(16, 512, 16), (1024, 1, 512)]
    wide = [u for u in _laid_out(product, Capabilities(vector_bytes=64))]
    assert not any(_unpadded(u.shape) == (1024, 1, 512) for u in wide if u.op is Ops.CONTIGUOUS)
    np.testing.assert_allclose(product.numpy(), x_np.T @ dy_np, rtol=1e-4, atol=1e-3)


def test_rows_read_along_the_sum_batched_or_narrow_products_keep_their_operand():
    """No copy along the sum for: a row operand already read along it (``x @ w``, and the
    attention output's heads merged through a permute, each row runs of 64); a batched product
    (attention's ``p.T @ dout``: the heads are batch axes, the probabilities stay in the fused
    attention); a product of fewer than ``ROWS_COPIED_COLUMNS`` columns, or a sum shorter than
    ``ROWS_COPIED_SUM``."""
    plain = _realized(512, 256) @ _realized(256, 256)
    heads = _realized(4, 4, 128, 64).permute(0, 2, 1, 3).reshape(4, 128, 256)
    merged = heads @ _realized(256, 256)
    batched = _realized(4, 4, 128, 128).transpose(-1, -2) @ _realized(4, 4, 128, 64)
    narrow = _realized(512, 1024).T @ _realized(512, 32)
    short = _realized(32, 1024).T @ _realized(32, 256)  # (a sum of 32: below ROWS_COPIED_SUM)
    for t in (plain, merged, batched, narrow, short):
        assert _count(_laid_out(t, CPU), Ops.CONTIGUOUS) == 0
    # (the guard of the columns: with 64 of them the rows are copied)
    wider = _laid_out(_realized(512, 1024).T @ _realized(512, 64), CPU)
    assert [_unpadded(u.shape) for u in wider if u.op is Ops.CONTIGUOUS] == [(1024, 1, 512)]


def test_a_right_operand_a_kernel_packs_by_groups_of_panels_gets_no_copy():
    """A matmul whose row-major right operand fits a group of at least 4 panels in
    ``group_pack_bytes`` (leaving 8 groups or more) reads it in place, over a batch of rows too,
    its kernel packing the panels (codegen/packed.py); without that capability, or with a
    group too large for it, or too few groups, the operand is copied into panels as before."""
    grouped = Capabilities(vector_bytes=32, group_pack_bytes=256 * 1024)
    product = _realized(96, 256) @ _realized(256, 1024)  # 64 panels of 16: 8 groups of 8
    assert _count(_laid_out(product, grouped), Ops.CONTIGUOUS) == 0
    assert _count(_laid_out(product, CPU), Ops.CONTIGUOUS) == 1
    batched = _realized(4, 96, 256) @ _realized(256, 1024)
    assert _count(_laid_out(batched, grouped), Ops.CONTIGUOUS) == 0
    # a sum of 2048: 4 panels of 2048 x 16 floats are 512 KB
    assert (
        _count(_laid_out(_realized(96, 2048) @ _realized(2048, 1024), grouped), Ops.CONTIGUOUS) == 1
    )
    # 32 panels: 8 groups of 4 at the least; 16 panels: fewer than 8 groups
    assert _count(_laid_out(_realized(96, 256) @ _realized(256, 512), grouped), Ops.CONTIGUOUS) == 0
    assert _count(_laid_out(_realized(96, 512) @ _realized(512, 256), grouped), Ops.CONTIGUOUS) == 1


def test_the_padded_panel_is_copied_apart_so_the_whole_ones_read_runs(avx512_host):
    """A 1000-column operand's panels: padded as one, each element's column was tested against
    1000 and clamped (``min(column, 999)``), and gcc read the operand one element at a time
    (1.9-3.7 ms for 4 MB); the whole panels and the padded last one are now two pieces of one
    copy, and no load is clamped to the last column."""
    from fusegrad import Device
    from fusegrad.codegen.kernel import generate

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((300, 200), np.float32), rng.standard_normal((200, 1000), np.float32)
    y = Tensor(a, device="CPU") @ Tensor(b, device="CPU")
    copies = [s for s in y.schedule() if s.ast.src[0].src[1].op is not Ops.REDUCE_AXIS]
    sources = [generate(s.ast, Device["CPU"].renderer).source for s in copies]
    panel = [src for src in sources if "992" in src]  # (the last panel's first column)
    assert panel and all("-999" not in src for src in panel)
    np.testing.assert_allclose(y.numpy(), a @ b, rtol=1e-4, atol=1e-4)
