"""Neural-network ops against torch: softmax, convolutions, pooling, resizing, normalisation,
attention, linear and embedding layers' functions, and the losses.

A new op is one line: ``case("op-variant", fusegrad's function, *inputs, ref=torch's)``.
"""

from __future__ import annotations

import pytest

from .harness import (
    DEVICES,
    Arg,
    F,
    along_axis,
    case,
    check,
    const,
    f16,
    floats,
    i32,
    index_values,
    indices,
    ints,
    mask,
    nan,
    params,
    positive,
    ties,
    torch,
    u8,
    values,
)

pytestmark = pytest.mark.filterwarnings("ignore:Using padding=.same.:UserWarning")

LOOSE = {"rtol": 1e-4, "atol": 1e-4}  # sums of many products
HALF = {"rtol": 5e-3, "atol": 5e-3}  # float16 results (torch's test_gemm_fp16 tolerance)
inf = float("inf")
#: rows of softmax's edge cases: +inf, all -inf, +-1e30, overflowing and underflowing exponents
EDGE_ROWS = (
    inf,
    1.0,
    2.0,
    -inf,
    -inf,
    -inf,
    -inf,
    -inf,
    1e30,
    -1e30,
    0.0,
    1.0,
    88.8,
    100.0,
    400.0,
    -400.0,
    -inf,
    -inf,
    5.0,
    5.0,
)

MAX_POOL_TIES = (
    "max_pool2d's gradient at tied maxima is split evenly among them (as max's); "
    "torch's goes to the first of each window"
)

SOFTMAX = [
    *along_axis("softmax", low=-5, high=5),
    *along_axis("log_softmax", low=-5, high=5),
    case(
        "softmax-minus_inf",
        lambda x: x.softmax(-1),
        values(float("-inf"), 1.0, 2.0, shape=(2, 3)),
        ref=lambda x: x.softmax(-1),
    ),
    # a row holding +inf is nan throughout (torch's too); huge values neither overflow nor lose the
    # gradient
    *(
        case(
            f"{op}-edges",
            lambda x, op=op: getattr(x, op)(-1),
            values(*EDGE_ROWS, shape=(5, 4)),
            ref=lambda x, op=op: getattr(x, op)(-1),
        )
        for op in ("softmax", "log_softmax")
    ),
]

# (id, input shape, weight shape, keyword arguments); the method by the weight's rank
CONVS = [
    ("2d", (2, 2, 5, 6), (3, 2, 3, 3), {}),
    ("2d_stride_pad", (1, 2, 6, 5), (2, 2, 3, 2), {"stride": 2, "padding": 1}),
    ("2d_dilation", (1, 3, 9, 8), (2, 3, 3, 3), {"dilation": 2, "padding": (2, 1)}),
    ("2d_groups", (2, 4, 5, 5), (4, 2, 3, 3), {"groups": 2, "stride": (1, 2)}),
    ("2d_groups_stride_pad", (2, 4, 7, 7), (4, 2, 3, 2), {"stride": 2, "padding": 1, "groups": 2}),
    ("2d_depthwise", (1, 4, 5, 5), (4, 1, 3, 3), {"groups": 4, "padding": 1}),
    ("2d_same", (1, 2, 6, 6), (2, 2, 3, 3), {"padding": "same"}),
    ("2d_same_even_dilated", (1, 2, 6, 6), (2, 2, 4, 4), {"padding": "same", "dilation": 2}),
    ("2d_valid", (1, 2, 5, 6), (2, 2, 2, 3), {"padding": "valid", "stride": (1, 2)}),
    ("2d_unbatched", (3, 5, 5), (2, 3, 3, 3), {}),
    ("2d_empty_batch", (0, 2, 5, 5), (3, 2, 3, 3), {}),
    ("1d", (2, 3, 8), (4, 3, 3), {"stride": 3, "padding": 2}),
    ("1d_dilation", (2, 3, 8), (4, 3, 3), {"stride": 2, "padding": 2, "dilation": 2}),
    ("3d", (1, 2, 4, 5, 5), (2, 2, 2, 3, 3), {"padding": 1, "stride": (1, 2, 1)}),
]
CONV_TRANSPOSES = [
    ("2d", (1, 2, 4, 4), (2, 3, 3, 3), {}),
    (
        "2d_stride",
        (2, 4, 3, 4),
        (4, 1, 3, 2),
        {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2},
    ),
    (
        "2d_dilation",
        (1, 2, 4, 4),
        (2, 2, 3, 3),
        {"stride": (2, 3), "dilation": 2, "padding": (1, 2)},
    ),
    ("2d_dilation_stride", (1, 2, 3, 3), (2, 2, 2, 3), {"stride": (2, 1), "dilation": 2}),
    ("1d", (1, 3, 5), (3, 2, 4), {"stride": 3, "padding": 1}),
    # a stride without dilation: one convolution of every phase's taps (_phased_transpose)
    (
        "2d_stride_over_kernel",
        (1, 2, 3, 4),
        (2, 3, 2, 1),
        {"stride": (3, 2), "output_padding": (2, 1)},
    ),
    ("2d_stride_mixed", (2, 3, 4, 3), (3, 2, 4, 3), {"stride": (1, 2), "padding": (2, 0)}),
    ("2d_stride_groups", (1, 4, 3, 3), (4, 2, 4, 4), {"stride": 2, "groups": 2, "padding": 3}),
    (
        "3d_stride",
        (1, 2, 3, 2, 3),
        (2, 2, 2, 3, 2),
        {"stride": 2, "padding": 1, "output_padding": (1, 0, 1)},
    ),
]
RANK = {3: "1d", 4: "2d", 5: "3d"}


def conv(name, xs, ws, kw):
    op, ref = f"conv{RANK[len(ws)]}", getattr(F, f"conv{RANK[len(ws)]}")
    return case(
        f"{op}-{name}",
        lambda x, w, b: getattr(x, op)(w, b, **kw),
        floats(*xs),
        floats(*ws),
        floats(ws[0]),
        ref=lambda x, w, b: ref(x, w, b, **kw),
    )


def conv_transpose(name, xs, ws, kw):
    op = f"conv_transpose{RANK[len(ws)]}"
    ref, bias = getattr(F, op), ws[1] * kw.get("groups", 1)
    return case(
        f"{op}-{name}",
        lambda x, w, b: getattr(x, op)(w, b, **kw),
        floats(*xs),
        floats(*ws),
        floats(bias),
        ref=lambda x, w, b: ref(x, w, b, **kw),
    )


