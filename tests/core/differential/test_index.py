"""Indexing against torch: basic and tensor getitem, gather, scatter, scatter_reduce, one_hot,
masked_fill.

Basic indexes are one line each in ``BASIC``; torch has no negative slice steps, so its side
takes those by flipping the axis (``torch_getitem``).
"""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor

from .harness import (
    DEVICES,
    F,
    bool_,
    case,
    check,
    f32,
    floats,
    i32,
    index_values,
    indices,
    ints,
    mask,
    nan,
    params,
    torch,
    values,
)


class _Index:
    """``IDX[1:3, ::-1]`` is the index tuple ``(slice(1, 3), slice(None, None, -1))``."""

    def __getitem__(self, index):
        return index


IDX = _Index()


def index_name(index) -> str:
    """``IDX[1, ::-1]`` as "1,::-1"."""

    def one(item) -> str:
        if isinstance(item, slice):
            parts = ["" if p is None else str(p) for p in (item.start, item.stop, item.step)]
            return ":".join(parts[:2] if item.step is None else parts)
        if isinstance(item, (list, tuple)):
            return str(item).replace(" ", "")
        return {None: "None", Ellipsis: "..."}.get(item, str(item))

    return ",".join(one(i) for i in (index if isinstance(index, tuple) else (index,)))


def torch_getitem(index):
    """torch's ``x[index]``: a slice with a negative step becomes a flip and a positive step."""
    items = index if isinstance(index, tuple) else (index,)

    def get(x):
        used = sum(1 for i in items if i is not None and i is not Ellipsis)
        out, flips, dim = [], [], 0
        for item in items:
            if item is Ellipsis:
                out.append(item)
                dim += x.ndim - used
                continue
            if isinstance(item, slice) and (item.step or 1) < 0:
                n = x.shape[dim]
                start, stop, step = item.indices(n)
                count, first = len(range(start, stop, step)), n - 1 - start
                out.append(slice(first, first + (count - 1) * -step + 1 if count else first, -step))
                flips.append(dim)
            else:
                out.append(item)
            dim += item is not None
        return (x.flip(flips) if flips else x)[tuple(out)]

    return get


BASIC = [
    IDX[0],
    IDX[-1],
    IDX[1, 2],
    IDX[1, -1, -4],
    IDX[:],
    IDX[1:],
    IDX[:-1],
    IDX[::2],
    IDX[1::2],
    IDX[::-1],
    IDX[::-2],
    IDX[-2::-1],
    IDX[:, 1:3],
    IDX[:, ::-1, 1],
    IDX[..., 0],
    IDX[..., ::3],
    IDX[0, ...],
    IDX[0, ..., 1],
    IDX[None],
    IDX[:, None],
    IDX[None, ..., None],
    IDX[1, None, ::-1],
    IDX[:, :, ::3],
    IDX[:, 2:0:-1],
    IDX[:, :, -1:0:-2],
    IDX[5:],
    IDX[:, 3:1],
    IDX[::-1, ::-1, ::-1],
    IDX[0, 0, 0],
    IDX[..., None, 2],
    IDX[-2:, -2:, -2:],
    IDX[..., 1:, ::2],
]


#: advanced indexes (lists, tuples, bools): int ones are applied first, then the rest, whose
#: broadcast shape goes in front if they are apart and in place if adjacent
ADVANCED = [
    IDX[[0, 1]],
    IDX[[1, 0], [2, 4]],
    IDX[:, [4, 0, 0]],
    IDX[[[1], [0]], :, [2, 3]],
    IDX[[1, 0], :, :, [2, 0]],
    IDX[:, [0, 2], 1, [1, 2]],
    IDX[1, :, [0, 1]],
    IDX[..., [2, 0], None],
    IDX[None, ..., [0, 1], [2, 0]],
    IDX[[0, 1], None, [1, 2]],
    IDX[(1, 0), 2],
    IDX[((0,),)],
    IDX[(((0,),),)],
    IDX[[[[0]]], 1, [[2]]],
    IDX[[True, False]],
    IDX[:, [True, False, True, True, False]],
    IDX[[True, False, 1]],
    IDX[True],
    IDX[False],
    IDX[:, True, 1],
    IDX[True, 1, [0, 1]],
    IDX[[0, 1], True, [2, 0]],
    IDX[[]],
    IDX[:, []],
    IDX[[-1, -2], -1],
    IDX[1, 2, [2, 1], ::2],
]


