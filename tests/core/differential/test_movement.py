"""Movement, joining and splitting against torch: reshape, permute, expand, pad, shrink, flip,
slicing, cat, stack, split, repeat, roll, tril/triu, meshgrid.

Each row is ``case("op-variant", fusegrad's function, *inputs, ref=torch's)``; ``ref`` is left
out where the same lambda works on both libraries' tensors.
"""

from __future__ import annotations

import pytest

from fusegrad import Tensor

from .harness import DEVICES, F, case, check, f16, floats, index_values, ints, mask, params, torch

X = floats(2, 3, 4)
XI = ints(2, 3, 4)


def T(x):
    """torch's spelling of fusegrad's ``x.T`` (reversed axes) for any rank."""
    return x.permute(*reversed(range(x.ndim)))


RESHAPE = [
    case("reshape-2d", lambda x: x.reshape(6, 4), X),
    case("reshape-infer", lambda x: x.reshape((4, -1)), X, ref=lambda x: x.reshape(4, -1)),
    case(
        "reshape-infer_empty",
        lambda x: x.reshape((3, -1, 2)),
        floats(0, 6),
        ref=lambda x: x.reshape(3, -1, 2),
    ),
    case("reshape-flat", lambda x: x.reshape(-1), X),
    case("reshape-ones", lambda x: x.reshape(2, 1, 12, 1), X),
    case("reshape-int", lambda x: x.reshape(4, 6), XI),
    case("reshape-0d", lambda x: x.reshape(1, 1), floats()),
    case("reshape-to_0d", lambda x: x.reshape(()), floats(1, 1), ref=lambda x: x.reshape(())),
    case("reshape-T", lambda x: x.reshape(-1), floats(3, 4).T),
    case("reshape-step", lambda x: x.reshape(2, 3), floats(3, 2).step),
    case("reshape-empty", lambda x: x.reshape(3, 0), floats(0, 3)),
    case("reshape-none", lambda x: x.reshape(None, -1), X, ref=lambda x: x.reshape(2, -1)),
    case(
        "reshape-nones",
        lambda x: x.reshape((None, None, 2, 2)),
        X,
        ref=lambda x: x.reshape(2, 3, 2, 2),
    ),
    case("reshape-0d_infer", lambda x: x.reshape(-1), floats()),
    case(
        "reshape-0d_ones",
        lambda x: x.reshape((1, 1, 1)),
        floats(),
        ref=lambda x: x.reshape(1, 1, 1),
    ),
    case("unflatten-first", lambda x: x.unflatten(0, (2, 1)), X),
    case("unflatten-infer", lambda x: x.unflatten(-1, (2, -1)), X),
    case("unflatten-T", lambda x: x.unflatten(0, (-1, 2, 1)), floats(4, 3).T),
    case("unfold-overlap", lambda x: x.unfold(0, 3, 1), floats(8)),
    case("unfold-gaps", lambda x: x.unfold(-1, 2, 3), X),
    case("unfold-middle", lambda x: x.unfold(1, 2, 1), X),
    case("unfold-whole", lambda x: x.unfold(0, 8, 3), floats(8, 2)),
    case("unfold-size0", lambda x: x.unfold(1, 0, 8), floats(3, 3, 3)),
    case("unfold-0d", lambda x: x.unfold(0, 1, 1), floats()),
    case("unfold-T", lambda x: x.unfold(0, 2, 2), floats(5, 3).T),
    case("unfold-int", lambda x: x.unfold(1, 2, 2), XI),
    case("view-2d", lambda x: x.view(3, 8), X),
    case("permute-3d", lambda x: x.permute(2, 0, 1), X),
    case("permute-tuple", lambda x: x.permute((1, 2, 0)), X, ref=lambda x: x.permute(1, 2, 0)),
    case("permute-negative", lambda x: x.permute(-1, 0, 1), X),
    case("permute-int", lambda x: x.permute(1, 2, 0), XI),
    case("permute-bool", lambda x: x.permute(1, 0), mask(3, 4)),
    case("permute-empty", lambda x: x.permute(1, 0).exp(), floats(0, 3)),
    case("permute-0d", lambda x: x.permute(), floats(), ref=lambda x: x.permute(())),
    case("transpose-0d", lambda x: x.transpose(0, -1), floats()),
    case("transpose-3d", lambda x: x.transpose(0, 2), X),
    case("transpose-negative", lambda x: x.transpose(-1, -2), X),
    case("T-3d", lambda x: x.T, X, ref=T),
    case("T-2d", lambda x: x.T, floats(3, 4)),
    case("expand-size1", lambda x: x.expand(3, 4), floats(3, 1)),
    case("expand-new_axes", lambda x: x.expand(2, 3, 4), floats(3, 1)),
    case("expand-keep", lambda x: x.expand(3, -1, -1, -1), X),
    case("expand-middle", lambda x: x.reshape(2, 3, 1, 4).expand(2, 3, 5, 4), X),
    case("expand-0d", lambda x: x.expand(2, 3), floats()),
    case("expand-to_empty", lambda x: x.expand(0, 4), floats(1, 4)),
    case("expand-f16", lambda x: x.expand(3, 4) * 2, floats(1, 4, dtype=f16)),
    case("unsqueeze-first", lambda x: x.unsqueeze(0), X),
    case("unsqueeze-last", lambda x: x.unsqueeze(-1), X),
    case("unsqueeze-middle", lambda x: x.unsqueeze(1), X),
    case("unsqueeze-0d", lambda x: x.unsqueeze(0), floats()),
    case("squeeze-all", lambda x: x.squeeze(), floats(1, 3, 1)),
    case("squeeze-axis", lambda x: x.squeeze(1), floats(3, 1, 4)),
    case("squeeze-not_one", lambda x: x.squeeze(0), X),
    case("squeeze-to_0d", lambda x: x.squeeze(), floats(1, 1)),
    case("squeeze-0d", lambda x: x.squeeze(), floats()),
    case("squeeze-0d_axis", lambda x: x.squeeze(-1), floats()),
    case("squeeze-axes", lambda x: x.squeeze((0, 1)), floats(1, 3, 1)),
    case("squeeze-negative_axes", lambda x: x.squeeze((-1, 0)), floats(1, 3, 1)),
    case("unsqueeze-0d_last", lambda x: x.unsqueeze(-1), floats()),
    case("flatten-all", lambda x: x.flatten(), X),
    case("flatten-start", lambda x: x.flatten(1), X),
    case("flatten-range", lambda x: x.flatten(0, 1), X),
    case("flatten-0d", lambda x: x.flatten(), floats()),
    case("flatten-0d_range", lambda x: x.flatten(0, -1), floats()),
    case("flatten-T", lambda x: x.flatten(), floats(3, 4).T),
]

