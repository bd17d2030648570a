"""``tensor_index.py`` against torch on random inputs, on each device (forward values only)."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor

from .torch_helpers import bool_, both, check, f16, f32, f64, i8, i32, i64, rand, tol, torch, u8  # noqa: F401

# ---- joining and splitting -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [f32, i32, bool_])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_stack(device, dtype, dim):
    a, ta = both(rand((4, 3), dtype), device, transpose=True)  # (3, 4), not contiguous
    c, tc = both(rand((2, 4) if dim == 0 else (3, 2), dtype, -1, 1), device)
    check(a.cat(c, dim=dim), torch.cat([ta, tc], dim))
    check(Tensor.cat(a, c, a, dim=dim), torch.cat([ta, tc, ta], dim))
    b, tb = both(rand((3, 4), dtype, 0, 5), device)
    check(a.stack(b, a, dim=dim), torch.stack([ta, tb, ta], dim))


def test_cat_promotes(device):
    a, b = Tensor([1, 2], device=device), Tensor([0.5], device=device)
    check(a.cat(b), torch.cat([torch.tensor([1, 2]), torch.tensor([0.5])]))


@pytest.mark.parametrize("sizes, dim", [(2, 0), (3, 1), ([1, 4], 1), ([3, 0, 2], 0)])
def test_split(device, sizes, dim):
    t, tt = both(rand((5, 5)), device, True)
    got, want = t.split(sizes, dim), torch.split(tt, sizes, dim)
    assert len(got) == len(want)
    check(tuple(got), tuple(want))


@pytest.mark.parametrize("chunks, dim", [(2, 0), (3, 1), (5, 1)])
def test_chunk(device, chunks, dim):
    t, tt = both(rand((7, 4)), device)
    got, want = t.chunk(chunks, dim), torch.chunk(tt, chunks, dim)
    assert len(got) == len(want)
    check(tuple(got), tuple(want))


@pytest.mark.parametrize("reps", [(2, 3), (1, 1), (2, 1, 2)])
def test_repeat_tile(device, reps):
    t, tt = both(rand((2, 3), i32), device, True)
    check(t.repeat(reps), tt.repeat(reps))
    check(t.tile(reps[-1:]), torch.tile(tt, reps[-1:]))


@pytest.mark.parametrize("dim", [None, 0, 1])
def test_repeat_interleave(device, dim):
    t, tt = both(rand((2, 3)), device, True)
    check(t.repeat_interleave(3, dim), torch.repeat_interleave(tt, 3, dim))


@pytest.mark.parametrize("shifts, dims", [(1, 0), (-2, 1), ((1, 2), (0, 1)), (4, None), (7, 1)])
def test_roll(device, shifts, dims):
    t, tt = both(rand((3, 5)), device, True)
    check(t.roll(shifts, dims), torch.roll(tt, shifts, dims))


@pytest.mark.parametrize("indexing", ["ij", "xy"])
def test_meshgrid(device, indexing):
    (a, ta), (b, tb), (c, tc) = (both(rand((n,)), device) for n in (2, 3, 4))
    check(
        Tensor.meshgrid(a, b, c, indexing=indexing), torch.meshgrid(ta, tb, tc, indexing=indexing)
    )


@pytest.mark.parametrize("diagonal", [0, 1, -2])
def test_tril_triu(device, diagonal):
    t, tt = both(rand((2, 4, 5)), device)
    check(t.tril(diagonal), torch.tril(tt, diagonal))
    check(t.triu(diagonal), torch.triu(tt, diagonal))


# ---- gathers and scatters ------------------------------------------------------------------------


def test_one_hot(device):
    x = rand((2, 3), i32, 0, 4)
    t, tt = both(x, device)
    check(t.one_hot(6), torch.nn.functional.one_hot(tt.long(), 6))
    check(t.one_hot(), torch.nn.functional.one_hot(tt.long()))


@pytest.mark.parametrize("dtype", [f32, i32, bool_])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather(device, dtype, dim):
    t, tt = both(rand((4, 5), dtype), device, True)
    n = t.shape[dim]
    idx = rand((3, 2), i64, 0, n - 1)
    check(t.gather(dim, Tensor(idx, device=device)), torch.gather(tt, dim, torch.from_numpy(idx)))


def _unique_index(shape, n, dim, seed=0):
    """An index with distinct values along ``dim`` (scatter order is undefined otherwise)."""
    rng = np.random.default_rng(seed)
    moved = list(shape)
    moved[dim], moved[-1] = moved[-1], moved[dim]
    idx = np.stack([rng.permutation(n)[: moved[-1]] for _ in range(int(np.prod(moved[:-1])))])
    return np.swapaxes(idx.reshape(moved), dim, -1).astype(np.int64).copy()


@pytest.mark.parametrize("dim", [0, 1])
def test_scatter(device, dim):
    t, tt = both(rand((4, 5)), device)
    idx = _unique_index((3, 2), t.shape[dim], dim)
    src, tsrc = both(rand((3, 4), f32, 5, 9), device)
    tidx = torch.from_numpy(idx)
    check(t.scatter(dim, Tensor(idx, device=device), src), torch.scatter(tt, dim, tidx, tsrc))
    check(t.scatter(dim, Tensor(idx, device=device), 7.0), torch.scatter(tt, dim, tidx, 7.0))


@pytest.mark.parametrize("reduce", ["sum", "amax", "amin", "mean", "prod"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce(device, reduce, include_self):
    t, tt = both(rand((4, 3), f32, 0.5, 2), device)
    idx = rand((6, 3), i64, 0, 3)  # duplicates: several values land on one element
    src, tsrc = both(rand((6, 3), f32, 0.5, 2), device)
    want = torch.scatter_reduce(
        tt, 0, torch.from_numpy(idx), tsrc, reduce, include_self=include_self
    )
    check(
        t.scatter_reduce(0, Tensor(idx, device=device), src, reduce, include_self), want, rtol=1e-5
    )


def test_scatter_reduce_int(device):
    t, tt = both(rand((3, 4), i32), device)
    idx, src = rand((3, 6), i64, 0, 3), rand((3, 6), i32)
    for reduce in ("sum", "amax"):
        want = torch.scatter_reduce(tt, 1, torch.from_numpy(idx), torch.from_numpy(src), reduce)
        check(
            t.scatter_reduce(1, Tensor(idx, device=device), Tensor(src, device=device), reduce),
            want,
        )


@pytest.mark.parametrize("dtype", [f32, i32])
def test_masked_fill(device, dtype):
    t, tt = both(rand((3, 4), dtype), device, True)
    m, tm = both(rand((4, 1), bool_), device)
    check(t.masked_fill(m, 2), tt.masked_fill(tm, 2))


# ---- tensor indexing -----------------------------------------------------------------------------


def _idx(device, *values):
    return [Tensor(np.array(v), device=device) for v in values], [torch.tensor(v) for v in values]


INDEXES = [
    ("int_tensor", lambda i: (i[0],)),
    ("two_tensors", lambda i: (i[0], i[1])),
    ("tensor_then_slice", lambda i: (i[0], slice(1, 3))),
    ("slice_then_tensor", lambda i: (slice(None), i[1])),
    ("separated", lambda i: (i[0], slice(None), i[1])),
    ("int_and_tensor", lambda i: (1, i[1])),
    ("ellipsis", lambda i: (Ellipsis, i[1])),
    ("broadcast", lambda i: (i[2], i[1])),
    ("negative", lambda i: (i[3],)),
    ("newaxis", lambda i: (None, i[0], 2)),
]


@pytest.mark.parametrize("name, make", INDEXES, ids=[i[0] for i in INDEXES])
def test_getitem_tensor(device, name, make):
    t, tt = both(rand((4, 5, 3)), device)
    if name == "separated":
        t, tt = both(rand((4, 5, 6)), device)
    ours, theirs = _idx(device, [0, 3, 1], [2, 2, 0], [[1], [0]], [-1, 0, -4])
    check(t[make(ours)], tt[make(theirs)])


def test_getitem_lists_and_masks(device):
    t, tt = both(rand((4, 5)), device, True)
    check(t[[0, 2]], tt[[0, 2]])
    check(t[:, [3, 0, 0]], tt[:, [3, 0, 0]])
    check(t[t > 0], tt[tt > 0])
    check(
        t[Tensor([True, False, True, True, False], device=device)],
        tt[torch.tensor([True, False, True, True, False])],
    )


@pytest.mark.parametrize("index", ["basic", "step", "tensor", "mask"])
def test_setitem(device, index):
    x = rand((4, 5))
    t, tt = Tensor(x, device=device), torch.from_numpy(x.copy())
    if index == "basic":
        t[1:3, 2], tt[1:3, 2] = 9.0, 9.0
    elif index == "step":
        v = rand((2, 5), f32, 5, 6)
        t[::2], tt[::2] = Tensor(v, device=device), torch.from_numpy(v)
    elif index == "tensor":
        t[Tensor([0, 3], device=device), 1], tt[torch.tensor([0, 3]), 1] = -1.0, -1.0
    else:
        t[t > 1], tt[tt > 1] = 0.0, 0.0
    check(t, tt)


def test_setitem_keeps_dtype(device):
    t = Tensor([1, 2, 3], device=device)
    t[1] = 7.9
    assert t.dtype == i32 and t.tolist() == [1, 7, 3]


# ---- einsum --------------------------------------------------------------------------------------

EINSUMS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 2)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("ij,jk", [(3, 4), (4, 2)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
]


@pytest.mark.parametrize("formula, shapes", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_einsum(device, formula, shapes):
    pairs = [both(rand(s), device) for s in shapes]
    want = torch.einsum(formula, *(p[1] for p in pairs))
    check(Tensor.einsum(formula, *(p[0] for p in pairs)), want, rtol=1e-5, atol=1e-5)