CONV = [
    *(conv(*c) for c in CONVS),
    *(conv_transpose(*c) for c in CONV_TRANSPOSES),
    case(
        "conv2d-no_bias_T",
        lambda x, w: x.transpose(2, 3).conv2d(w, padding=1),
        floats(1, 2, 5, 4),
        floats(2, 2, 3, 3),
        ref=lambda x, w: F.conv2d(x.transpose(2, 3), w, padding=1),
    ),
    case(
        "conv2d-of_1d",
        lambda x, w: x.conv2d(w, stride=3, padding=2),
        floats(2, 3, 8),
        floats(4, 3, 3),
        ref=lambda x, w: F.conv1d(x, w, stride=3, padding=2),
    ),
    case(
        "conv2d-of_3d",
        lambda x, w: x.conv2d(w, padding=1),
        floats(1, 2, 3, 4, 4),
        floats(2, 2, 2, 3, 2),
        ref=lambda x, w: F.conv3d(x, w, padding=1),
    ),
    case(
        "conv_transpose2d-of_1d",
        lambda x, w: x.conv_transpose2d(w, stride=2),
        floats(1, 3, 5),
        floats(3, 2, 4),
        ref=lambda x, w: F.conv_transpose1d(x, w, stride=2),
    ),
    # padding as 2n ints, F.pad's order (the last axis first); negative padding crops
    *(
        case(
            f"conv2d-flat_pad_{i}",
            lambda x, w, b, p=p: x.conv2d(w, b, padding=p),
            floats(1, 2, 5, 6),
            floats(3, 2, 2, 3),
            floats(3),
            ref=lambda x, w, b, p=p: F.conv2d(F.pad(x, p), w, b),
        )
        for i, p in enumerate(
            [(0, 1, 0, 1), (2, 1, 2, 1), (2, 0, 2, 1), (-1, 0, -1, 0), (1, -1, 0, 2)]
        )
    ),
    case(
        "conv2d-negative_pad",
        lambda x, w: x.conv2d(w, padding=-1),
        floats(1, 2, 7, 6),
        floats(2, 2, 3, 3),
        ref=lambda x, w: F.conv2d(x[:, :, 1:-1, 1:-1], w),
    ),
    case(
        "conv1d-flat_pad",
        lambda x, w: x.conv1d(w, padding=(2, 0), stride=2),
        floats(2, 3, 8),
        floats(4, 3, 3),
        ref=lambda x, w: F.conv1d(F.pad(x, (2, 0)), w, stride=2),
    ),
    case(
        "conv3d-flat_pad",
        lambda x, w: x.conv3d(w, padding=[1] * 6),
        floats(1, 2, 4, 5, 5),
        floats(2, 2, 3, 3, 3),
        ref=lambda x, w: F.conv3d(x, w, padding=1),
    ),
    case(
        "conv_transpose2d-flat_pad",
        lambda x, w: x.conv_transpose2d(w, stride=2, padding=(1, 0, 2, 1)),
        floats(1, 2, 4, 5),
        floats(2, 3, 3, 3),
        ref=lambda x, w: F.conv_transpose2d(x, w, stride=2)[:, :, 2:-1, 1:],
    ),
]


def unpool(kw, output_size, lib=None, dims=2):
    """max_unpool (of ``lib``, torch.nn.functional, or fusegrad's methods) of max_pool's values
    and indices, the same ``kw`` for both."""
    if lib is None:
        pool, unpool = (f"max_pool{dims}d", f"max_unpool{dims}d")
        return lambda x: getattr(x.__class__, unpool)(
            *getattr(x, pool)(**kw, return_indices=True), **kw, output_size=output_size
        )
    pool, unpool = getattr(lib, f"max_pool{dims}d"), getattr(lib, f"max_unpool{dims}d")
    return lambda x: unpool(*pool(x, **kw, return_indices=True), **kw, output_size=output_size)