PAD = [
    case(
        "pad-2d",
        lambda x: x.pad(((1, 2), (0, 1))),
        floats(3, 4),
        ref=lambda x: F.pad(x, (0, 1, 1, 2)),
    ),
    case(
        "pad-3d",
        lambda x: x.pad(((1, 0), None, (2, 1))),
        X,
        ref=lambda x: F.pad(x, (2, 1, 0, 0, 1, 0)),
    ),
    case(
        "pad-value",
        lambda x: x.pad((None, (2, 1)), value=2.0),
        floats(3, 4),
        ref=lambda x: F.pad(x, (2, 1), value=2.0),
    ),
    case(
        "pad-negative",
        lambda x: x.pad(((-1, 2), (1, -2))),
        floats(3, 4),
        ref=lambda x: F.pad(x, (1, -2, -1, 2)),
    ),
    case(
        "pad-negative_value",
        lambda x: x.pad((None, (-1, 1), None), value=7.0),
        X,
        ref=lambda x: F.pad(x, (0, 0, -1, 1), value=7.0),
    ),
    case(
        "pad-int",
        lambda x: x.pad(((1, 1), (2, 0))),
        ints(3, 4),
        ref=lambda x: F.pad(x, (2, 0, 1, 1)),
    ),
    case(
        "pad-T",
        lambda x: x.pad(((1, 1), (0, 2))),
        floats(4, 6).T,
        ref=lambda x: F.pad(x, (0, 2, 1, 1)),
    ),
    case(
        "pad-empty",
        lambda x: x.pad(((1, 1), None)),
        floats(0, 3),
        ref=lambda x: F.pad(x, (0, 0, 1, 1)),
    ),
    case(
        "pad-size1",
        lambda x: x.pad(((1, 1), (1, 1))),
        floats(1, 1),
        ref=lambda x: F.pad(x, (1, 1, 1, 1)),
    ),
    # PyTorch's flat form (the last axis first), an int for every side, and F.pad's other modes
    *(
        case(
            f"pad-flat_{i}",
            lambda x, p=p: x.pad(p),
            floats(2, 3, 5),
            ref=lambda x, p=p: F.pad(x, p),
        )
        for i, p in enumerate([(1, 2), (1, 2, 0, 1), (0, 1, 2, 0, 1, 1), (-1, 2, 1, -2), ()])
    ),
    case(
        "pad-int_all",
        lambda x: x.pad(1, value=3.0),
        floats(2, 3),
        ref=lambda x: F.pad(x, (1, 1, 1, 1), value=3.0),
    ),
    *(
        case(
            f"pad-{mode}_{i}",
            lambda x, p=p, m=mode: x.pad(p, mode=m),
            floats(1, 2, 5, 5),
            ref=lambda x, p=p, m=mode: F.pad(x, p, mode=m),
        )
        for mode in ("reflect", "replicate", "circular")
        for i, p in enumerate(
            [(0, 2, 3, 2), (4, 4, 0, 4), (-1, 2, 2, -1), (1, -2, 2, -1), (0, 0, 0, -5)]
        )
    ),
    *(
        case(
            f"pad-{mode}_3d",
            lambda x, m=mode: x.pad((1, 2, 3, 4, 1, 2), mode=m),
            floats(1, 2, 5, 5, 5),
            ref=lambda x, m=mode: F.pad(x, (1, 2, 3, 4, 1, 2), mode=m),
        )
        for mode in ("reflect", "replicate", "circular")
    ),
    case(
        "pad-reflect_crop",
        lambda x: x.pad((3, -5, 1, -4), mode="reflect"),
        floats(1, 1, 5, 5),
        ref=lambda x: F.pad(x, (3, -5, 1, -4), mode="reflect"),
    ),
    case(
        "pad-replicate_far",
        lambda x: x.pad((3, 11, 0, 30), mode="replicate"),
        floats(1, 1, 5, 5),
        ref=lambda x: F.pad(x, (3, 11, 0, 30), mode="replicate"),
    ),
    case(
        "pad-circular_whole",
        lambda x: x.pad((5, 5), mode="circular"),
        floats(2, 5).T,
        ref=lambda x: F.pad(x, (5, 5), mode="circular"),
    ),
    case(
        "pad-reflect_int",
        lambda x: x.pad((2, 1), mode="reflect"),
        ints(2, 3, 4),
        ref=lambda x: F.pad(x.float(), (2, 1), mode="reflect").int(),
    ),
    case("shrink-3d", lambda x: x.shrink(((0, 1), None, (1, 3))), X, ref=lambda x: x[0:1, :, 1:3]),
    case("shrink-2d", lambda x: x.shrink(((1, 3), None)), floats(4, 3), ref=lambda x: x[1:3]),
    case("shrink-to_empty", lambda x: x.shrink(((1, 1), None, None)), X, ref=lambda x: x[1:1]),
    case("flip-first", lambda x: x.flip(0), X),
    case("flip-axes", lambda x: x.flip((0, 2)), X),
    case("flip-last", lambda x: x.flip(-1), X),
    case("flip-int", lambda x: x.flip(1), XI),
    case("flip-T", lambda x: x.flip((0, 1)), floats(4, 6).T),
    case("flip-empty", lambda x: x.flip(0), floats(0, 3)),
    case("flip-0d", lambda x: x.flip(()), floats(), ref=lambda x: x.flip(())),
    case("flip-0d_axis", lambda x: x.flip(0), floats()),
    case("flip-none", lambda x: x.flip(()), X, ref=lambda x: x.flip(())),
    case("flip-twice", lambda x: x.flip((0, 1, 2)).flip(0), X),
    case("diagonal-square", lambda x: x.diagonal(), floats(5, 5)),
    case("diagonal-wide", lambda x: x.diagonal(), floats(3, 4)),
    case("diagonal-tall", lambda x: x.diagonal(), floats(4, 3)),
    case("diagonal-above", lambda x: x.diagonal(2), floats(3, 5)),
    case("diagonal-below", lambda x: x.diagonal(-1), floats(5, 5)),
    case("diagonal-beyond", lambda x: x.diagonal(7), floats(3, 5)),
    case("diagonal-batched", lambda x: x.diagonal(dim1=-2, dim2=-1), floats(2, 3, 4, 5)),
    case("diagonal-axes", lambda x: x.diagonal(1, 2, 0), X),
    case("diagonal-T", lambda x: x.diagonal(-1), floats(4, 3).T),
    case("diagonal-int", lambda x: x.diagonal(), ints(3, 3)),
    case("diag-vector", lambda x: x.diag(), floats(5)),
    case("diag-vector_above", lambda x: x.diag(2), floats(3)),
    case("diag-vector_below", lambda x: x.diag(-1), floats(3)),
    case("diag-empty", lambda x: x.diag(1), floats(0)),
    case("diag-bool", lambda x: x.diag(), mask(4)),
    case("diag-matrix", lambda x: x.diag(-1), floats(4, 5)),
    case("clone-view", lambda x: x.clone() * 2, floats(3, 4).T),
    # torch's names for axis moves (tensor/aliases.py)
    case("t-2d", lambda x: x.t(), floats(3, 4)),
    case("t-1d", lambda x: x.t(), floats(4)),
    case("t-0d", lambda x: x.t(), floats()),
    case("mT-3d", lambda x: x.mT, X),
    case("ravel-T", lambda x: x.ravel(), floats(3, 4).T),
    case("ravel-0d", lambda x: x.ravel(), floats()),
    case("movedim-one", lambda x: x.movedim(0, -1), X),
    case("movedim-two", lambda x: x.movedim((0, 2), (2, 0)), X),
    case("movedim-crossing", lambda x: x.movedim((2, 0), (0, 1)), X),
    case("moveaxis-one", lambda x: x.moveaxis(-1, 1), X),
    case("swapaxes-3d", lambda x: x.swapaxes(0, 2), X),
    case("swapdims-int", lambda x: x.swapdims(-1, 1), XI),
    case("narrow-middle", lambda x: x.narrow(1, 1, 2), X),
    case("narrow-negative_start", lambda x: x.narrow(-1, -3, 2), X),
    case("narrow-empty", lambda x: x.narrow(2, 4, 0), X),
    case("select-middle", lambda x: x.select(1, 2), X),
    case("select-negative", lambda x: x.select(-1, -1), floats(3, 4).T),
    case("rot90-once", lambda x: x.rot90(), floats(3, 4)),
    case("rot90-twice", lambda x: x.rot90(2, (1, 2)), X),
    case("rot90-back", lambda x: x.rot90(-1, (0, 2)), X, ref=lambda x: x.rot90(-1, (0, 2))),
    case("rot90-zero", lambda x: x.rot90(4), floats(3, 4)),
    case("flipud-2d", lambda x: x.flipud(), floats(3, 4)),
    case("fliplr-3d", lambda x: x.fliplr(), X),
    case("expand_as-bcast", lambda x, y: x.expand_as(y), floats(3, 1), floats(2, 3, 4)),
    case("broadcast_to-new_axes", lambda x: x.broadcast_to((2, 3, 4)), floats(4)),
    case("view_as-flat", lambda x, y: x.view_as(y), X, floats(24)),
    case("reshape_as-T", lambda x, y: x.reshape_as(y), floats(3, 4).T, floats(2, 6)),
    case("type_as-int", lambda x, y: x.type_as(y), floats(3, 4), ints(2)),
    case("type_as-f16", lambda x, y: x.type_as(y), ints(3, 4), floats(2, dtype=f16)),
    case("new_zeros-size", lambda x: x.new_zeros(2, 3) + x.sum(), floats(3)),
    case("new_ones-tuple", lambda x: x.new_ones((2, 3)) * x, floats(3)),
    case("new_full-int", lambda x: x.new_full((2, 2), 5.7) + x, ints(2)),
    case("new_tensor-list", lambda x: x.new_tensor([1, 2, 3]) * x, floats(3)),
]

