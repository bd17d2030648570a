"""ONNX's ops of detection networks: NonMaxSuppression, RoiAlign and DeformConv.

NonMaxSuppression's output length and RoiAlign's sample grid depend on the values of boxes, so
those two read the boxes back and plan on the host (the image is still read with one lazy
gather). DeformConv samples each tap at a learned offset with the bilinear taps GridSample uses,
then runs the grouped convolution as one matmul.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.ops_nn import bad_choice, read_back, text
from fusegrad.nn.onnx.ops_vision import grid_taps, host_array
from fusegrad.nn.onnx.registry import Node, onnx_op
from fusegrad.nn.onnx.runner import onnx_check
from fusegrad.tensor import Tensor

# ---- NonMaxSuppression and RoiAlign: data-dependent, planned on the host ------------------------


def _corners(boxes: np.ndarray, center: bool) -> np.ndarray:
    """(..., 4) boxes as (y_min, x_min, y_max, x_max)."""
    if center:
        xc, yc, w, h = np.moveaxis(boxes, -1, 0)
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    y1, x1, y2, x2 = np.moveaxis(boxes, -1, 0)
    return np.stack(
        [np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], axis=-1
    )


def _iou(box: np.ndarray, others: np.ndarray) -> np.ndarray:
    """IoU of one corner box with each of ``others``; 0 where the boxes do not overlap."""
    low, high = np.maximum(box[:2], others[:, :2]), np.minimum(box[2:], others[:, 2:])
    size = np.clip(high - low, 0, None)
    inter = size[:, 0] * size[:, 1]
    area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])  # noqa: E731
    union = area(box) + area(others) - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where((inter > 0) & (union > 0), inter / union, 0.0)


def _optional_scalar(node: Node, index: int, value: Any, default: float) -> float:
    array = host_array(node, index, value)
    return default if array is None else float(array.reshape(-1)[0])


@onnx_op("NonMaxSuppression", since=10)
def non_max_suppression(
    node: Node,
    boxes: Tensor,
    scores: Tensor,
    limit: Tensor | None = None,
    iou: Tensor | None = None,
    threshold: Tensor | None = None,
) -> Tensor:
    """Greedy per batch and class: the best-scoring box left is kept, boxes overlapping it by
    more than ``iou_threshold`` are dropped. Its output's length depends on the values, so the
    boxes and scores are read back and the selection runs on the host: (selected, 3) int64 of
    (batch, class, box)."""
    keep_at_most = int(_optional_scalar(node, 2, limit, 0))
    overlap = _optional_scalar(node, 3, iou, 0.0)
    floor = None if threshold is None else _optional_scalar(node, 4, threshold, 0.0)
    center = bool(node.attr("center_point_box", 0))
    corners = _corners(read_back(node, boxes, "the boxes").astype(np.float64), center)
    table = read_back(node, scores, "the scores")
    chosen: list[tuple[int, int, int]] = []
    for b, c in itertools.product(range(table.shape[0]), range(table.shape[1])):
        order = sorted(range(table.shape[2]), key=lambda i: (-table[b, c, i], i))
        if floor is not None:
            order = [i for i in order if table[b, c, i] > floor]
        kept: list[int] = []
        for i in order:
            if len(kept) >= keep_at_most:
                break
            if not kept or not (_iou(corners[b, i], corners[b, kept]) > overlap).any():
                kept.append(i)
        chosen.extend((b, c, i) for i in kept)
    out = np.array(chosen, dtype=np.int64).reshape(-1, 3)
    return Tensor(out, device=boxes.device)


def _roi_samples(
    roi: np.ndarray,
    height: int,
    width: int,
    out_h: int,
    out_w: int,
    ratio: int,
    half_pixel: bool,
    scale: float,
) -> tuple[np.ndarray, np.ndarray, int]:
    """For one roi: (out_h, out_w, samples, 4) flat positions and bilinear weights of the sample
    points of each output bin, and the sample count per bin."""
    shift = 0.5 if half_pixel else 0.0
    x0, y0, x1, y1 = (v * scale - shift for v in roi)
    rh, rw = y1 - y0, x1 - x0
    if not half_pixel:
        rh, rw = max(rh, 1.0), max(rw, 1.0)
    bh, bw = rh / out_h, rw / out_w
    gh = ratio if ratio > 0 else int(np.ceil(rh / out_h))
    gw = ratio if ratio > 0 else int(np.ceil(rw / out_w))
    pos = np.zeros((out_h, out_w, max(gh * gw, 1), 4), dtype=np.int64)
    weight = np.zeros(pos.shape)
    for ph, pw, iy, ix in itertools.product(range(out_h), range(out_w), range(gh), range(gw)):
        y = y0 + ph * bh + (iy + 0.5) * bh / gh
        x = x0 + pw * bw + (ix + 0.5) * bw / gw
        if y < -1.0 or y > height or x < -1.0 or x > width:
            continue
        y, x = max(y, 0.0), max(x, 0.0)
        yl, xl = int(y), int(x)
        yh, xh = min(yl + 1, height - 1), min(xl + 1, width - 1)
        if yl >= height - 1:
            yl = yh = height - 1
            y = yl
        if xl >= width - 1:
            xl = xh = width - 1
            x = xl
        ly, lx = y - yl, x - xl
        s = iy * gw + ix
        pos[ph, pw, s] = [yl * width + xl, yl * width + xh, yh * width + xl, yh * width + xh]
        weight[ph, pw, s] = [(1 - ly) * (1 - lx), (1 - ly) * lx, ly * (1 - lx), ly * lx]
    return pos, weight, max(gh * gw, 1)


def roi_align(node: Node, x: Tensor, rois: Tensor, batch: Tensor, half_pixel: bool) -> Tensor:
    """Average (or max) of bilinear samples in each bin of each roi: sample positions and
    weights come from the roi values on the host, the image is read with one gather."""
    n, c, height, width = x.shape
    out_h, out_w = int(node.attr("output_height", 1)), int(node.attr("output_width", 1))
    ratio, scale = int(node.attr("sampling_ratio", 0)), float(node.attr("spatial_scale", 1.0))
    boxes = read_back(node, rois, "the rois").astype(np.float64)
    owners = read_back(node, batch, "the batch indices").astype(np.int64)
    plans = [_roi_samples(r, height, width, out_h, out_w, ratio, half_pixel, scale) for r in boxes]
    most = max((p[0].shape[2] for p in plans), default=1)
    pos = np.zeros((len(plans), out_h, out_w, most, 4), dtype=np.int64)
    weight, used = np.zeros(pos.shape), np.zeros(pos.shape[:4], dtype=bool)
    counts = np.ones((len(plans), 1, 1))
    for r, (p, w, count) in enumerate(plans):
        s = p.shape[2]
        pos[r, :, :, :s] = p + owners[r] * height * width
        weight[r, :, :, :s], used[r, :, :, :s], counts[r] = w, True, count
    flat = x.permute(1, 0, 2, 3).reshape(c, n * height * width)
    values = flat[:, pos.reshape(-1)].reshape(c, *pos.shape).cast(dtypes.float32)
    weighted = values * Tensor(weight.astype(np.float32), device=x.device)
    if text(node.attr("mode", "avg")) == "max":
        best = weighted.max(-1)
        best = Tensor(used, device=x.device).where(best, -math.inf).max(-1)
    else:
        best = weighted.sum((-1, -2)) / Tensor(counts.astype(np.float32), device=x.device)
    return best.permute(1, 0, 2, 3).cast(x.dtype)


@onnx_op("RoiAlign", since=10)
def roi_align_v10(node: Node, x: Tensor, rois: Tensor, batch: Tensor) -> Tensor:
    return roi_align(node, x, rois, batch, half_pixel=False)


@onnx_op("RoiAlign", since=16)
def roi_align_v16(node: Node, x: Tensor, rois: Tensor, batch: Tensor) -> Tensor:
    """Opset 16 adds ``coordinate_transformation_mode`` (default half_pixel)."""
    mode = text(node.attr("coordinate_transformation_mode", "half_pixel"))
    return roi_align(node, x, rois, batch, half_pixel=mode == "half_pixel")


# ---- DeformConv ----------------------------------------------------------------------------------


def _tap_positions(node: Node, offset: Tensor, kernel: tuple[int, int], groups: int) -> list:
    """(y, x) of every kernel tap at every output position, moved by its offset: two
    (N, offset_groups, kh, kw, oh, ow) float tensors."""
    n, (kh, kw), (oh, ow) = offset.shape[0], kernel, offset.shape[2:]
    (sh, sw), (dh, dw) = _ints2(node, "strides"), _ints2(node, "dilations")
    pads = [int(v) for v in node.attr("pads", [])] or [0, 0, 0, 0]
    off = offset.cast(dtypes.float32).reshape(n, groups, kh, kw, 2, oh, ow)
    base_y = np.arange(kh)[:, None, None, None] * dh + np.arange(oh)[None, None, :, None] * sh
    base_x = np.arange(kw)[None, :, None, None] * dw + np.arange(ow)[None, None, None, :] * sw
    y = off[:, :, :, :, 0] + Tensor((base_y - pads[0]).astype(np.float32), device=offset.device)
    x = off[:, :, :, :, 1] + Tensor((base_x - pads[1]).astype(np.float32), device=offset.device)
    return [y, x]


def _sampled_columns(x: Tensor, y_pos: Tensor, x_pos: Tensor, groups: int) -> Tensor:
    """Bilinear samples of x (N, C, H, W) at the tap positions, zero outside the image:
    (N, offset_groups, C / offset_groups, kh * kw * oh * ow), one gather for all four corners."""
    n, c, height, width = x.shape
    taps = []
    for (iy, wy, oky), (ix, wx, okx) in itertools.product(
        grid_taps(y_pos, height, "linear", "zeros", 0, 0),
        grid_taps(x_pos, width, "linear", "zeros", 0, 0),
    ):
        index = iy.clip(0, height - 1) * width + ix.clip(0, width - 1)
        assert oky is not None and okx is not None and wy is not None and wx is not None
        taps.append((index, (oky & okx).where(wy * wx, 0.0)))
    q = math.prod(y_pos.shape[2:])
    index = Tensor.stack([t[0] for t in taps], dim=-1).cast(dtypes.int32).reshape(n, groups, 1, -1)
    weight = Tensor.stack([t[1] for t in taps], dim=-1).reshape(n, groups, 1, q, 4)
    source = x.reshape(n, groups, c // groups, height * width)
    sampled = source.gather(3, index.expand(n, groups, c // groups, q * 4))
    return (sampled.reshape(n, groups, c // groups, q, 4).cast(dtypes.float32) * weight).sum(-1)


@onnx_op("DeformConv", since=19)
def deform_conv(
    node: Node,
    x: Tensor,
    w: Tensor,
    offset: Tensor,
    b: Tensor | None = None,
    mask: Tensor | None = None,
) -> Tensor:
    """Convolution whose taps are moved by learned offsets: each tap is a bilinear sample
    (zero outside the image) at its shifted position, scaled by the mask, then a grouped
    matmul with the weights."""
    n, c = x.shape[:2]
    oc, kh, kw = w.shape[0], w.shape[2], w.shape[3]
    oh, ow = offset.shape[2], offset.shape[3]
    groups, og = int(node.attr("group", 1)), int(node.attr("offset_group", 1))
    y_pos, x_pos = _tap_positions(node, offset, (kh, kw), og)
    cols = _sampled_columns(x, y_pos, x_pos, og)  # (n, og, c/og, kh*kw*oh*ow)
    if mask is not None:
        cols = cols * mask.cast(dtypes.float32).reshape(n, og, 1, -1)
    cols = cols.reshape(n, groups, (c // groups) * kh * kw, oh * ow)
    kernel = w.cast(dtypes.float32).reshape(groups, oc // groups, (c // groups) * kh * kw)
    out = kernel.matmul(cols).reshape(n, oc, oh, ow)
    if b is not None:
        out = out + b.cast(dtypes.float32).reshape(1, oc, 1, 1)
    return out.cast(x.dtype)


def _ints2(node: Node, key: str) -> tuple[int, int]:
    values = [int(v) for v in node.attr(key, [])] or [1, 1]
    return values[0], values[1]


@onnx_check("RoiAlign")
def check_roi_align(node: Node) -> str | None:
    return bad_choice(
        node,
        {
            "mode": ("avg", ("avg", "max")),
            "coordinate_transformation_mode": ("half_pixel", ("half_pixel", "output_half_pixel")),
        },
    )