POOLS = [  # keyword arguments, the same for fusegrad and torch
    ("2", {"kernel_size": 2}),
    ("3_1_1", {"kernel_size": 3, "stride": 1, "padding": 1}),
    ("rect", {"kernel_size": (3, 2), "stride": (2, 1)}),
    ("ceil", {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    ("ceil_pad", {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    ("ceil_stride3", {"kernel_size": 2, "stride": 3, "ceil_mode": True}),
]

POOL = [
    *(
        case(
            f"max_pool2d-{n}",
            lambda x, kw=kw: x.max_pool2d(**kw),
            floats(2, 2, 7, 6),
            ref=lambda x, kw=kw: F.max_pool2d(x, **kw),
        )
        for n, kw in POOLS
    ),
    *(
        case(
            f"avg_pool2d-{n}",
            lambda x, kw=kw: x.avg_pool2d(**kw),
            floats(2, 2, 7, 6),
            ref=lambda x, kw=kw: F.avg_pool2d(x, **kw),
        )
        for n, kw in POOLS
    ),
    case(
        "avg_pool2d-exclude_pad",
        lambda x: x.avg_pool2d(3, 2, 1, count_include_pad=False),
        floats(1, 2, 5, 6),
        ref=lambda x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    ),
    case(
        "avg_pool2d-ceil_exclude_pad",
        lambda x: x.avg_pool2d(3, 2, 1, True, count_include_pad=False),
        floats(2, 2, 7, 6),
        ref=lambda x: F.avg_pool2d(x, 3, 2, 1, True, count_include_pad=False),
    ),
    case(
        "max_pool2d-ties",
        lambda x: x.max_pool2d(2),
        floats(1, 2, 4, 6, low=1, high=1),
        ref=lambda x: F.max_pool2d(x, 2),
        xfail=MAX_POOL_TIES,
    ),
    case(
        "max_pool2d-dilation_int",
        lambda x: x.max_pool2d(3, 2, 1, dilation=2),
        floats(1, 1, 9, 9, dtype=i32),
        ref=lambda x: F.max_pool2d(x.float(), 3, 2, 1, dilation=2).int(),
    ),
    case(
        "max_pool2d-T",
        lambda x: x.max_pool2d(2),
        floats(2, 2, 6, 4).T,
        ref=lambda x: F.max_pool2d(x, 2),
    ),
    case(
        "max_pool2d-empty_batch",
        lambda x: x.max_pool2d(2),
        floats(0, 2, 4, 4),
        ref=lambda x: F.max_pool2d(x, 2),
    ),
    *(
        case(
            f"adaptive_avg_pool2d-{n}",
            lambda x, s=s: x.adaptive_avg_pool2d(s),
            floats(2, 3, 7, 5),
            ref=lambda x, s=s: F.adaptive_avg_pool2d(x, s),
        )
        for n, s in (("1x1", (1, 1)), ("3x2", (3, 2)), ("5x4", (5, 4)), ("int", 2))
    ),
    # asymmetric padding, F.pad's order; the 1d and 3d names
    *(
        case(
            f"max_pool2d-flat_pad_{i}",
            lambda x, p=p: x.max_pool2d(5, padding=p),
            floats(2, 2, 11, 8),
            ref=lambda x, p=p: F.max_pool2d(F.pad(x, p, value=-inf), 5),
        )
        for i, p in enumerate([(0, 1, 0, 1), (2, 1, 2, 1), (2, 0, 2, 1)])
    ),
    case(
        "avg_pool2d-flat_pad",
        lambda x: x.avg_pool2d(3, 2, padding=(1, 0, 0, 1)),
        floats(2, 2, 7, 6),
        ref=lambda x: F.avg_pool2d(F.pad(x, (1, 0, 0, 1)), 3, 2),
    ),
    case(
        "max_pool1d-pad",
        lambda x: x.max_pool1d(3, 2, 1),
        floats(2, 3, 9),
        ref=lambda x: F.max_pool1d(x, 3, 2, 1),
    ),
    case(
        "avg_pool1d-ceil",
        lambda x: x.avg_pool1d(3, 2, 1, True),
        floats(2, 3, 8),
        ref=lambda x: F.avg_pool1d(x, 3, 2, 1, True),
    ),
    case(
        "max_pool3d-stride",
        lambda x: x.max_pool3d(2, (1, 2, 2)),
        floats(1, 2, 4, 6, 5),
        ref=lambda x: F.max_pool3d(x, 2, (1, 2, 2)),
    ),
    case(
        "avg_pool3d-exclude_pad",
        lambda x: x.avg_pool3d(3, 2, 1, count_include_pad=False),
        floats(1, 2, 7, 6, 7),
        ref=lambda x: F.avg_pool3d(x, 3, 2, 1, count_include_pad=False),
    ),
    # the position of each maximum in its plane (torch's int64, our int32), and back
    *(
        case(
            f"max_pool2d-indices_{n}",
            lambda x, kw=kw: x.max_pool2d(**kw, return_indices=True),
            floats(2, 2, 10, 9),
            ref=lambda x, kw=kw: F.max_pool2d(x, **kw, return_indices=True),
        )
        for n, kw in [
            *POOLS,
            ("dilation", {"kernel_size": (3, 2), "dilation": (2, 3)}),
            ("overlap", {"kernel_size": 3, "stride": 1}),
        ]
    ),
    case(
        "max_pool2d-indices_ties",
        lambda x: x.max_pool2d(3, 1, return_indices=True)[1],
        values(1.0, 2.0, shape=(1, 1, 6, 6)),
        ref=lambda x: F.max_pool2d(x, 3, 1, return_indices=True)[1],
    ),
    case(
        "max_pool2d-indices_pad_minus_inf",
        lambda x: x.max_pool2d(2, padding=1, return_indices=True)[1],
        values(-inf, shape=(1, 1, 2, 4)),
        ref=lambda x: F.max_pool2d(x, 2, padding=1, return_indices=True)[1],
    ),
    case(
        "max_pool2d-indices_nan",
        lambda x: x.max_pool2d(2, return_indices=True),
        values(1.0, nan, 3.0, nan, 5.0, 6.0, 7.0, 8.0, shape=(1, 1, 2, 4)),
        ref=lambda x: F.max_pool2d(x, 2, return_indices=True),
        grad=False,
    ),
    *(
        case(f"max_unpool2d-{n}", unpool(kw, size), floats(2, 3, 9, 8), ref=unpool(kw, size, F))
        for n, kw, size in [
            ("2", {"kernel_size": 2}, None),
            ("stride_pad", {"kernel_size": 3, "stride": (3, 2), "padding": 1}, (9, 8)),
            ("size", {"kernel_size": 2}, (7, 5, 9, 9)),
            ("overlap", {"kernel_size": 3, "stride": 1}, None),
        ]
    ),
    case(
        "max_unpool1d-2",
        unpool({"kernel_size": 2}, None, dims=1),
        floats(2, 3, 9),
        ref=unpool({"kernel_size": 2}, None, F, dims=1),
    ),
    case(
        "max_unpool2d-inf",
        unpool({"kernel_size": 2}, None),
        values(inf, -inf, nan, 1.0, 2.0, 3.0, shape=(1, 1, 2, 3)),
        ref=unpool({"kernel_size": 2}, None, F),
        grad=False,
    ),
]

INTERPOLATIONS = [
    ("nearest_size", {"size": (5, 7), "mode": "nearest"}),
    ("nearest_scale", {"scale_factor": 2, "mode": "nearest"}),
    ("nearest_exact", {"size": (3, 2), "mode": "nearest-exact"}),
    ("bilinear", {"size": (5, 7), "mode": "bilinear", "align_corners": False}),
    ("bilinear_corners", {"size": (5, 7), "mode": "bilinear", "align_corners": True}),
    ("bilinear_down", {"size": (2, 3), "mode": "bilinear", "align_corners": False}),
    ("bilinear_scale", {"scale_factor": 1.5, "mode": "bilinear", "align_corners": False}),
    ("bicubic", {"size": (7, 11), "mode": "bicubic", "align_corners": False}),
    ("bicubic_corners", {"size": (5, 3), "mode": "bicubic", "align_corners": True}),
    ("bicubic_down", {"scale_factor": 0.5, "mode": "bicubic"}),
]

RESIZE = [
    *(
        case(
            f"interpolate-{n}",
            lambda x, kw=kw: x.interpolate(**kw),
            floats(1, 2, 4, 5),
            ref=lambda x, kw=kw: F.interpolate(x, **kw),
        )
        for n, kw in INTERPOLATIONS
    ),
    # an image stays uint8, rounded as torch's fixed-point resampling (both passes, at every size)
    *(
        case(
            f"interpolate-uint8_{n}",
            lambda x, kw=kw: x.interpolate(**kw),
            ints(2, 3, 9, 13, low=0, high=255, dtype=u8),
            ref=lambda x, kw=kw: F.interpolate(x, **kw),
        )
        for n, kw in INTERPOLATIONS
    ),
    case(
        "interpolate-uint8_down",
        lambda x: x.interpolate(size=(10, 10), mode="bilinear"),
        ints(1, 3, 64, 64, low=0, high=255, dtype=u8),
        ref=lambda x: F.interpolate(x, size=(10, 10), mode="bilinear"),
    ),
    *(
        case(
            f"interpolate-area_{n}",
            lambda x, kw=kw: x.interpolate(mode="area", **kw),
            floats(2, 3, 9, 13),
            ref=lambda x, kw=kw: F.interpolate(x, mode="area", **kw),
        )
        for n, kw in [("size", {"size": (4, 5)}), ("scale", {"scale_factor": 0.5})]
    ),
    # axes longer than GATHERED_TAPS times the taps: each tap a gather, the gradient a matmul
    *(
        case(
            f"interpolate-gathered_{n}",
            lambda x, kw=kw: x.interpolate(**kw),
            floats(1, 2, 20, 40),
            ref=lambda x, kw=kw: F.interpolate(x, **kw),
        )
        for n, kw in [
            ("bilinear", {"size": (30, 70), "mode": "bilinear"}),
            ("bilinear_corners", {"size": (9, 61), "mode": "bilinear", "align_corners": True}),
            ("bicubic", {"scale_factor": 1.5, "mode": "bicubic"}),
            ("bicubic_down", {"size": (7, 13), "mode": "bicubic", "align_corners": True}),
        ]
    ),
    case(
        "interpolate-linear_1d",
        lambda x: x.interpolate(size=8, mode="linear"),
        floats(2, 3, 5),
        ref=lambda x: F.interpolate(x, size=8, mode="linear"),
    ),
]


def batchnorm_ours(x, w, b):
    """Training-mode batch norm: the statistics are the batch's, so gradients flow into them."""
    mean, var = x.mean((0, 2, 3)), x.var((0, 2, 3), correction=0)
    return x.batchnorm(w, b, mean, (var + 1e-5).rsqrt())


def batchnorm_torch(x, w, b, mean, var):
    """F.batch_norm gives running statistics no gradient; the formula does."""
    w, b, mean, var = (t.reshape(1, -1, 1, 1) for t in (w, b, mean, var))
    return (x - mean) * w / (var + 1e-5).sqrt() + b


def sdpa(*masked):
    return lambda q, k, v, *m: q.scaled_dot_product_attention(k, v, *m)


NORM = [
    case(
        "batchnorm-inference",
        lambda x, w, b, m, v: x.batchnorm(w, b, m, (v + 1e-5).rsqrt()),
        floats(2, 3, 4, 4),
        floats(3),
        floats(3),
        floats(3),
        positive(3),
        ref=batchnorm_torch,
        tol=LOOSE,
    ),
    case(
        "batchnorm-no_affine",
        lambda x, m, v: x.batchnorm(None, None, m, (v + 1e-5).rsqrt()),
        floats(2, 3, 2, 2),
        const(3),
        const(3, low=0.5, high=2),
        ref=lambda x, m, v: F.batch_norm(x, m, v, eps=1e-5),
        tol=LOOSE,
    ),
    case(
        "batchnorm-training",
        batchnorm_ours,
        floats(2, 3, 3, 2),
        floats(3),
        floats(3),
        ref=lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        tol=LOOSE,
    ),
    case(
        "layernorm-last", lambda x: x.layernorm(), floats(3, 5), ref=lambda x: F.layer_norm(x, (5,))
    ),
    case(
        "layernorm-2axes_T",
        lambda x: x.layernorm((-2, -1), eps=1e-3),
        floats(2, 3, 4).T,
        ref=lambda x: F.layer_norm(x, (3, 4), eps=1e-3),
        tol=LOOSE,
    ),
    case(
        "layernorm-T",
        lambda x: x.layernorm(),
        floats(6, 4, 3).T,
        ref=lambda x: F.layer_norm(x, (3,)),
    ),
    case(
        "scaled_dot_product_attention-plain",
        sdpa(),
        floats(2, 2, 3, 4),
        floats(2, 2, 5, 4),
        floats(2, 2, 5, 3),
        ref=F.scaled_dot_product_attention,
        tol=LOOSE,
    ),
    case(
        "scaled_dot_product_attention-bool_mask",
        sdpa(),
        floats(1, 2, 3, 4),
        floats(1, 2, 5, 4),
        floats(1, 2, 5, 3),
        mask(3, 5),
        ref=F.scaled_dot_product_attention,
        tol=LOOSE,
    ),
    case(
        "scaled_dot_product_attention-float_mask",
        sdpa(),
        floats(1, 2, 3, 4),
        floats(1, 2, 5, 4),
        floats(1, 2, 5, 3),
        floats(1, 3, 5),
        ref=F.scaled_dot_product_attention,
        tol=LOOSE,
    ),
    case(
        "scaled_dot_product_attention-causal",
        lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
        floats(2, 4, 4),
        floats(2, 4, 4),
        floats(2, 4, 3),
        ref=lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        tol=LOOSE,
    ),
    # is_causal with more keys or more queries (aligned top-left, as torch); grouped heads
    *(
        case(
            f"scaled_dot_product_attention-causal_{n}",
            lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=True),
            floats(1, 2, lq, 4),
            floats(1, 2, lk, 4),
            floats(1, 2, lk, 3),
            ref=lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            tol=LOOSE,
        )
        for n, lq, lk in (("wide", 3, 5), ("tall", 5, 3))
    ),
    case(
        "scaled_dot_product_attention-gqa",
        lambda q, k, v: q.scaled_dot_product_attention(k, v, enable_gqa=True),
        floats(2, 6, 3, 4),
        floats(2, 2, 5, 4),
        floats(2, 3, 5, 3),
        tol=LOOSE,
        ref=lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
    ),
    case(
        "scaled_dot_product_attention-mask_bcast",
        sdpa(),
        floats(2, 2, 3, 4),
        floats(2, 2, 5, 4),
        floats(2, 2, 5, 3),
        mask(2, 1, 1, 5),
        ref=F.scaled_dot_product_attention,
        tol=LOOSE,
    ),
    # half inputs: the gradient's sums too accumulate in float32 (within torch's half tolerance)
    case(
        "matmul-f16",
        lambda x, w, s: x.half().matmul(w.half()) * s,
        floats(64, 32),
        floats(32, 64),
        floats(64, dtype=f16),
        ref=lambda x, w, s: x.half() @ w.half() * s,
        tol=HALF,
    ),
    case(
        "linear-bias",
        lambda x, w, b: x.linear(w, b),
        floats(2, 3, 4),
        floats(4, 5),
        floats(5),
        ref=lambda x, w, b: F.linear(x, w.T, b),
    ),
    case(
        "linear-no_bias",
        lambda x, w: x.linear(w),
        floats(3, 4),
        floats(4, 2),
        ref=lambda x, w: F.linear(x, w.T),
    ),
    case(
        "embedding-2d", lambda i, w: i.embedding(w), indices(6, 2, 3), floats(7, 4), ref=F.embedding
    ),
    case("embedding-0d", lambda i, w: i.embedding(w), indices(6), floats(6, 3), ref=F.embedding),
]

LOSSES = [
    *(
        case(
            f"cross_entropy-{r}{'_smoothing' if s else ''}",
            lambda x, y, r=r, s=s: x.cross_entropy(y, r, s),
            floats(5, 4),
            values(0, -100, 3, 1, 2, dtype=i32),
            ref=lambda x, y, r=r, s=s: F.cross_entropy(x, y.long(), reduction=r, label_smoothing=s),
        )
        for r in ("mean", "sum", "none")
        for s in (0.0, 0.2)
    ),
    case(
        "cross_entropy-spatial_sum",
        lambda x, y: x.cross_entropy(y, reduction="sum"),
        floats(2, 3, 2, 2),
        indices(3, 2, 2, 2),
        ref=lambda x, y: F.cross_entropy(x, y, reduction="sum"),
    ),
    case(
        "cross_entropy-probs",
        lambda x, p: x.cross_entropy(p.softmax(1)),
        floats(3, 4, 2),
        floats(3, 4, 2),
        ref=lambda x, p: F.cross_entropy(x, p.softmax(1)),
    ),
    case(
        "cross_entropy-probs_smoothing",
        lambda x, p: x.cross_entropy(p.softmax(1), label_smoothing=0.2),
        floats(4, 5),
        floats(4, 5),
        ref=lambda x, p: F.cross_entropy(x, p.softmax(1), label_smoothing=0.2),
    ),
    case(
        "cross_entropy-weight",
        lambda x, y, w: x.cross_entropy(y, weight=w),
        floats(6, 4),
        indices(4, 6),
        const(4, low=0.1, high=2),
        ref=lambda x, y, w: F.cross_entropy(x, y, weight=w),
    ),
    case(
        "cross_entropy-weight_ignore",
        lambda x, y, w: x.cross_entropy(y, weight=w, ignore_index=1, label_smoothing=0.1),
        floats(6, 4),
        indices(4, 6),
        const(4, low=0.5, high=2),
        ref=lambda x, y, w: F.cross_entropy(x, y, w, ignore_index=1, label_smoothing=0.1),
    ),
    case(
        "nll_loss-weight",
        lambda x, y, w: x.log_softmax(1).nll_loss(y, w),
        floats(6, 4),
        indices(4, 6),
        const(4, low=0.1, high=2),
        ref=lambda x, y, w: F.nll_loss(x.log_softmax(1), y, w),
    ),
    case(
        "nll_loss-sum",
        lambda x, y: x.nll_loss(y, reduction="sum"),
        floats(6, 4),
        indices(4, 6),
        ref=lambda x, y: F.nll_loss(x, y, reduction="sum"),
    ),
    case(
        "nll_loss-weight_ignore",
        lambda x, y, w: x.nll_loss(y, w, ignore_index=2),
        floats(5, 3),
        indices(3, 5),
        const(3, low=0.5, high=2),
        ref=lambda x, y, w: F.nll_loss(x, y, w, ignore_index=2),
    ),
    *(
        case(
            f"nll_loss-{r}",
            lambda x, y, r=r: x.nll_loss(y, reduction=r),
            floats(6, 4),
            values(0, -100, 3, 1, 2, 2, dtype=i32),
            ref=lambda x, y, r=r: F.nll_loss(x, y.long(), reduction=r),
        )
        for r in ("mean", "none")
    ),
    case(
        "nll_loss-spatial_weight_ignore",
        lambda x, y, w: x.nll_loss(y, w, ignore_index=1, reduction="none"),
        floats(2, 3, 2, 2),
        indices(3, 2, 2, 2),
        const(3, low=0.5, high=2),
        ref=lambda x, y, w: F.nll_loss(x, y, w, ignore_index=1, reduction="none"),
    ),
    case(
        "cross_entropy-unbatched",
        lambda x, y: x.cross_entropy(y, label_smoothing=0.1),
        floats(5),
        indices(5),
        ref=lambda x, y: F.cross_entropy(x, y, label_smoothing=0.1),
    ),
    case(
        "cross_entropy-probs_unbatched",
        lambda x, p: x.cross_entropy(p.softmax(0)),
        floats(5),
        floats(5),
        ref=lambda x, p: F.cross_entropy(x, p.softmax(0)),
    ),
    case(
        "cross_entropy-probs_weight",
        lambda x, p, w: x.cross_entropy(p.softmax(1), "sum", 0.1, weight=w),
        floats(4, 5),
        floats(4, 5),
        const(5, low=0.5, high=2),
        ref=lambda x, p, w: F.cross_entropy(
            x, p.softmax(1), w, reduction="sum", label_smoothing=0.1
        ),
    ),
    case(
        "sparse_categorical_crossentropy-plain",
        lambda x, y: x.sparse_categorical_crossentropy(y),
        floats(2, 3, 5),
        indices(5, 2, 3),
        ref=lambda x, y: F.cross_entropy(x.permute(0, 2, 1), y),
    ),
    *(
        case(
            f"sparse_categorical_crossentropy-ignore{'_smoothing' if s else ''}",
            lambda x, y, s=s: x.sparse_categorical_crossentropy(y, label_smoothing=s),
            floats(2, 3, 5),
            values(0, -1, 4, 2, 3, 1, dtype=i32, shape=(2, 3)),
            ref=lambda x, y, s=s: F.cross_entropy(
                x.reshape(6, 5), y.long().reshape(6), ignore_index=-1, label_smoothing=s
            ),
        )
        for s in (0.0, 0.3)
    ),
    *(
        case(
            f"binary_crossentropy-{r}",
            lambda p, y, r=r: p.binary_crossentropy(y, r),
            floats(4, 3, low=0.05, high=0.95),
            const(4, 3),
            ref=lambda p, y, r=r: F.binary_cross_entropy(p, y, reduction=r),
        )
        for r in ("mean", "sum", "none")
    ),
    case(
        "binary_crossentropy-clamps_log",
        lambda p, y: p.binary_crossentropy(y, "none"),
        values(0.0, 1.0),
        values(1.0, 0.0),
        ref=lambda p, y: F.binary_cross_entropy(p, y, reduction="none"),
        grad=False,
    ),
    *(
        case(
            f"binary_crossentropy_logits-{r}",
            lambda x, y, r=r: x.binary_crossentropy_logits(y, r),
            floats(4, 3, low=-4, high=4),
            floats(4, 3, low=0, high=1),
            ref=lambda x, y, r=r: F.binary_cross_entropy_with_logits(x, y, reduction=r),
        )
        for r in ("mean", "sum", "none")
    ),
    case(
        "binary_crossentropy_logits-pos_weight",
        lambda x, y, w: x.binary_crossentropy_logits(y, "sum", w),
        floats(3, 4),
        const(3, 4),
        const(4, low=0.5, high=2),
        ref=lambda x, y, w: F.binary_cross_entropy_with_logits(x, y, reduction="sum", pos_weight=w),
    ),
    case(
        "binary_crossentropy_logits-kinks",
        lambda x, y: x.binary_crossentropy_logits(y),
        values(-6, -3, -1, -0.5, 0, 0.5, 1, 2, 3, 6),
        const(10),
        ref=F.binary_cross_entropy_with_logits,
    ),
    case(
        "binary_cross_entropy_with_logits-pos_weight",
        lambda x, y, w: x.binary_cross_entropy_with_logits(y, "mean", pos_weight=w),
        floats(4, 3, low=-4, high=4),
        floats(4, 3, low=0, high=1),
        const(3, low=0.5, high=3),
        ref=lambda x, y, w: F.binary_cross_entropy_with_logits(x, y, pos_weight=w),
    ),
    case(
        "binary_cross_entropy-mean",
        lambda p, y: p.binary_cross_entropy(y),
        floats(4, 3, low=0.05, high=0.95),
        const(4, 3),
        ref=F.binary_cross_entropy,
    ),
    *(
        case(
            f"mse_loss-{r}",
            lambda x, y, r=r: x.mse_loss(y, r),
            floats(4, 3),
            floats(4, 3),
            ref=lambda x, y, r=r: F.mse_loss(x, y, reduction=r),
        )
        for r in ("mean", "sum", "none")
    ),
    case(
        "mse_loss-bcast",
        lambda x, y: x.mse_loss(y, "sum"),
        floats(3, 4),
        floats(4),
        ref=lambda x, y: F.mse_loss(x, y.expand(3, 4), reduction="sum"),
    ),
    *(
        case(
            f"l1_loss-{r}",
            lambda x, y, r=r: x.l1_loss(y, r),
            floats(4, 3),
            floats(4, 3),
            ref=lambda x, y, r=r: F.l1_loss(x, y, reduction=r),
        )
        for r in ("mean", "sum", "none")
    ),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(SOFTMAX))
def test_softmax(c, device, request):
    check(c, device, request)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(CONV + POOL + RESIZE))
def test_conv_pool_resize(c, device, request):
    check(c, device, request)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(NORM))
def test_normalise_attend_embed(c, device, request):
    check(c, device, request)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(LOSSES))