JOIN = [
    case(
        "cat-dim1",
        lambda a, b, c: a.cat(b, c, dim=1),
        floats(2, 3),
        floats(2, 1),
        floats(2, 4),
        ref=lambda a, b, c: torch.cat([a, b, c], 1),
    ),
    case(
        "cat-dim0_T",
        lambda a, b: a.cat(b),
        floats(3, 4).T,
        floats(2, 4),
        ref=lambda a, b: torch.cat([a, b]),
    ),
    case(
        "cat-last",
        lambda a, b: Tensor.cat(a, b, a, dim=-1),
        floats(3, 4),
        floats(3, 2),
        ref=lambda a, b: torch.cat([a, b, a], -1),
    ),
    case(
        "cat-int",
        lambda a, b: a.cat(b, dim=0),
        ints(2, 3),
        ints(1, 3),
        ref=lambda a, b: torch.cat([a, b]),
    ),
    case(
        "cat-bool",
        lambda a, b: a.cat(b, dim=1),
        mask(2, 3),
        mask(2, 2),
        ref=lambda a, b: torch.cat([a, b], 1),
    ),
    case(
        "cat-promotes",
        lambda a, b: a.cat(b),
        ints(2),
        floats(1),
        ref=lambda a, b: torch.cat([a, b]),
    ),
    case(
        "cat-empty",
        lambda a, b: a.cat(b),
        floats(0, 3),
        floats(2, 3),
        ref=lambda a, b: torch.cat([a, b]),
    ),
    case(
        "cat-size1", lambda a, b: a.cat(b), floats(1), floats(1), ref=lambda a, b: torch.cat([a, b])
    ),
    case(
        "cat-list",
        lambda a, b: Tensor.cat([a, b, a], dim=1),
        floats(2, 3),
        floats(2, 1),
        ref=lambda a, b: torch.cat([a, b, a], 1),
    ),
    case(
        "cat-tuple_dim",
        lambda a, b: Tensor.cat((a, b), -2),
        floats(2, 3),
        floats(1, 3),
        ref=lambda a, b: torch.cat((a, b), -2),
    ),
    case("cat-one", lambda a: Tensor.cat([a]), floats(2, 3), ref=lambda a: torch.cat([a])),
    case(
        "stack-dim0",
        lambda a, b: a.stack(b),
        floats(2, 3),
        floats(2, 3),
        ref=lambda a, b: torch.stack([a, b]),
    ),
    case(
        "stack-dim1",
        lambda a, b: a.stack(b, a, dim=1),
        floats(3, 4).T,
        floats(3, 4),
        ref=lambda a, b: torch.stack([a, b, a], 1),
    ),
    case(
        "stack-last",
        lambda a, b: a.stack(b, dim=-1),
        ints(3, 4),
        ints(3, 4),
        ref=lambda a, b: torch.stack([a, b], -1),
    ),
    case(
        "stack-bool",
        lambda a, b: a.stack(b, dim=-1),
        mask(3, 4),
        mask(3, 4),
        ref=lambda a, b: torch.stack([a, b], -1),
    ),
    case(
        "stack-0d",
        lambda a, b: a.stack(b),
        floats(),
        floats(),
        ref=lambda a, b: torch.stack([a, b]),
    ),
    case(
        "stack-empty",
        lambda a, b: a.stack(b),
        floats(0, 2),
        floats(0, 2),
        ref=lambda a, b: torch.stack([a, b]),
    ),
    case(
        "stack-list",
        lambda a, b: Tensor.stack([a, b], dim=1),
        floats(2, 3),
        floats(2, 3),
        ref=lambda a, b: torch.stack([a, b], 1),
    ),
    case(
        "stack-static",
        lambda a, b: Tensor.stack(a, b, a, dim=-1),
        floats(2, 3),
        floats(2, 3),
        ref=lambda a, b: torch.stack([a, b, a], -1),
    ),
    case(
        "stack-tuple_dim",
        lambda a, b: Tensor.stack((a, b), 2),
        floats(2, 3),
        floats(2, 3),
        ref=lambda a, b: torch.stack((a, b), 2),
    ),
    case("stack-one", lambda a: Tensor.stack([a]), floats(2, 3), ref=lambda a: torch.stack([a])),
    case(
        "stack-0d_last",
        lambda a, b: Tensor.stack(a, b, dim=-1),
        floats(),
        floats(),
        ref=lambda a, b: torch.stack([a, b], -1),
    ),
    case("split-size", lambda x: x.split(2, 1), floats(3, 5)),
    case("split-sizes", lambda x: x.split([1, 3], 0), floats(4, 2)),
    case("split-with_zero", lambda x: x.split([3, 0, 2], 0), floats(5, 5).T),
    case("split-T", lambda x: x.split(3, 1), floats(5, 5).T),
    case("chunk-dim1", lambda x: x.chunk(3, 1), floats(2, 7)),
    case("chunk-dim0", lambda x: x.chunk(2, 0), floats(7, 4)),
    case("chunk-more_than_size", lambda x: x.chunk(5, 1), floats(7, 4)),
]

