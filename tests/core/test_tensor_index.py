"""``tensor/index.py``: what is not a comparison of values with torch (those are one line each in
tests/core/differential): errors as torch's, spellings, ``size=`` shapes, copies, dtypes kept."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.errors import ShapeError

from .torch_helpers import f32, i32, rand, torch

# ---- gathers and scatters ------------------------------------------------------------------------


def test_scatter_errors_as_torch():
    x, tx = Tensor.zeros(3, 4), torch.zeros(3, 4)
    idx, tidx = Tensor([[0, 1]]), torch.tensor([[0, 1]])
    # an unknown reduction, and a src of another dtype: RuntimeError, as torch's
    with pytest.raises(RuntimeError):
        tx.scatter_reduce(0, tidx, torch.ones(1, 2), "maximum")
    with pytest.raises(RuntimeError, match="sum, prod, mean, amax or amin, got 'maximum'"):
        x.scatter_reduce(0, idx, Tensor.ones(1, 2), "maximum")
    with pytest.raises(RuntimeError):
        tx.scatter(0, tidx, 1.0, reduce="max")
    with pytest.raises(RuntimeError, match="'add' or 'multiply', got 'max'"):
        x.scatter(0, idx, 1.0, reduce="max")
    with pytest.raises(RuntimeError):
        tx.half().scatter(0, tidx, torch.ones(1, 2))
    with pytest.raises(RuntimeError, match="src of dtype float32 into a float16 tensor"):
        x.half().scatter(0, idx, Tensor.ones(1, 2))
    # an index larger than the tensor (but along dim) or than src, or of other rank: ShapeError
    with pytest.raises(ShapeError, match="larger than the tensor"):
        x.scatter(0, Tensor([[0] * 5]), Tensor.ones(1, 5))
    with pytest.raises(ShapeError, match="larger than the tensor"):
        x.scatter(0, idx, Tensor.ones(1, 1))
    with pytest.raises(ShapeError, match="need 2 axes"):
        x.scatter(0, Tensor([0, 1]), 1.0)


# ---- lookups: one load per element (Ops.GATHER), no comparison against every row --------------


def _kernel_asts(t: Tensor) -> list:
    from fusegrad.schedule.kernelize import KernelStep

    return [s.ast for s in t.schedule() if isinstance(s, KernelStep)]


def _ops_in(ast) -> set:
    from fusegrad.uop.ops import toposort

    return {u.op for u in toposort([ast])}


@pytest.mark.parametrize(
    "shape, dim, index_shape",
    [
        ((5, 7), 1, (5, 3)),
        ((5, 7), 0, (9, 7)),
        ((4, 6, 33), 2, (4, 6, 40)),
        ((4, 6, 33), 1, (3, 17, 20)),
        ((64, 1000), 1, (64, 300)),
        ((2, 3, 4, 5), 0, (6, 3, 4, 5)),
    ],
)
def test_gather_reads_one_element_per_output_as_torch(device, shape, dim, index_shape):
    from fusegrad.uop.ops import Ops

    rng = np.random.default_rng(sum(shape))
    a = rng.standard_normal(shape).astype(np.float32)
    index = rng.integers(0, shape[dim], index_shape).astype(np.int32)  # (WebGPU has no int64)
    out = Tensor(a, device=device).gather(dim, Tensor(index, device=device))
    (ast,) = _kernel_asts(out)
    assert Ops.GATHER in _ops_in(ast) and Ops.REDUCE_AXIS not in _ops_in(ast)
    want = torch.gather(torch.tensor(a), dim, torch.tensor(index).long()).numpy()
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("dtype", ["int32", "bool", "uint8"])
def test_gather_of_integers_and_bools_keeps_the_dtype(device, dtype):
    rng = np.random.default_rng(3)
    a = (rng.integers(0, 200, (6, 50)) % (2 if dtype == "bool" else 200)).astype(dtype)
    index = rng.integers(0, 50, (6, 70)).astype(np.int32)
    out = Tensor(a, device=device).gather(1, Tensor(index, device=device))
    assert out.dtype.name == dtype
    np.testing.assert_array_equal(out.numpy(), np.take_along_axis(a, index, 1))


def test_gather_along_an_axis_of_one_broadcasts_its_gradient_back(device):
    a = np.array([[1.5], [2.5]], np.float32)  # gathered along axis 1, of size 1
    x = Tensor(a, device=device, requires_grad=True)
    out = x.gather(1, Tensor(np.zeros((2, 3), np.int32), device=device))
    (out * Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=device)).sum().backward()
    np.testing.assert_array_equal(out.numpy(), np.repeat(a, 3, 1))
    np.testing.assert_array_equal(x.grad.numpy(), [[3.0], [12.0]])


def test_gather_gradient_adds_up_repeated_picks_as_torch(device):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((5, 8)).astype(np.float32)
    index = rng.integers(0, 8, (5, 20)).astype(np.int32)  # many repeats
    weights = rng.standard_normal((5, 20)).astype(np.float32)
    x = Tensor(a, device=device, requires_grad=True)
    (x.gather(1, Tensor(index, device=device)) * Tensor(weights, device=device)).sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    (torch.gather(tx, 1, torch.tensor(index).long()) * torch.tensor(weights)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("ids_shape", [(), (7,), (3, 5)])
def test_embedding_is_one_lookup_kernel_and_learns_as_torch(device, ids_shape):
    from fusegrad import nn
    from fusegrad.uop.ops import Ops

    rng = np.random.default_rng(5)
    vocab, dim = 5000, 24
    w = rng.standard_normal((vocab, dim)).astype(np.float32)
    ids = np.asarray(rng.integers(0, 40, ids_shape), np.int32)  # repeats: gradients add up
    emb = nn.Embedding(vocab, dim)
    emb.weight = Tensor(w, device=device, requires_grad=True)
    out = emb(Tensor(ids, device=device))
    (ast,) = _kernel_asts(out)
    assert Ops.GATHER in _ops_in(ast) and Ops.REDUCE_AXIS not in _ops_in(ast)
    temb = torch.nn.Embedding(vocab, dim)
    temb.weight.data = torch.tensor(w)
    want = temb(torch.tensor(ids).long())
    np.testing.assert_array_equal(out.numpy(), want.detach().numpy())
    (out * out).sum().backward()
    (want * want).sum().backward()
    np.testing.assert_allclose(emb.weight.grad.numpy(), temb.weight.grad.numpy(), rtol=1e-5)


def test_rows_picked_by_a_tensor_learn_as_torch_through_one_product(device):
    """``table[ids]`` (a GPT's token embedding, negative ids too) is a lookup whose gradient is
    one kernel: the ids' one-hot rows, transposed, times the gradient (not a gather's per-element
    comparison)."""
    from fusegrad.uop.ops import Ops

    rng = np.random.default_rng(8)
    w = rng.standard_normal((64, 16)).astype(np.float32)
    ids = rng.integers(-64, 64, (3, 10)).astype(np.int32)  # repeats and negatives
    seed = rng.standard_normal((3, 10, 16)).astype(np.float32)
    table = Tensor(w, device=device, requires_grad=True)
    out = table[Tensor(ids, device=device)]
    (ast,) = _kernel_asts(out)
    assert Ops.GATHER in _ops_in(ast)
    (grad,) = (out * Tensor(seed, device=device)).sum().gradient(table)
    (ast,) = _kernel_asts(grad)
    assert Ops.REDUCE_AXIS in _ops_in(ast) and Ops.GATHER not in _ops_in(ast)
    tw = torch.tensor(w, requires_grad=True)
    want = tw[torch.tensor(ids).long()]
    (want * torch.tensor(seed)).sum().backward()
    np.testing.assert_array_equal(out.numpy(), want.detach().numpy())
    np.testing.assert_allclose(grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("paired", [True, False])
def test_a_large_vocabulary_learns_as_torch_without_a_one_hot_matmul(device, monkeypatch, paired):
    """With a vocabulary many times the ids' count (a GPT-2's 50,257 and a batch of 512), each
    id's gradient is summed over pairs of positions and looked up (a gather), not a (V, N) by
    (N, C) matmul: 0.4 GFLOP instead of 40. Both forms give torch's gradient: repeated ids add
    up, ids absent get 0."""
    from fusegrad.tensor import index
    from fusegrad.uop.ops import Ops

    if not paired:
        monkeypatch.setattr(index, "PAIRED_IDS", 10**9)
    rng = np.random.default_rng(11)
    vocab, dim = 3000, 12
    w = rng.standard_normal((vocab, dim)).astype(np.float32)
    ids = rng.integers(0, 20, (4, 16)).astype(np.int32)  # 64 positions, 20 ids: many repeats
    ids[0, :3] = vocab - 1
    seed = rng.standard_normal((4, 16, dim)).astype(np.float32)
    table = Tensor(w, device=device, requires_grad=True)
    (grad,) = (
        (Tensor(ids, device=device).embedding(table) * Tensor(seed, device=device))
        .sum()
        .gradient(table)
    )
    gathers = [Ops.GATHER in _ops_in(ast) for ast in _kernel_asts(grad)]
    assert any(gathers) == paired
    tw = torch.tensor(w, requires_grad=True)
    (
        torch.nn.functional.embedding(torch.tensor(ids).long(), tw) * torch.tensor(seed)
    ).sum().backward()
    np.testing.assert_allclose(grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_index_add_of_few_indices_keeps_an_inf_to_its_own_row(device):
    """``index_add`` of k indices into n >= 4k rows sums each index's rows over pairs of
    indices (k*k, not n*k): a select, so an inf added to one row leaves the others finite."""
    a = np.zeros((50, 2), np.float32)
    src = np.array([[np.inf, 1], [2, 3], [4, 5]], np.float32)
    idx = np.array([7, 9, 7])
    got = Tensor(a, device=device).index_add(
        0, Tensor(idx, device=device), Tensor(src, device=device)
    )
    want = torch.tensor(a).index_add(0, torch.tensor(idx), torch.tensor(src))
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert np.isfinite(got.numpy()[9]).all() and got.numpy()[7, 0] == np.inf


def test_a_lookup_of_computed_rows_fuses_the_computation(device):
    """Rows computed from packed bytes (as a quantized weight is) are computed per element read:
    one kernel reads the bytes, and no float copy of the table is made."""
    rng = np.random.default_rng(6)
    packed = rng.integers(0, 256, (300, 16)).astype(np.uint8)
    scale = rng.standard_normal((300, 1)).astype(np.float32)
    table = Tensor(packed, device=device).cast("float32") * Tensor(scale, device=device)
    ids = rng.integers(0, 300, (9,)).astype(np.int32)
    out = Tensor(ids, device=device).embedding(table)
    assert len(_kernel_asts(out)) == 1
    np.testing.assert_allclose(out.numpy(), (packed.astype(np.float32) * scale)[ids], rtol=1e-6)


def test_a_lookup_of_a_reduction_computes_the_reduction_once(device):
    rng = np.random.default_rng(7)
    a = rng.standard_normal((50, 40, 8)).astype(np.float32)
    table = Tensor(a, device=device).sum(0)  # (40, 8)
    ids = rng.integers(0, 40, (100,)).astype(np.int32)
    out = Tensor(ids, device=device).embedding(table)
    assert len(_kernel_asts(out)) == 2  # the sum, then the lookup of its rows
    np.testing.assert_allclose(out.numpy(), a.sum(0)[ids], rtol=1e-5, atol=1e-5)


def test_advanced_indexing_with_several_index_tensors_is_one_lookup(device):
    from fusegrad.uop.ops import Ops

    a = np.arange(3 * 4 * 5 * 6, dtype=np.float32).reshape(3, 4, 5, 6)
    i, j = np.array([[0, 2], [1, -1]]), np.array([1, -3])
    x = Tensor(a, device=device)
    for got, want in [(x[i, :, j], a[i, :, j]), (x[:, i, j], a[:, i, j]), (x[i], a[i])]:
        (ast,) = _kernel_asts(got)
        assert Ops.GATHER in _ops_in(ast)
        np.testing.assert_array_equal(got.numpy(), want)


def test_out_of_range_lookups_never_read_outside_the_table(device):
    """A bad index is reported after the run, as before; the kernel itself reads in bounds."""
    from fusegrad.errors import InvalidIndex

    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device=device)
    with pytest.raises((InvalidIndex, IndexError, RuntimeError)):
        x.gather(1, Tensor([[0, 9]], device=device)).numpy()


# ---- tensor indexing -----------------------------------------------------------------------------


def test_setitem_keeps_dtype(device):
    t = Tensor([1, 2, 3], device=device)
    t[1] = 7.9
    assert t.dtype == i32 and t.tolist() == [1, 7, 3]


# ---- errors as torch's ---------------------------------------------------------------------------


def _raises_like_torch(ours, theirs):
    """``theirs`` (torch) raises, and ``ours`` raises an exception of the same builtin type."""
    with pytest.raises(Exception) as want:
        theirs()
    kind = next(
        k for k in (IndexError, TypeError, ValueError, RuntimeError) if want.errisinstance(k)
    )
    with pytest.raises(kind):
        ours()


#: (name, call, 0-d input?): the same call, on a (3, 4) tensor (or a 0-d one) of each library
SAME_CALL_RAISES = [
    ("index_int", lambda x: x[1, 4], False),
    ("index_negative", lambda x: x[1, -5], False),
    ("index_first", lambda x: x[3], False),
    ("index_list", lambda x: x[:, [0, 4]], False),
    ("index_list_negative", lambda x: x[[-4]], False),
    ("index_too_many", lambda x: x[0, 0, 0], False),
    ("index_0d_int", lambda x: x[0], True),
    ("index_0d_slice", lambda x: x[:], True),
    ("index_0d_list", lambda x: x[[0]], True),
    ("index_float", lambda x: x[1.5], False),
    ("index_step0", lambda x: x[::0], False),
    ("index_broadcast", lambda x: x[[0, 1], [0, 1, 2]], False),
    ("index_mask_shape", lambda x: x[[True, False]], False),
    ("setitem_out_of_range", lambda x: x.__setitem__(3, 1.0), False),
    ("setitem_list", lambda x: x.__setitem__((slice(None), [0, 4]), 1.0), False),
    ("reshape_two_infer", lambda x: x.reshape(-1, -1, 2), False),
    ("reshape_empty", lambda x: x.reshape([]), False),
    ("reshape_negative", lambda x: x.reshape(-2, 6), False),
    ("reshape_not_dividing", lambda x: x.reshape(5, -1), False),
    ("permute_count", lambda x: x.permute((0,)), False),
    ("permute_repeat", lambda x: x.permute((0, 0)), False),
    ("permute_range", lambda x: x.permute((0, 2)), False),
    ("permute_0d", lambda x: x.permute(0), True),
    ("flip_repeat", lambda x: x.flip((0, 0)), False),
    ("flip_repeat_negative", lambda x: x.flip((1, -1)), False),
    ("flip_range", lambda x: x.flip(2), False),
    ("squeeze_repeat", lambda x: x.squeeze((0, 0)), False),
    ("flatten_order", lambda x: x.flatten(1, 0), False),
    ("flatten_0d_range", lambda x: x.flatten(1), True),
    ("transpose_0d_range", lambda x: x.transpose(0, 1), True),
    ("unsqueeze_0d_range", lambda x: x.unsqueeze(-2), True),
    ("roll_flat_shifts", lambda x: x.roll((1, 2)), False),
    ("roll_more_dims", lambda x: x.roll(1, (0, 1)), False),
    ("roll_more_shifts", lambda x: x.roll((1, 2), 0), False),
    ("roll_no_shifts", lambda x: x.roll((), ()), False),
    ("roll_range", lambda x: x.roll(1, 5), False),
    ("roll_0d_dim", lambda x: x.roll(1, 0), True),
    ("unflatten_sizes", lambda x: x.unflatten(1, (3, -1)), False),
    ("unflatten_two_infer", lambda x: x.unflatten(1, (-1, -1)), False),
    ("unflatten_none", lambda x: x.unflatten(1, ()), False),
    ("unflatten_range", lambda x: x.unflatten(5, (2, 2)), False),
    ("unfold_size", lambda x: x.unfold(1, 5, 1), False),
    ("unfold_negative_size", lambda x: x.unfold(1, -1, 1), False),
    ("unfold_step", lambda x: x.unfold(1, 1, 0), False),
    ("unfold_negative_step", lambda x: x.unfold(1, 1, -1), False),
    ("unfold_range", lambda x: x.unfold(2, 2, 1), False),
    ("unfold_0d_range", lambda x: x.unfold(1, 1, 1), True),
    ("diagonal_same", lambda x: x.diagonal(0, 0, 0), False),
    ("diagonal_same_negative", lambda x: x.diagonal(0, 1, -1), False),
    ("diagonal_range", lambda x: x.diagonal(0, 0, 2), False),
    ("diagonal_1d", lambda x: x[0].diagonal(), False),
    ("diag_0d", lambda x: x.diag(), True),
    ("diag_3d", lambda x: x.reshape(3, 2, 2).diag(), False),
    ("tril_0d", lambda x: x.tril(), True),
    ("triu_1d", lambda x: x[0].triu(), False),
    ("sum_0d_repeat", lambda x: x.sum((0, -1)), True),
    ("sum_0d_range", lambda x: x.sum(1), True),
    ("sum_repeat", lambda x: x.sum((1, -1)), False),
    ("argmax_0d_range", lambda x: x.argmax(1), True),
    ("clip_nothing", lambda x: x.clip(None, None), False),
    ("topk_too_many", lambda x: x.topk(5), False),
    ("masked_select_int_mask", lambda x: x.masked_select(x.int()), False),
    ("masked_select_shape", lambda x: x.masked_select(x[0, :2] > 0), False),
    ("gather_rank", lambda x: x.gather(0, x[0].int()), False),
]


@pytest.mark.parametrize(
    "call, zero_d", [c[1:] for c in SAME_CALL_RAISES], ids=[c[0] for c in SAME_CALL_RAISES]
)
def test_raises_like_torch(call, zero_d):
    x = np.arange(1, 13, dtype=np.float32).reshape(3, 4) if not zero_d else np.float32(2.0)
    _raises_like_torch(lambda: call(Tensor(x)), lambda: call(torch.tensor(x)))


F = torch.nn.functional
_A, _TA = Tensor.ones(2, 3), torch.ones(2, 3)
_I, _TI = Tensor([1, 2, 4]), torch.tensor([1, 2, 4])
#: (name, fusegrad call, torch call) where the two spell it differently
OTHER_CALL_RAISES = [
    ("stack_shapes", lambda: Tensor.stack([_A, _A[:1]]), lambda: torch.stack([_TA, _TA[:1]])),
    ("stack_none", lambda: Tensor.stack([]), lambda: torch.stack([])),
    ("stack_range", lambda: Tensor.stack(_A, dim=3), lambda: torch.stack([_TA], dim=3)),
    (
        "cat_0d",
        lambda: Tensor.cat(Tensor(1.0), Tensor(2.0)),
        lambda: torch.cat([torch.tensor(1.0)] * 2),
    ),
    ("cat_shapes", lambda: _A.cat(_A[:, :2]), lambda: torch.cat([_TA, _TA[:, :2]])),
    ("cat_ranks", lambda: _A.cat(_A[0]), lambda: torch.cat([_TA, _TA[0]])),
    ("cat_none", lambda: Tensor.cat([]), lambda: torch.cat([])),
    ("cat_range", lambda: _A.cat(_A, dim=2), lambda: torch.cat([_TA, _TA], 2)),
    (
        "meshgrid_indexing",
        lambda: _A[0].meshgrid(indexing="yx"),
        lambda: torch.meshgrid(_TA[0], indexing="yx"),
    ),
    ("meshgrid_2d", lambda: _A.meshgrid(_A[0]), lambda: torch.meshgrid(_TA, _TA[0], indexing="ij")),
    (
        "gather_larger",
        lambda: _A.gather(0, Tensor.zeros(2, 4, dtype="int32")),
        lambda: _TA.gather(0, torch.zeros(2, 4, dtype=torch.long)),
    ),
    ("one_hot_classes", lambda: _I.one_hot(-2), lambda: F.one_hot(_TI, -2)),
    ("one_hot_float", lambda: _A.one_hot(3), lambda: F.one_hot(_TA, 3)),
    ("one_hot_negative", lambda: (-_I).one_hot(), lambda: F.one_hot(-_TI)),
    ("one_hot_empty", lambda: _I[:0].one_hot(), lambda: F.one_hot(_TI[:0])),
    ("index_float_tensor", lambda: _A[Tensor([0.0])], lambda: _TA[torch.tensor([0.0])]),
    ("eye_rows", lambda: Tensor.eye(-3), lambda: torch.eye(-3)),
    ("eye_columns", lambda: Tensor.eye(3, -3), lambda: torch.eye(3, -3)),
    ("zeros_negative", lambda: Tensor.zeros(-3, 2), lambda: torch.zeros(-3, 2)),
    ("ones_negative", lambda: Tensor.ones((2, -3)), lambda: torch.ones((2, -3))),
    ("full_negative", lambda: Tensor.full((2, -3), 1.0), lambda: torch.full((2, -3), 1.0)),
    ("full_negative_int", lambda: Tensor.full(-3, 1.0), lambda: torch.full((-3,), 1.0)),
    ("empty_negative", lambda: Tensor.empty(2, -3), lambda: torch.empty(2, -3)),
    ("rand_negative", lambda: Tensor.rand(2, -3), lambda: torch.rand(2, -3)),
    ("randn_negative", lambda: Tensor.randn((-1,)), lambda: torch.randn((-1,))),
    ("randint_negative", lambda: Tensor.randint(2, -3), lambda: torch.randint(0, 10, (2, -3))),
    ("arange_direction", lambda: Tensor.arange(5, 0), lambda: torch.arange(5, 0)),
    ("arange_step0", lambda: Tensor.arange(0, 5, 0), lambda: torch.arange(0, 5, 0)),
]


@pytest.mark.parametrize(
    "ours, theirs", [c[1:] for c in OTHER_CALL_RAISES], ids=[c[0] for c in OTHER_CALL_RAISES]
)
def test_raises_like_torch_spelled_differently(ours, theirs):
    _raises_like_torch(ours, theirs)


def test_negative_sizes_of_initialisers():
    for make in (
        Tensor.normal,
        Tensor.uniform,
        Tensor.scaled_uniform,
        Tensor.glorot_uniform,
        Tensor.kaiming_uniform,
        Tensor.kaiming_normal,
    ):
        for shape in ((-3, 2), ((2, -3),), ((-3, 3), 3)):
            with pytest.raises(ValueError, match="non-negative"):
                make(*shape)


def test_index_error_messages_as_torch():
    x = Tensor.zeros(4, 3)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 1 with size 3"):
        x[1, 3]
    with pytest.raises(IndexError, match="index -5 is out of bounds for dimension 0 with size 4"):
        x[[0, -5]]
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        x[1, 77, 77, 77]  # (counted before the out-of-range ints)
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...]
    with pytest.raises(RuntimeError, match="dim 0 appears multiple times"):
        x.flip((0, -2))


def test_join_spellings(device):
    a, b = Tensor([[1, 2]], device=device), Tensor([[3, 4]], device=device)
    for joined in (
        Tensor.stack([a, b], dim=1),
        Tensor.stack(a, b, dim=1),
        a.stack(b, dim=1),
        Tensor.stack((a, b), 1),
    ):
        assert joined.tolist() == [[[1, 2], [3, 4]]]
    for joined in (
        Tensor.cat([a, b], dim=1),
        Tensor.cat(a, b, dim=1),
        a.cat(b, dim=1),
        Tensor.cat((a, b), 1),
    ):
        assert joined.tolist() == [[1, 2, 3, 4]]
    with pytest.raises(ValueError, match="a sequence of tensors or the tensors themselves"):
        Tensor.stack((a, b), a)


def test_masked_select_and_nonzero_with_size(device):
    """``size=`` gives a data-independent shape: the first ``size`` results, then ``fill_value``."""
    t = Tensor([0, 1, 2, 3, 4, 5, 6, 7, 8], device=device)
    keep = Tensor([True, False, True, False, True, False, False, False, True], device=device)
    assert t.masked_select(keep, size=6, fill_value=-1).tolist() == [0, 2, 4, 8, -1, -1]
    assert t.masked_select(keep, size=2).tolist() == [0, 2]
    assert (
        Tensor([1.0, 2.0], device=device)
        .masked_select(Tensor([True, False], device=device), size=3, fill_value=-1)
        .dtype
        == f32
    )
    assert Tensor([1, 0, 2, 0, 3], device=device).nonzero(size=5, fill_value=-1).tolist() == [
        [0],
        [2],
        [4],
        [-1],
        [-1],
    ]
    assert Tensor([[1, 0], [0, 2]], device=device).nonzero(size=1).tolist() == [[0, 0]]
    assert Tensor(5, device=device).nonzero(size=4).shape == (4, 0)
    rows, cols = Tensor([[0, 3], [4, 0]], device=device).nonzero(
        as_tuple=True, size=3, fill_value=9
    )
    assert (rows.tolist(), cols.tolist()) == ([0, 1, 9], [1, 0, 9])


def test_clone_is_a_copy(device):
    t = Tensor([1.0, 2.0], device=device)
    c = t.clone()
    c[0] = 5.0
    assert (t.tolist(), c.tolist()) == ([1.0, 2.0], [5.0, 2.0])


# ---- einsum --------------------------------------------------------------------------------------

EINSUM_ERRORS = [  # (formula, operand shapes, what our message says); torch raises too
    ("ij,jk->ij", [(2, 3), (3, 4), (4, 2)], "names 2 operands, got 3"),  # one operand too many
    ("ij,jk->ij", [(2, 3)], "names 2 operands, got 1"),
    ("pqrs,tuqvr->pstuv", [(3, 8, 10, 5), (11, 5, 13, 16, 8)], "do not broadcast"),
    ("...ik...,...jk->", [(2, 3, 4), (2, 3, 4)], "at most one"),
    ("i...j,ji...->...", [(2, 3, 4), (2, 3, 4)], "do not broadcast"),
    ("ii->i", [(3, 4)], "equal sizes"),
    ("ij->k", [(3, 4)], "unknown or repeated"),
    ("ijk", [(3, 4)], "does not fit"),
]


@pytest.mark.parametrize(
    "formula, shapes, message", EINSUM_ERRORS, ids=[f"{e[0]}-{len(e[1])}" for e in EINSUM_ERRORS]
)
def test_einsum_errors(formula, shapes, message):
    """Each bad formula raises what torch raises (a RuntimeError), saying what was wrong."""
    arrays = [rand(s) for s in shapes]
    with pytest.raises(RuntimeError):
        torch.einsum(formula, [torch.from_numpy(a) for a in arrays])
    with pytest.raises(RuntimeError, match=message):
        Tensor.einsum(formula, [Tensor(a) for a in arrays])


def test_numpy_integers_serve_as_sizes_and_axes_as_in_torch():
    """Sizes and axes computed with numpy (``np.prod``, ``a.shape[0] // 2`` of an array's
    shape) are numpy integers; PyTorch takes them, and they once failed deep in the graph
    (``'numpy.int64' object has no attribute 'op'``) or as "not iterable"."""
    i, a = np.int64, np.arange(12, dtype=np.float32).reshape(3, 4)
    x, t = Tensor(a), torch.tensor(a)
    assert x.reshape(i(4), i(3)).shape == tuple(t.reshape(i(4), i(3)).shape)
    assert x.reshape((i(2), 6)).shape == (2, 6)
    assert Tensor.ones(1, 4).expand(i(3), 4).shape == (3, 4)
    np.testing.assert_array_equal(x.sum(i(1)).numpy(), t.sum(int(i(1))).numpy())
    np.testing.assert_array_equal(x.flip(np.int32(0)).numpy(), a[::-1])
    assert Tensor.ones(i(3)).shape == (3,) and Tensor.zeros((i(2), i(2))).shape == (2, 2)
    np.testing.assert_array_equal(Tensor.arange(i(5)).numpy(), np.arange(5))
    assert [p.shape for p in x.split(i(2), 1)] == [(3, 2), (3, 2)]
    assert Tensor.ones(1, 3).squeeze(i(0)).shape == (3,)
    with pytest.raises(TypeError, match="sizes must be ints"):
        x.reshape(np.float64(4), 3)


def test_long_masked_select_and_nonzero_match_torch_in_linear_work():
    """A mask of 2**18 with ~half its elements true: compared every position with every true one
    (an (n, count) matrix: 2**20 took 16 s for masked_select, nonzero over 2 minutes); now the
    positions are found as the mask is read back (its count is read anyway), and the gradient
    reads each element's share at its rank."""
    from fusegrad.engine.realize import GlobalCounters

    x = np.random.default_rng(0).standard_normal((512, 512)).astype(np.float32)
    t = Tensor(x, requires_grad=True)
    GlobalCounters.reset()
    picked = t.masked_select(t > 0).realize()
    coords = Tensor(x).nonzero().realize()
    assert GlobalCounters.global_ops < 100 * x.size
    tx = torch.from_numpy(x).requires_grad_()
    want = tx.masked_select(tx > 0)
    np.testing.assert_array_equal(picked.numpy(), want.detach().numpy())
    np.testing.assert_array_equal(coords.numpy(), torch.from_numpy(x).nonzero().numpy())
    w = np.random.default_rng(1).standard_normal(want.shape).astype(np.float32)
    (want * torch.from_numpy(w)).sum().backward()
    np.testing.assert_allclose((picked * Tensor(w)).sum().gradient(t)[0].numpy(), tx.grad.numpy())


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float32, np.float16, np.bool_])
def test_unique_of_many_elements_matches_torch(dtype):
    """``unique`` of more than ``SELECT_SORTED`` elements is found as they are read back (the
    result's size is read anyway; the device's sort took 0.4 s for 2**20): values, inverse (in
    the input's shape) and counts as torch's, each nan its own element."""
    rng = np.random.default_rng(3)
    x = rng.integers(0, 40, (30, 20)).astype(dtype)
    if dtype == np.float32:
        x[0, :4] = [np.nan, np.nan, -0.0, np.inf]
    for inverse in (False, True):
        for counts in (False, True):
            got = Tensor(x).unique(return_inverse=inverse, return_counts=counts)
            want = torch.unique(torch.from_numpy(x), return_inverse=inverse, return_counts=counts)
            got, want = (got, want) if inverse or counts else ((got,), (want,))
            assert len(got) == len(want)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g.numpy(), w.numpy())