def test_loss(c, device, request):
    check(c, device, request)


#: tensor/functional.py: the further losses and layers of torch.nn.functional
FUNCTIONAL = [
    # matrix products with torch's names and shape rules (tensor/aliases.py)
    case("mm-2d", lambda a, b: a.mm(b), floats(3, 4), floats(4, 5).T),
    case("mm-int", lambda a, b: a.mm(b), ints(3, 4), ints(4, 2)),
    case("bmm-3d", lambda a, b: a.bmm(b), floats(2, 3, 4), floats(2, 4, 5)),
    case("outer-vectors", lambda a, b: a.outer(b), floats(3), floats(4)),
    case("inner-nd", lambda a, b: a.inner(b), floats(2, 3, 4), floats(5, 4)),
    case("inner-vectors", lambda a, b: a.inner(b), floats(4), floats(4)),
    case("inner-0d", lambda a, b: a.inner(b), floats(), floats(2, 3)),
    case("addmm-default", lambda c, a, b: c.addmm(a, b), floats(3, 5), floats(3, 4), floats(4, 5)),
    case(
        "addmm-scaled_bcast",
        lambda c, a, b: c.addmm(a, b, beta=0.5, alpha=-2),
        floats(5),
        floats(3, 4),
        floats(4, 5),
    ),
    case(
        "addmm-beta0_nan",
        lambda c, a, b: c.addmm(a, b, beta=0),
        values(nan, shape=(3, 5)),
        floats(3, 4),
        floats(4, 5),
    ),
    case(
        "addmv-scaled",
        lambda c, a, b: c.addmv(a, b, beta=2, alpha=0.5),
        floats(3),
        floats(3, 4),
        floats(4),
    ),
    case(
        "baddbmm-scaled",
        lambda c, a, b: c.baddbmm(a, b, beta=0.5, alpha=2),
        floats(3, 5),
        floats(2, 3, 4),
        floats(2, 4, 5),
    ),
    case("kron-2d", lambda a, b: a.kron(b), floats(2, 3), floats(3, 2)),
    case("kron-mixed_ndim", lambda a, b: a.kron(b), floats(3), floats(2, 2, 2)),
    case(
        "cross-last",
        lambda a, b: a.cross(b),
        floats(4, 3),
        floats(4, 3),
        ref=lambda a, b: torch.linalg.cross(a, b),
    ),
    case(
        "cross-dim0_bcast",
        lambda a, b: a.cross(b, dim=0),
        floats(3, 4),
        floats(3, 1),
        ref=lambda a, b: torch.linalg.cross(a, b, dim=0),
    ),
    *(
        case(
            f"smooth_l1_loss-{r}_{b}",
            lambda x, y, r=r, b=b: x.smooth_l1_loss(y, r, b),
            floats(4, 3),
            floats(4, 3),
            ref=lambda x, y, r=r, b=b: F.smooth_l1_loss(x, y, reduction=r, beta=b),
        )
        for r, b in (("mean", 1.0), ("sum", 0.5), ("none", 2.0), ("mean", 0.0))
    ),
    *(
        case(
            f"huber_loss-{r}_{d}",
            lambda x, y, r=r, d=d: x.huber_loss(y, r, d),
            floats(4, 3),
            floats(4, 3),
            ref=lambda x, y, r=r, d=d: F.huber_loss(x, y, reduction=r, delta=d),
        )
        for r, d in (("mean", 1.0), ("sum", 0.5), ("none", 2.0))
    ),
    *(
        case(
            f"kl_div-{r}",
            lambda x, y, r=r: x.kl_div(y, r),
            floats(4, 3, low=-3, high=-0.1),
            const(4, 3, low=0.0, high=1.0),
            ref=lambda x, y, r=r: F.kl_div(x, y, reduction=r),
        )
        for r in ("mean", "sum", "none", "batchmean")
    ),
    case(
        "kl_div-zero_target",
        lambda x, y: x.kl_div(y, "sum"),
        floats(2, 3),
        Arg((2, 3), kind="values", values=(0.0, 0.5, 0.0, 1.0, 0.25, 0.0), grad=False),
        ref=lambda x, y: F.kl_div(x, y, reduction="sum"),
    ),
    case(
        "kl_div-log_target",
        lambda x, y: x.kl_div(y, "mean", log_target=True),
        floats(4, 3),
        const(4, 3, low=-3, high=0),
        ref=lambda x, y: F.kl_div(x, y, reduction="mean", log_target=True),
    ),
    case(
        "cosine_similarity-dim1",
        lambda a, b: a.cosine_similarity(b),
        floats(4, 5),
        floats(4, 5),
        ref=F.cosine_similarity,
    ),
    case(
        "cosine_similarity-bcast",
        lambda a, b: a.cosine_similarity(b, dim=-1),
        floats(2, 3, 4),
        floats(3, 4),
        ref=lambda a, b: F.cosine_similarity(a, b, dim=-1),
    ),
    case("glu-last", lambda x: x.glu(), floats(3, 6), ref=F.glu),
    case("glu-dim0", lambda x: x.glu(0), floats(4, 3), ref=lambda x: F.glu(x, 0)),
    case("instance_norm-2d", lambda x: x.instance_norm(), floats(2, 3, 4, 5), ref=F.instance_norm),
    case(
        "instance_norm-affine",
        lambda x, w, b: x.instance_norm(w, b),
        floats(2, 3, 6),
        floats(3),
        floats(3),
        ref=lambda x, w, b: F.instance_norm(x, weight=w, bias=b),
    ),
    case(
        "pixel_shuffle-2",
        lambda x: x.pixel_shuffle(2),
        floats(2, 8, 3, 4),
        ref=lambda x: F.pixel_shuffle(x, 2),
    ),
    case(
        "pixel_shuffle-3d",
        lambda x: x.pixel_shuffle(3),
        floats(9, 2, 2),
        ref=lambda x: F.pixel_shuffle(x, 3),
    ),
    *(
        case(
            f"norm-p{p}",
            lambda x, p=p: x.norm(p),
            floats(3, 4),
            ref=lambda x, p=p: torch.norm(x, p),
        )
        for p in (2, 1, 3, "fro")
    ),
    case(
        "norm-inf_dim",
        lambda x: x.norm(float("inf"), 1, True),
        floats(3, 5),
        ref=lambda x: torch.linalg.vector_norm(x, float("inf"), 1, True),
    ),
    case(
        "norm-0",
        lambda x: x.norm(0, 0),
        values(0.0, 1.0, -2.0, 0.0, 3.0, 0.0, shape=(3, 2)),
        ref=lambda x: torch.linalg.vector_norm(x, 0, 0),
        grad=False,
    ),
    case("unbind-0", lambda x: x.unbind(), floats(3, 4), ref=torch.unbind),
    case("unbind-last", lambda x: x.unbind(-1), floats(2, 3), ref=lambda x: torch.unbind(x, -1)),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(FUNCTIONAL))