REPEAT = [
    case("repeat-2d", lambda x: x.repeat(2, 3), floats(3, 2).T),
    case("repeat-ones", lambda x: x.repeat(1, 1), floats(2, 3)),
    case("repeat-new_axes", lambda x: x.repeat(2, 1, 3), floats(3, 4)),
    case("repeat-int", lambda x: x.repeat((2, 1, 2)), ints(2, 3), ref=lambda x: x.repeat(2, 1, 2)),
    case("repeat-0d", lambda x: x.repeat(3), floats()),
    case("tile-2d", lambda x: x.tile((2, 1)), floats(3, 4), ref=lambda x: torch.tile(x, (2, 1))),
    case("tile-fewer", lambda x: x.tile((3,)), floats(2, 3), ref=lambda x: torch.tile(x, (3,))),
    case(
        "repeat_interleave-flat",
        lambda x: x.repeat_interleave(3),
        floats(2, 3).T,
        ref=lambda x: torch.repeat_interleave(x, 3),
    ),
    case(
        "repeat_interleave-dim0",
        lambda x: x.repeat_interleave(2, 0),
        floats(2, 3),
        ref=lambda x: torch.repeat_interleave(x, 2, 0),
    ),
    case(
        "repeat_interleave-dim1",
        lambda x: x.repeat_interleave(3, 1),
        floats(2, 3),
        ref=lambda x: torch.repeat_interleave(x, 3, 1),
    ),
    case("roll-dim0", lambda x: x.roll(1, 0), floats(3, 4)),
    case("roll-negative", lambda x: x.roll(-2, 1), floats(5, 3).T),
    case("roll-dims", lambda x: x.roll((1, -2), (0, 1)), floats(3, 4)),
    case("roll-flat", lambda x: x.roll(5), floats(3, 4)),
    case("roll-wraps", lambda x: x.roll(7, 1), floats(3, 5)),
    case("roll-empty", lambda x: x.roll(2, 0), floats(0, 3)),
    case("roll-empty_flat", lambda x: x.roll(1), floats(2, 0, 3)),
    case("roll-empty_middle", lambda x: x.roll(1, 1), floats(2, 0, 3)),
    case("roll-three", lambda x: x.roll((1, 2, -1), (0, 1, 2)), X),
    case("roll-same_axis", lambda x: x.roll((1, 2), (1, 1)), X),
    case("roll-zero", lambda x: x.roll((0, 0), (0, 1)), X),
    case("roll-tuple_flat", lambda x: x.roll((3,)), floats(2, 4)),
    case("roll-no_dims", lambda x: x.roll(3, ()), floats(2, 4)),
    case("roll-0d", lambda x: x.roll(1), floats()),
    case("roll-int", lambda x: x.roll(-5, 2), XI),
    case("tril-main", lambda x: x.tril(), floats(4, 4)),
    case("tril-batched", lambda x: x.tril(1), floats(2, 4, 5)),
    case("tril-below", lambda x: x.tril(-2), floats(2, 4, 5)),
    case("triu-main", lambda x: x.triu(), floats(4, 5).T),
    case("triu-above", lambda x: x.triu(1), floats(2, 3, 4)),
    case("triu-int", lambda x: x.triu(-1), ints(4, 4)),
    case("triu-empty", lambda x: x.triu(), floats(3, 0)),
    case(
        "meshgrid-ij",
        lambda a, b, c: Tensor.meshgrid(a, b, c),
        floats(2),
        floats(3),
        floats(4),
        ref=lambda a, b, c: torch.meshgrid(a, b, c, indexing="ij"),
    ),
    case(
        "meshgrid-xy",
        lambda a, b, c: Tensor.meshgrid(a, b, c, indexing="xy"),
        floats(2),
        floats(3),
        floats(4),
        ref=lambda a, b, c: torch.meshgrid(a, b, c, indexing="xy"),
    ),
    *(
        case(
            f"meshgrid-one_{ix}",
            lambda a, ix=ix: a.meshgrid(indexing=ix),
            floats(3),
            ref=lambda a, ix=ix: torch.meshgrid(a, indexing=ix),
        )
        for ix in ("ij", "xy")
    ),
    *(
        case(
            f"meshgrid-method_{ix}",
            lambda a, b, ix=ix: a.meshgrid(b, indexing=ix),
            floats(3),
            floats(4),
            ref=lambda a, b, ix=ix: torch.meshgrid(a, b, indexing=ix),
        )
        for ix in ("ij", "xy")
    ),
    *(
        case(
            f"meshgrid-0d_{ix}",
            lambda a, b, c, ix=ix: Tensor.meshgrid([a, b, c], indexing=ix),
            floats(3),
            floats(),
            floats(2),
            ref=lambda a, b, c, ix=ix: torch.meshgrid([a, b, c], indexing=ix),
        )
        for ix in ("ij", "xy")
    ),
    case(
        "meshgrid-int",
        lambda a, b: a.meshgrid(b),
        ints(2),
        ints(3),
        ref=lambda a, b: torch.meshgrid(a, b, indexing="ij"),
    ),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(RESHAPE + PAD))