def _set(x, index, value):
    """``x[index] = value``, returned (``x`` a clone: torch's leaves cannot be written)."""
    x[index] = value
    return x


def setitem(index, value, *inputs):
    return case(f"setitem-{index_name(index)}", lambda x: _set(x.clone(), index, value), *inputs)


def getitem(index, *inputs):
    return case(
        f"getitem-{index_name(index)}", lambda x: x[index], *inputs, ref=torch_getitem(index)
    )


GETITEM = [
    *(getitem(index, floats(2, 3, 4)) for index in BASIC),
    case("getitem-int_dtype", lambda x: x[:, ::2, 1], ints(2, 3, 4)),
    case("getitem-T", lambda x: x[1:, ::2], floats(5, 4).T),
    case(
        "getitem-chained",
        lambda x: x[::-2][1:, ::2][:, -1],
        floats(6, 5),
        ref=lambda x: x.flip(0)[::2][1:, ::2][:, -1],
    ),
    case("getitem-0d", lambda x: x[None], floats()),
    case("getitem-0d_ellipsis", lambda x: x[...], floats(), ref=lambda x: x[...]),
    case("getitem-empty", lambda x: x[1:1], floats(3, 2)),
    case("getitem-of_empty", lambda x: x[:, 1], floats(0, 3)),
    case("getitem-tensor", lambda x, i: x[i], floats(4, 5, 3), index_values(0, 3, 1)),
    case("getitem-tensor_2d", lambda x, i: x[i], floats(5, 3), indices(5, 2, 4)),
    case(
        "getitem-two_tensors",
        lambda x, i, j: x[i, j],
        floats(4, 5, 3),
        index_values(0, 3, 1),
        index_values(2, 2, 0),
    ),
    case("getitem-tensor_slice", lambda x, i: x[i, 1:3], floats(4, 5, 3), index_values(0, 3, 1)),
    case("getitem-slice_tensor", lambda x, i: x[:, i], floats(4, 5, 3), index_values(2, 2, 0)),
    case(
        "getitem-separated",
        lambda x, i, j: x[i, :, j],
        floats(4, 5, 6),
        index_values(0, 3, 1),
        index_values(2, 2, 0),
    ),
    case("getitem-int_tensor", lambda x, i: x[1, i], floats(4, 5, 3), index_values(2, 2, 0)),
    case("getitem-ellipsis_tensor", lambda x, i: x[..., i], floats(4, 5, 3), index_values(2, 2, 0)),
    case(
        "getitem-broadcast",
        lambda x, i, j: x[i, j],
        floats(4, 5, 3),
        index_values(1, 0, shape=(2, 1)),
        index_values(2, 2, 0),
    ),
    case("getitem-negative", lambda x, i: x[i], floats(4, 5, 3), index_values(-1, 0, -4)),
    case(
        "getitem-newaxis_tensor", lambda x, i: x[None, i, 2], floats(4, 5, 3), index_values(0, 3, 1)
    ),
    case("getitem-list", lambda x: x[[0, 2, 2]], floats(4, 3)),
    case("getitem-list_axis1", lambda x: x[:, [3, 0, 0]], floats(5, 4).T),
    case("getitem-tensor_T", lambda x, i: x[i], floats(5, 3).T, indices(5, 2, 4)),
    case("getitem-bool_mask", lambda x: x[x > 0], floats(5, 4).T),
    case("getitem-bool_tensor", lambda x, m: x[m], floats(5, 4), mask(5)),
    *(getitem(index, floats(2, 5, 6, 3)) for index in ADVANCED),
    case("getitem-bool_mask_2d_then_int", lambda x, m: x[m, 1], floats(3, 4, 5), mask(3, 4)),
    case("getitem-int_then_bool_mask", lambda x, m: x[1, m], floats(3, 4, 5), mask(4)),
    case("getitem-0d_bool_tensor", lambda x, m: x[m], floats(3, 4), mask()),
    case("getitem-0d_int_tensor", lambda x, i: x[:, i], floats(3, 4), index_values(2, shape=())),
    case("getitem-0d_of_0d", lambda x, m: x[m], floats(), mask()),
    case("getitem-numpy", lambda x: x[np.array([2, 0]), np.int64(1)], floats(3, 4)),
    case("getitem-numpy_mask", lambda x: x[:, np.array([True, False, True, True])], floats(3, 4)),
    case("getitem-int_dtype_list", lambda x: x[[1, 0], ..., [-1]], ints(2, 3, 4)),
]