def test_functional(c, device, request):
    check(c, device, request)


#: tensor/functional.py and tensor/sampling.py: activations, distances, losses, pooling to a size,
#: fold, grids and CTC (issue 16)
FUNCTIONAL_MORE = [
    case("prelu-channels", lambda x, w: x.prelu(w), floats(2, 3, 4), floats(3), ref=F.prelu),
    case("prelu-one", lambda x, w: x.prelu(w), floats(2, 5), floats(1), ref=F.prelu),
    case("prelu-1d", lambda x, w: x.prelu(w), floats(4), floats(1), ref=F.prelu),
    case("prelu-empty", lambda x, w: x.prelu(w), floats(0, 3), floats(3), ref=F.prelu),
    case(
        "prelu-kinks",
        lambda x, w: x.prelu(w),
        values(-1.0, 0.0, 1.0, 0.0, shape=(2, 2)),
        floats(2),
        ref=F.prelu,
    ),
    case(
        "threshold-2d",
        lambda x: x.threshold(0.5, -2.0),
        floats(3, 4),
        ref=lambda x: F.threshold(x, 0.5, -2.0),
    ),
    case(
        "threshold-kinks",
        lambda x: x.threshold(0.0, 1.0),
        values(-1.0, 0.0, 0.5, 2.0),
        ref=lambda x: F.threshold(x, 0.0, 1.0),
    ),
    case(
        "threshold-empty",
        lambda x: x.threshold(0.0, 1.0),
        floats(0, 2),
        ref=lambda x: F.threshold(x, 0.0, 1.0),
    ),
    case("softshrink-default", lambda x: x.softshrink(), floats(3, 4), ref=F.softshrink),
    case(
        "softshrink-kinks",
        lambda x: x.softshrink(1.0),
        values(-2.0, -1.0, 0.0, 0.5, 1.0, 3.0),
        ref=lambda x: F.softshrink(x, 1.0),
    ),
    case(
        "softshrink-0d", lambda x: x.softshrink(0.0), floats(), ref=lambda x: F.softshrink(x, 0.0)
    ),
    case("logit-plain", lambda x: x.logit(), floats(3, 4, low=0.05, high=0.95), ref=torch.logit),
    case(
        "logit-eps",
        lambda x: x.logit(0.2),
        floats(3, 4, low=0.0, high=1.0),
        ref=lambda x: torch.logit(x, 0.2),
    ),
    case(
        "logit-edges", lambda x: x.logit(), values(0.0, 1.0, 0.5, 2.0), ref=torch.logit, grad=False
    ),
    case(
        "logit-size1",
        lambda x: x.logit(1e-6),
        floats(1, 1, low=0.1, high=0.9),
        ref=lambda x: torch.logit(x, 1e-6),
    ),
    case(
        "pixel_unshuffle-2",
        lambda x: x.pixel_unshuffle(2),
        floats(2, 2, 4, 6),
        ref=lambda x: F.pixel_unshuffle(x, 2),
    ),
    case(
        "pixel_unshuffle-3d",
        lambda x: x.pixel_unshuffle(3),
        floats(1, 3, 6),
        ref=lambda x: F.pixel_unshuffle(x, 3),
    ),
    case(
        "pixel_unshuffle-1",
        lambda x: x.pixel_unshuffle(1),
        floats(1, 2, 1, 1),
        ref=lambda x: F.pixel_unshuffle(x, 1),
    ),
    *(
        case(
            f"pairwise_distance-p{p}",
            lambda a, b, p=p: a.pairwise_distance(b, p),
            floats(4, 5),
            floats(4, 5),
            ref=lambda a, b, p=p: F.pairwise_distance(a, b, p),
        )
        for p in (2.0, 1.0, 3.0, float("inf"))
    ),
    case(
        "pairwise_distance-bcast_keepdim",
        lambda a, b: a.pairwise_distance(b, keepdim=True),
        floats(3, 4),
        floats(4),
        ref=lambda a, b: F.pairwise_distance(a, b, keepdim=True),
    ),
    case(
        "pairwise_distance-1d",
        lambda a, b: a.pairwise_distance(b, eps=0.1),
        floats(5),
        floats(5),
        ref=lambda a, b: F.pairwise_distance(a, b, eps=0.1),
    ),
    *(
        case(
            f"cdist-p{p}",
            lambda a, b, p=p: a.cdist(b, p),
            floats(4, 3),
            floats(5, 3),
            ref=lambda a, b, p=p: torch.cdist(a, b, p),
            tol=LOOSE,
        )
        for p in (2.0, 1.0, 3.0, 0.5, float("inf"))
    ),
    case(
        "cdist-p0",
        lambda a, b: a.cdist(b, 0),
        ties(4, 3),
        ties(5, 3),
        ref=lambda a, b: torch.cdist(a, b, 0),
        grad=False,
    ),
    case(
        "cdist-batched",
        lambda a, b: a.cdist(b),
        floats(2, 3, 4),
        floats(2, 5, 4),
        ref=torch.cdist,
        tol=LOOSE,
    ),
    case(
        "cdist-same_rows",
        lambda a: a.cdist(a),
        floats(3, 4),
        ref=lambda a: torch.cdist(a, a),
        tol=LOOSE,
    ),
    case("cdist-empty", lambda a, b: a.cdist(b), floats(0, 3), floats(2, 3), ref=torch.cdist),
    *(
        case(
            f"margin_ranking_loss-{r}",
            lambda a, b, y, r=r: a.margin_ranking_loss(b, y, 0.5, r),
            floats(6),
            floats(6),
            Arg((6,), kind="values", values=(1.0, -1.0, -1.0, 1.0, 1.0, -1.0), grad=False),
            ref=lambda a, b, y, r=r: F.margin_ranking_loss(a, b, y, 0.5, reduction=r),
        )
        for r in ("mean", "sum", "none")
    ),
    *(
        case(
            f"triplet_margin_loss-{r}",
            lambda a, p, n, r=r: a.triplet_margin_loss(p, n, reduction=r),
            floats(4, 5),
            floats(4, 5),
            floats(4, 5),
            ref=lambda a, p, n, r=r: F.triplet_margin_loss(a, p, n, reduction=r),
        )
        for r in ("mean", "sum", "none")
    ),
    case(
        "triplet_margin_loss-swap_p1",
        lambda a, p, n: a.triplet_margin_loss(p, n, 2.0, 1, swap=True),
        floats(3, 4),
        floats(3, 4),
        floats(3, 4),
        ref=lambda a, p, n: F.triplet_margin_loss(a, p, n, 2.0, 1, swap=True),
    ),
    case(
        "triplet_margin_loss-1d",
        lambda a, p, n: a.triplet_margin_loss(p, n, 3.0),
        floats(4),
        floats(4),
        floats(4),
        ref=lambda a, p, n: F.triplet_margin_loss(a, p, n, 3.0),
    ),
    *(
        case(
            f"gaussian_nll_loss-{r}",
            lambda x, y, v, r=r: x.gaussian_nll_loss(y, v, reduction=r),
            floats(4, 3),
            floats(4, 3),
            positive(4, 3),
            ref=lambda x, y, v, r=r: F.gaussian_nll_loss(x, y, v, reduction=r),
        )
        for r in ("mean", "sum", "none")
    ),
    case(
        "gaussian_nll_loss-full_eps",
        lambda x, y, v: x.gaussian_nll_loss(y, v, True, 0.3),
        floats(4, 3),
        floats(4, 3),
        floats(4, 3, low=0.0, high=1.0),
        ref=lambda x, y, v: F.gaussian_nll_loss(x, y, v, True, 0.3),
    ),
    case(
        "gaussian_nll_loss-var_per_row",
        lambda x, y, v: x.gaussian_nll_loss(y, v),
        floats(4, 3),
        floats(4, 3),
        positive(4),
        ref=F.gaussian_nll_loss,
    ),
    case(
        "gaussian_nll_loss-var_last1",
        lambda x, y, v: x.gaussian_nll_loss(y, v, reduction="sum"),
        floats(2, 4, 3),
        floats(2, 4, 3),
        positive(2, 4, 1),
        ref=lambda x, y, v: F.gaussian_nll_loss(x, y, v, reduction="sum"),
    ),
    *(
        case(
            f"poisson_nll_loss-{r}",
            lambda x, y, r=r: x.poisson_nll_loss(y, reduction=r),
            floats(4, 3),
            const(4, 3, low=0.0, high=4.0),
            ref=lambda x, y, r=r: F.poisson_nll_loss(x, y, reduction=r),
        )
        for r in ("mean", "sum", "none")
    ),
    case(
        "poisson_nll_loss-rate_full",
        lambda x, y: x.poisson_nll_loss(y, False, True),
        positive(4, 3),
        const(4, 3, low=0.0, high=4.0),
        ref=lambda x, y: F.poisson_nll_loss(x, y, False, True),
    ),
    case(
        "poisson_nll_loss-empty",
        lambda x, y: x.poisson_nll_loss(y, reduction="sum"),
        floats(0, 3),
        const(0, 3),
        ref=lambda x, y: F.poisson_nll_loss(x, y, reduction="sum"),
    ),
    # tensor/sampling.py
    case(
        "adaptive_avg_pool1d-3d",
        lambda x: x.adaptive_avg_pool1d(3),
        floats(2, 3, 7),
        ref=lambda x: F.adaptive_avg_pool1d(x, 3),
    ),
    case(
        "adaptive_avg_pool1d-unbatched_size1",
        lambda x: x.adaptive_avg_pool1d(1),
        floats(3, 5),
        ref=lambda x: F.adaptive_avg_pool1d(x, 1),
    ),
    case(
        "adaptive_max_pool1d-3d",
        lambda x: x.adaptive_max_pool1d(3),
        floats(2, 3, 7),
        ref=lambda x: F.adaptive_max_pool1d(x, 3),
    ),
    case(
        "adaptive_max_pool1d-indices_grow",
        lambda x: x.adaptive_max_pool1d(6, True),
        floats(2, 4),
        ref=lambda x: F.adaptive_max_pool1d(x, 6, True),
    ),
    case(
        "adaptive_max_pool2d-4d",
        lambda x: x.adaptive_max_pool2d((3, 2)),
        floats(2, 3, 7, 5),
        ref=lambda x: F.adaptive_max_pool2d(x, (3, 2)),
    ),
    case(
        "adaptive_max_pool2d-indices",
        lambda x: x.adaptive_max_pool2d(3, True),
        floats(3, 5, 4),
        ref=lambda x: F.adaptive_max_pool2d(x, 3, True),
    ),
    case(
        "adaptive_max_pool2d-size1",
        lambda x: x.adaptive_max_pool2d(1),
        floats(1, 2, 1, 3),
        ref=lambda x: F.adaptive_max_pool2d(x, 1),
    ),
    case(
        "adaptive_max_pool2d-ties",
        lambda x: x.adaptive_max_pool2d(2, True),
        ties(1, 2, 4, 4),
        ref=lambda x: F.adaptive_max_pool2d(x, 2, True),
        grad=False,
    ),
    case(
        "fold-stride_pad",
        lambda x: x.fold((5, 4), (2, 2), 1, 1, 2),
        floats(2, 12, 9),
        ref=lambda x: F.fold(x, (5, 4), (2, 2), 1, 1, 2),
    ),
    case(
        "fold-dilation_unbatched",
        lambda x: x.fold((5, 6), (2, 3), (2, 1)),
        floats(18, 12),
        ref=lambda x: F.fold(x, (5, 6), (2, 3), (2, 1)),
    ),
    case("fold-1x1", lambda x: x.fold(1, 1), floats(1, 3, 1), ref=lambda x: F.fold(x, 1, 1)),
    case(
        "fold-im2col_roundtrip",
        lambda x: x.fold((4, 5), 3, padding=1),
        floats(1, 18, 20),
        ref=lambda x: F.fold(x, (4, 5), 3, padding=1),
    ),
    *(
        case(
            f"affine_grid-{'align' if a else 'plain'}",
            lambda t, a=a: t.affine_grid((2, 1, 3, 4), a),
            floats(2, 2, 3),
            ref=lambda t, a=a: F.affine_grid(t, (2, 1, 3, 4), a),
        )
        for a in (False, True)
    ),
    case(
        "affine_grid-3d",
        lambda t: t.affine_grid((1, 2, 2, 3, 4)),
        floats(1, 3, 4),
        ref=lambda t: F.affine_grid(t, (1, 2, 2, 3, 4), False),
    ),
    case(
        "affine_grid-size1",
        lambda t: t.affine_grid((1, 1, 1, 3), True),
        floats(1, 2, 3),
        ref=lambda t: F.affine_grid(t, (1, 1, 1, 3), True),
    ),
    *(
        case(
            f"grid_sample-{m}_{p}_{'align' if a else 'plain'}",
            lambda x, g, m=m, p=p, a=a: x.grid_sample(g, m, p, a),
            floats(2, 3, 5, 4),
            floats(2, 3, 6, 2, low=-1.2, high=1.2),
            ref=lambda x, g, m=m, p=p, a=a: F.grid_sample(x, g, m, p, a),
            tol=LOOSE,
        )
        for m in ("bilinear", "nearest")
        for p in ("zeros", "border")
        for a in (False, True)
    ),
    case(
        "grid_sample-size1",
        lambda x, g: x.grid_sample(g),
        floats(1, 1, 1, 1),
        floats(1, 1, 2, 2),
        ref=lambda x, g: F.grid_sample(x, g, align_corners=False),
    ),
    case(
        "grid_sample-affine",
        lambda x, t: x.grid_sample(t.affine_grid((1, 2, 4, 4))),
        floats(1, 2, 5, 5),
        floats(1, 2, 3, low=-0.8, high=0.8),
        ref=lambda x, t: F.grid_sample(
            x, F.affine_grid(t, (1, 2, 4, 4), False), align_corners=False
        ),
        tol=LOOSE,
    ),
    *(
        case(
            f"ctc_loss-{r}",
            lambda x, y, r=r: x.log_softmax(2).ctc_loss(y, [6, 5, 4], [3, 1, 0], reduction=r),
            floats(6, 3, 5),
            indices(5, 3, 3, low=1),
            ref=lambda x, y, r=r: F.ctc_loss(
                x.log_softmax(2), y, torch.tensor([6, 5, 4]), torch.tensor([3, 1, 0]), reduction=r
            ),
            tol=LOOSE,
        )
        for r in ("mean", "sum", "none")
    ),
    case(
        "ctc_loss-repeats_concatenated",
        lambda x, y: x.log_softmax(2).ctc_loss(y, [5, 5], [3, 2], blank=4),
        floats(5, 2, 5),
        index_values(1, 1, 2, 3, 3),
        ref=lambda x, y: F.ctc_loss(
            x.log_softmax(2), y, torch.tensor([5, 5]), torch.tensor([3, 2]), blank=4
        ),
        tol=LOOSE,
    ),
    case(
        "ctc_loss-unbatched",
        lambda x, y: x.log_softmax(1).ctc_loss(y, 4, 2, reduction="sum"),
        floats(4, 3),
        index_values(1, 2),
        ref=lambda x, y: F.ctc_loss(
            x.log_softmax(1), y, torch.tensor(4), torch.tensor(2), reduction="sum"
        ),
        tol=LOOSE,
    ),
    case(
        "ctc_loss-impossible_zero_infinity",
        lambda x, y: x.log_softmax(2).ctc_loss(y, [2, 3], [3, 1], zero_infinity=True),
        floats(3, 2, 4),
        indices(4, 2, 3, low=1),
        ref=lambda x, y: F.ctc_loss(
            x.log_softmax(2), y, torch.tensor([2, 3]), torch.tensor([3, 1]), zero_infinity=True
        ),
        tol=LOOSE,
    ),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("c", params(FUNCTIONAL_MORE))
def test_functional_more(c, device, request):
    check(c, device, request)