def test_shape(c, device, request):
    check(c, device, request)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(JOIN + REPEAT))
def test_join_and_repeat(c, device, request):
    check(c, device, request)


STACKING = [
    case(
        "hstack-1d",
        lambda a, b: Tensor.hstack([a, b]),
        floats(3),
        floats(2),
        ref=lambda a, b: torch.hstack([a, b]),
    ),
    case(
        "hstack-2d",
        lambda a, b: Tensor.hstack((a, b)),
        floats(2, 3),
        floats(2, 1),
        ref=lambda a, b: torch.hstack((a, b)),
    ),
    case(
        "hstack-0d",
        lambda a, b: Tensor.hstack([a, b]),
        floats(),
        floats(),
        ref=lambda a, b: torch.hstack([a, b]),
    ),
    case(
        "hstack-int",
        lambda a, b: Tensor.hstack([a, b]),
        ints(3),
        floats(2),
        ref=lambda a, b: torch.hstack([a, b]),
    ),
    case(
        "vstack-1d",
        lambda a, b: Tensor.vstack([a, b]),
        floats(3),
        floats(2, 3),
        ref=lambda a, b: torch.vstack([a, b]),
    ),
    case(
        "vstack-0d",
        lambda a, b: Tensor.vstack([a, b]),
        floats(),
        floats(1, 1),
        ref=lambda a, b: torch.vstack([a, b]),
    ),
    case(
        "vstack-empty",
        lambda a, b: Tensor.vstack([a, b]),
        floats(0, 3),
        floats(3),
        ref=lambda a, b: torch.vstack([a, b]),
    ),
    case(
        "dstack-2d",
        lambda a, b: Tensor.dstack([a, b]),
        floats(2, 3),
        floats(2, 3, 2),
        ref=lambda a, b: torch.dstack([a, b]),
    ),
    case(
        "dstack-1d",
        lambda a, b: Tensor.dstack([a, b]),
        floats(3),
        floats(3),
        ref=lambda a, b: torch.dstack([a, b]),
    ),
    case(
        "column_stack-mixed",
        lambda a, b, c: Tensor.column_stack([a, b, c]),
        floats(3),
        floats(3, 2),
        floats(3).T,
        ref=lambda a, b, c: torch.column_stack([a, b, c]),
    ),
    case(
        "column_stack-0d",
        lambda a, b: Tensor.column_stack([a, b]),
        floats(),
        floats(1),
        ref=lambda a, b: torch.column_stack([a, b]),
    ),
    case("tensor_split-sections", lambda x: x.tensor_split(3), floats(7, 2)),
    case("tensor_split-more_sections", lambda x: x.tensor_split(4), floats(2)),
    case("tensor_split-indices", lambda x: x.tensor_split([1, 5], dim=1), floats(2, 6)),
    case("tensor_split-clamped", lambda x: x.tensor_split([-2, 8, 3], dim=-1), floats(3, 5).T),
    case("tensor_split-tensor", lambda x, i: x.tensor_split(i), floats(6, 2), index_values(2, 4)),
    case("tensor_split-empty", lambda x: x.tensor_split(2, dim=1), floats(3, 0)),
    case(
        "tensordot-2",
        lambda a, b: a.tensordot(b),
        floats(3, 4, 5),
        floats(4, 5, 2),
        ref=lambda a, b: torch.tensordot(a, b),
    ),
    case(
        "tensordot-1",
        lambda a, b: a.tensordot(b, dims=1),
        floats(3, 4),
        floats(4, 2),
        ref=lambda a, b: torch.tensordot(a, b, dims=1),
    ),
    case(
        "tensordot-0",
        lambda a, b: a.tensordot(b, 0),
        floats(3),
        floats(2, 2),
        ref=lambda a, b: torch.tensordot(a, b, 0),
    ),
    case(
        "tensordot-lists",
        lambda a, b: a.tensordot(b, dims=([1, 0], [0, 1])),
        floats(3, 4, 5),
        floats(4, 3, 2),
        ref=lambda a, b: torch.tensordot(a, b, dims=([1, 0], [0, 1])),
    ),
    case(
        "tensordot-ints",
        lambda a, b: a.tensordot(b, dims=(-1, 0)),
        floats(2, 3).T,
        floats(3, 4),
        ref=lambda a, b: torch.tensordot(a, b, dims=([-1], [0])),
    ),
    case(
        "tensordot-empty",
        lambda a, b: a.tensordot(b, dims=1),
        floats(2, 0),
        floats(0, 3),
        ref=lambda a, b: torch.tensordot(a, b, dims=1),
    ),
    case("diff-default", lambda x: x.diff(), floats(3, 5)),
    case("diff-n2_dim0", lambda x: x.diff(n=2, dim=0), floats(4, 3).T),
    case(
        "diff-pend",
        lambda x, p, a: x.diff(dim=1, prepend=p, append=a),
        floats(3, 4),
        floats(3, 1),
        floats(3, 2),
    ),
    case("diff-bool", lambda x: x.diff(), mask(3, 4)),
    case("diff-int", lambda x: x.diff(n=3), ints(2, 6)),
    case("diff-too_many", lambda x: x.diff(n=5), floats(3)),
    case("diff-n0", lambda x: x.diff(n=0), floats(3)),
    case("diff-empty", lambda x: x.diff(dim=0), floats(0, 3)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(STACKING))
def test_stacking_and_splitting(c, device, request):
    check(c, device, request)