SETITEM = [
    setitem(IDX[1:3, 2], 9.0, floats(4, 5)),
    setitem(IDX[::2], 5.5, floats(4, 5)),
    setitem(IDX[..., -1], -1.0, floats(3, 4, 5)),
    setitem(IDX[[0, 3], 1], -1.0, floats(4, 5)),
    setitem(IDX[[0, 3], [1, 4]], 2.0, floats(4, 5)),
    setitem(IDX[:, [True, False, True, False, False]], 0.0, floats(4, 5)),
    setitem(IDX[None, 2], 3.0, floats(4, 5)),
    setitem(IDX[1], 4, ints(3, 4)),
    case(
        "setitem-tensor_value",
        lambda x, v: _set(x.clone(), IDX[1:3], v),
        floats(4, 5),
        floats(2, 5),
    ),
    case(
        "setitem-bcast_value", lambda x, v: _set(x.clone(), IDX[:, 1:4], v), floats(4, 5), floats(3)
    ),
    case("setitem-mask", lambda x: _set(x.clone(), x > 1, 0.0), floats(4, 5)),
]

GATHER = [
    # torch's names for picks along one axis (tensor/aliases.py)
    case(
        "index_select-dim0",
        lambda x, i: x.index_select(0, i),
        floats(5, 4),
        index_values(4, 0, 0, 2),
    ),
    case(
        "index_select-dim1_T",
        lambda x, i: x.index_select(-1, i),
        floats(4, 5).T,
        index_values(3, 1),
    ),
    case(
        "index_select-0d_index",
        lambda x, i: x.index_select(1, i),
        floats(3, 4),
        index_values(2, shape=()),
    ),
    case("index_select-int", lambda x, i: x.index_select(1, i), ints(3, 4), index_values(1, 1, 3)),
    case(
        "take_along_dim-dim1",
        lambda x, i: x.take_along_dim(i, 1),
        floats(3, 5),
        indices(5, 3, 2),
        ref=lambda x, i: torch.take_along_dim(x, i, 1),
    ),
    case(
        "take_along_dim-bcast",
        lambda x, i: x.take_along_dim(i, 0),
        floats(4, 1, 3),
        indices(4, 2, 5, 1),
        ref=lambda x, i: torch.take_along_dim(x, i, 0),
    ),
    case(
        "take_along_dim-flat",
        lambda x, i: x.take_along_dim(i),
        floats(3, 4),
        indices(12, 5),
        ref=lambda x, i: torch.take_along_dim(x, i),
    ),
    case(
        "take_along_dim-argsort",
        lambda x: x.take_along_dim(x.argsort(1), 1),
        floats(3, 5),
        ref=lambda x: torch.take_along_dim(x, x.argsort(1), 1),
    ),
    *(
        case(
            f"gather-dim{d}_{dt.name}",
            lambda x, i, d=d: x.gather(d, i),
            floats(5, 4, dtype=dt).T,
            indices(5 if d == 0 else 4, 3, 2),
            ref=lambda x, i, d=d: torch.gather(x, d, i),
        )
        for d in (0, 1, -1)
        for dt in (f32, i32, bool_)
    ),
    case(
        "gather-wide",
        lambda x, i: x.gather(1, i),
        floats(3, 5),
        indices(5, 3, 4),
        ref=lambda x, i: torch.gather(x, 1, i),
    ),
    case(
        "gather-taller_index",
        lambda x, i: x.gather(0, i),
        floats(4, 5),
        indices(4, 6, 3),
        ref=lambda x, i: torch.gather(x, 0, i),
    ),
    case(
        "gather-empty",
        lambda x, i: x.gather(1, i),
        floats(3, 5),
        indices(5, 3, 0),
        ref=lambda x, i: torch.gather(x, 1, i),
    ),
    case(
        "scatter-dim0",
        lambda x, i, s: x.scatter(0, i, s),
        floats(4, 5),
        index_values(0, 1, 2, 3, 1, 0, shape=(3, 2)),
        floats(3, 2, low=5, high=9),
        ref=lambda x, i, s: torch.scatter(x, 0, i, s),
    ),
    case(
        "scatter-dim1",
        lambda x, i, s: x.scatter(1, i, s),
        floats(4, 5),
        index_values(4, 0, 1, 2, 3, 4, shape=(3, 2)),
        floats(3, 2, low=5, high=9),
        ref=lambda x, i, s: torch.scatter(x, 1, i, s),
    ),
    case(
        "scatter-value",
        lambda x, i: x.scatter(1, i, 7.0),
        floats(4, 5),
        index_values(4, 0, 1, 2, 3, 4, shape=(3, 2)),
        ref=lambda x, i: torch.scatter(x, 1, i, 7.0),
    ),
    *(
        case(
            f"scatter_reduce-{r}{'' if s else '_exclude_self'}",
            lambda x, i, src, r=r, s=s: x.scatter_reduce(0, i, src, r, s),
            floats(4, 3, low=0.5, high=2),
            indices(4, 6, 3),
            floats(6, 3, low=0.5, high=2),
            ref=lambda x, i, src, r=r, s=s: torch.scatter_reduce(x, 0, i, src, r, include_self=s),
        )
        for r in ("sum", "amax", "amin", "mean", "prod")
        for s in (True, False)
    ),
    # several writes to one place: the last along dim wins (torch's CPU order); values only, as
    # torch's gradient reaches the overwritten src elements too (the value does not depend on them)
    case(
        "scatter-duplicates",
        lambda x, i, s: x.scatter(0, i, s),
        floats(4, 3),
        index_values(0, 1, 3, 0, 1, 3, 2, 1, 0, shape=(3, 3)),
        floats(3, 3, low=5, high=9),
        ref=lambda x, i, s: torch.scatter(x, 0, i, s),
        grad=False,
    ),
    case(
        "scatter-duplicates_value",
        lambda x, i: x.scatter(1, i, -2.0),
        floats(3, 4),
        index_values(0, 0, 2, 3, 3, 3, shape=(3, 2)),
        ref=lambda x, i: torch.scatter(x, 1, i, -2.0),
    ),
    # ties with this tensor's own value share the gradient evenly, as torch's
    *(
        case(
            f"scatter_reduce-{r}_ties",
            lambda x, i, src, r=r: x.scatter_reduce(0, i, src, r),
            values(1.0, 2.0, 3.0, 0.0),
            index_values(0, 0, 1, 2, 2, 3),
            values(1.0, 1.0, 5.0, 3.0, 3.0, -1.0),
            ref=lambda x, i, src, r=r: torch.scatter_reduce(x, 0, i, src, r),
        )
        for r in ("amax", "amin")
    ),
    case(
        "scatter_reduce-int_sum",
        lambda x, i, s: x.scatter_reduce(1, i, s, "sum"),
        ints(3, 4),
        indices(4, 3, 6),
        ints(3, 6),
        ref=lambda x, i, s: torch.scatter_reduce(x, 1, i, s, "sum"),
    ),
    case(
        "scatter_reduce-int_amax",
        lambda x, i, s: x.scatter_reduce(1, i, s, "amax"),
        ints(3, 4),
        indices(4, 3, 6),
        ints(3, 6),
        ref=lambda x, i, s: torch.scatter_reduce(x, 1, i, s, "amax"),
    ),
    case(
        "one_hot-classes", lambda i: i.one_hot(6), indices(4, 2, 3), ref=lambda i: F.one_hot(i, 6)
    ),
    case(
        "one_hot-inferred",
        lambda i: i.one_hot(),
        index_values(0, 3, 1, 2, shape=(2, 2)),
        ref=F.one_hot,
    ),
    case(
        "one_hot-0d",
        lambda i: i.one_hot(3),
        index_values(2, shape=()),
        ref=lambda i: F.one_hot(i, 3),
    ),
    case(
        "one_hot-0d_inferred",
        lambda i: i.one_hot(-1),
        index_values(2, shape=()),
        ref=lambda i: F.one_hot(i, -1),
    ),
    case("one_hot-3d", lambda i: i.one_hot(8), indices(8, 2, 2, 3), ref=lambda i: F.one_hot(i, 8)),
    case(
        "masked_select-mask",
        lambda x: x.masked_select(x > 0.5),
        floats(8, 5),
        ref=lambda x: x.masked_select(x > 0.5),
    ),
    case("masked_select-bcast", lambda x, m: x.masked_select(m), floats(4, 3).T, mask(3)),
    case("masked_select-bcast_both", lambda x, m: x.masked_select(m), floats(3, 1), mask(2, 1, 4)),
    case("masked_select-0d_mask", lambda x, m: x.masked_select(m), floats(3, 4), mask()),
    case("masked_select-int", lambda x, m: x.masked_select(m), ints(3, 4), mask(3, 4)),
    case("masked_select-bool", lambda x, m: x.masked_select(m), mask(3, 4), mask(3, 4)),
    case(
        "masked_select-none",
        lambda x: x.masked_select(x > 9),
        floats(3, 4),
        ref=lambda x: x.masked_select(x > 9),
    ),
    case("nonzero-2d", lambda x: x.nonzero(), ints(4, 5, low=-1, high=1)),
    case("nonzero-1d", lambda x: x.nonzero(), ints(20, low=-1, high=1)),
    case("nonzero-3d_bool", lambda x: x.nonzero(), mask(3, 5, 2)),
    case(
        "nonzero-float",
        lambda x: x.nonzero(),
        values(0.0, -0.0, 2.5, float("nan"), 0.0, -1.0, shape=(2, 3)),
    ),
    case("nonzero-0d", lambda x: x.nonzero(), ints(low=1, high=3)),
    case("nonzero-0d_zero", lambda x: x.nonzero(), ints(low=0, high=0)),
    case("nonzero-tuple", lambda x: x.nonzero(as_tuple=True), ints(4, 5, low=-1, high=1)),
    case("nonzero-tuple_0d", lambda x: x.nonzero(as_tuple=True), ints(low=1, high=3)),
    case("nonzero-T", lambda x: x.nonzero(), ints(5, 4, low=-1, high=1).T),
    case("nonzero-empty", lambda x: x.nonzero(), floats(0, 3)),
    case(
        "one_hot-times",
        lambda x, i: x * i.one_hot(4),
        floats(3, 4),
        indices(4, 3),
        ref=lambda x, i: x * F.one_hot(i, 4),
    ),
    case("masked_fill-bcast", lambda x, m: x.masked_fill(m, 2.0), floats(4, 3).T, mask(4, 1).T),
    case("masked_fill-same", lambda x, m: x.masked_fill(m, -1.5), floats(3, 4), mask(3, 4)),
    case("masked_fill-int", lambda x, m: x.masked_fill(m, 2), ints(3, 4), mask(4)),
    case("masked_fill-0d_mask", lambda x, m: x.masked_fill(m, 0.0), floats(3, 4), mask(1, 1)),
    case(
        "masked_fill-inf",
        lambda x, m: x.masked_fill(m, float("-inf")).softmax(-1),
        floats(3, 4),
        mask(3, 4),
        ref=lambda x, m: x.masked_fill(m, float("-inf")).softmax(-1),
    ),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(GETITEM))
def test_getitem(c, device, request):
    check(c, device, request)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(SETITEM))
def test_setitem(c, device, request):
    check(c, device, request)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(GATHER))
def test_gather_scatter(c, device, request):
    check(c, device, request)


# (formula, operand shapes): torch.einsum's forms, operands passed one by one
EINSUMS = [
    ("->", [()]),
    ("ij->ji", [(3, 4)]),
    ("jki", [(2, 3, 4)]),
    ("ij,jk", [(3, 4), (4, 2)]),
    ("ik,jkl,il->ij", [(2, 3), (5, 3, 4), (2, 4)]),
    ("pqrs,tuqvr->pstuv", [(2, 3, 4, 2), (2, 3, 3, 2, 4)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("iji->j", [(3, 2, 3)]),
    ("...ii->...", [(2, 3, 4, 4)]),
    ("...id,...jd->...ij", [(2, 3, 4), (1, 5, 4)]),
    ("...id,...jd", [(3, 2, 4), (3, 5, 4)]),
    ("i...j,ji...->...", [(2, 3, 4, 5), (5, 2, 4)]),
    ("ij...,ij...->ij", [(2, 3, 4, 2), (2, 3, 4, 2)]),
    ("bij,bjk->bik", [(1, 3, 4), (2, 4, 2)]),
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij->", [(3, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij,ij->i", [(3, 4), (3, 4)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
]
EINSUM = [
    case(
        f"einsum-{f}",
        lambda *xs, f=f: Tensor.einsum(f, *xs),
        *(floats(*s) for s in shapes),
        ref=lambda *xs, f=f: torch.einsum(f, *xs),
    )
    for f, shapes in EINSUMS
]
EINSUM.append(
    case(
        "einsum-list",
        lambda a, b: Tensor.einsum("i,i->i", [a, b]),
        floats(5),
        floats(5),
        ref=lambda a, b: torch.einsum("i,i->i", [a, b]),
    )
)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(EINSUM))
def test_einsum(c, device, request):
    check(c, device, request)


SORTED = values(-2.0, -1.0, 0.0, 0.0, 1.0, 3.0)
SEARCH = [
    case(
        "searchsorted-1d",
        lambda s, v: s.searchsorted(v),
        SORTED,
        floats(3, 4),
        ref=torch.searchsorted,
    ),
    case(
        "searchsorted-right",
        lambda s, v: s.searchsorted(v, right=True),
        SORTED,
        values(-1.0, 0.0, 3.0, 5.0, nan),
        ref=lambda s, v: torch.searchsorted(s, v, right=True),
    ),
    case(
        "searchsorted-side",
        lambda s, v: s.searchsorted(v, side="right"),
        SORTED,
        values(0.0, -2.0, 1.0),
        ref=lambda s, v: torch.searchsorted(s, v, side="right"),
    ),
    case(
        "searchsorted-nd",
        lambda s, v: s.searchsorted(v),
        values(0, 1, 1, 4, 5, -3, 0, 2, 2, 2, shape=(2, 5)),
        ints(2, 3, low=-3, high=5),
        ref=torch.searchsorted,
    ),
    case(
        "searchsorted-sorter",
        lambda s, v, o: s.searchsorted(v, sorter=o),
        values(3.0, 1.0, 2.0, 0.0),
        floats(5),
        index_values(3, 1, 2, 0),
        ref=lambda s, v, o: torch.searchsorted(s, v, sorter=o),
    ),
    case(
        "searchsorted-scalar",
        lambda s: s.searchsorted(0.5),
        SORTED,
        ref=lambda s: torch.searchsorted(s, 0.5),
    ),
    case(
        "searchsorted-0d", lambda s, v: s.searchsorted(v), SORTED, floats(), ref=torch.searchsorted
    ),
    case(
        "searchsorted-empty",
        lambda s, v: s.searchsorted(v),
        floats(0),
        floats(3),
        ref=torch.searchsorted,
    ),
    case(
        "bucketize-left",
        lambda x, b: x.bucketize(b),
        ints(3, 4),
        values(-3, 0, 0, 4, dtype=i32),
        ref=torch.bucketize,
    ),
    case(
        "bucketize-right",
        lambda x, b: x.bucketize(b, right=True),
        floats(5).T,
        SORTED,
        ref=lambda x, b: torch.bucketize(x, b, right=True),
    ),
    case("argwhere-2d", lambda x: x.argwhere(), ints(4, 5, low=-1, high=1)),
    case("argwhere-0d", lambda x: x.argwhere(), ints(low=1, high=3)),
    case(
        "index_add-rows",
        lambda x, i, s: x.index_add(0, i, s),
        floats(5, 3),
        index_values(1, 4, 1, 0),
        floats(4, 3),
    ),
    case(
        "index_add-dim1",
        lambda x, i, s: x.index_add(-1, i, s, alpha=2.5),
        floats(2, 3, 4),
        indices(4, 6),
        floats(2, 3, 6),
    ),
    case(
        "index_add-int",
        lambda x, i, s: x.index_add(1, i, s),
        ints(3, 4),
        index_values(0, 0, 3),
        ints(3, 3),
    ),
    case(
        "index_add-T",
        lambda x, i, s: x.index_add(0, i, s),
        floats(3, 4).T,
        index_values(2),
        floats(1, 4).T,
    ),
    case(
        "index_add-0d",
        lambda x, i, s: x.index_add(0, i, s),
        floats(),
        index_values(0, shape=()),
        floats(),
    ),
    # n >= 4 k: each index's rows summed over pairs of indices, then looked up (_paired_rows)
    case(
        "index_add-paired-rows",
        lambda x, i, s: x.index_add(0, i, s, alpha=-2),
        floats(40, 3),
        index_values(1, 39, 1, 0, 1),
        floats(5, 3),
    ),
    case(
        "index_add-paired-dim1",
        lambda x, i, s: x.index_add(1, i, s),
        floats(2, 30, 3),
        indices(30, 6),
        floats(2, 6, 3),
    ),
    case(
        "index_add-paired-last",
        lambda x, i, s: x.index_add(-1, i, s),
        ints(2, 3, 20),
        index_values(19, 0, 19),
        ints(2, 3, 3),
    ),
    case(
        "index_add-empty",
        lambda x, i, s: x.index_add(0, i, s),
        floats(3, 2),
        index_values(shape=(0,)),
        floats(0, 2),
    ),
    case(
        "index_fill-rows",
        lambda x, i: x.index_fill(0, i, -1.5),
        floats(4, 3),
        index_values(0, 2, 2),
    ),
    case("index_fill-last", lambda x, i: x.index_fill(-1, i, 7), ints(3, 4), index_values(3)),
    case(
        "index_fill-tensor",
        lambda x, i, v: x.index_fill(1, i, v),
        floats(3, 4),
        index_values(1, 3),
        floats(),
    ),
    case(
        "index_fill-0d", lambda x, i: x.index_fill(0, i, 2.0), floats(), index_values(0, shape=())
    ),
    case(
        "scatter_add-rows",
        lambda x, i, s: x.scatter_add(0, i, s),
        floats(3, 4),
        indices(3, 2, 4),
        floats(2, 4),
    ),
    case(
        "scatter_add-dim1",
        lambda x, i, s: x.scatter_add(1, i, s),
        ints(3, 4),
        indices(4, 2, 3),
        ints(3, 3),
    ),
    case(
        "unique-flat",
        lambda x: x.unique(return_inverse=True, return_counts=True),
        ints(12, low=-3, high=3),
    ),
    case("unique-2d", lambda x: x.unique(return_inverse=True), ints(3, 4, low=0, high=4)),
    case("unique-float", lambda x: x.unique(), values(2.5, -1.0, 2.5, 0.0, -0.0, 7.0), grad=False),
    case(
        "unique-rows",
        lambda x: x.unique(dim=0, return_inverse=True, return_counts=True),
        ints(6, 2, low=0, high=1),
    ),
    case(
        "unique-columns", lambda x: x.unique(return_counts=True, dim=1), ints(2, 7, low=0, high=1)
    ),
    case("unique-0d", lambda x: x.unique(return_inverse=True), ints(low=1, high=3)),
    case(
        "unique-empty",
        lambda x: x.unique(return_inverse=True, return_counts=True),
        floats(0),
        grad=False,
    ),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(SEARCH))
def test_search_and_accumulate(c, device, request):
    check(c, device, request)
