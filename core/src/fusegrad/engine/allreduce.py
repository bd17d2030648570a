"""The all-reduce: equal buffers on several devices combined element by element, the result on
each device; built on the device contract only (copies between devices, a kernel per device).

Used by ``engine/shard.py`` where a reduction crosses the sharded axis, and tested on its own
against numpy for every dtype, odd sizes and 1 to 8 devices. Also here: the two graph pieces both
need, a view of a realized buffer and the join of pieces along an axis.
"""

from __future__ import annotations

import numpy as np

from fusegrad.device import Buffer
from fusegrad.dtype import dtypes
from fusegrad.engine.realize import copy_buffer, realize_on_devices
from fusegrad.errors import InvalidArgument, ShapeError
from fusegrad.uop.ops import Ops, UOp

#: An all-reduce of at least this many elements runs as a ring (each device sends and receives
#: 2(n-1)/n of the data, whatever n); a smaller one as a tree (2 log2(n) rounds of whole buffers,
#: fewer launches, which is what a small one costs). Measured with CPU devices on a 2-core
#: machine (float32, 4 devices): 1M elements 10 ms tree, 25 ms ring; 4M 64 ms and 60 ms. Devices
#: with links of their own (GPUs) gain more from the ring.
RING_MIN = 1 << 22


def split_sizes(total: int, parts: int) -> tuple[int, ...]:
    """The lengths of ``parts`` shards of an axis of ``total``: as equal as can be, the longer
    ones first (7 over 3: 3, 2, 2)."""
    return tuple(total // parts + (1 if i < total % parts else 0) for i in range(parts))


def buffer_view(buf: Buffer, shape: tuple[int, ...]) -> UOp:
    """The graph node reading ``buf`` in order, as ``shape``."""
    node = UOp(Ops.BUFFER, buf.dtype, (), buf)
    return node if shape == (buf.size,) else UOp(Ops.RESHAPE, buf.dtype, (node,), shape)


def joined(parts: list[UOp], axis: int) -> UOp:
    """The graph of ``parts`` laid end to end along ``axis``: each padded into place, the pads
    added (bools as uint8, which has an ADD)."""
    total, dtype = sum(q.shape[axis] for q in parts), parts[0].dtype
    work = dtypes.uint8 if dtype == dtypes.bool else dtype
    out, start = None, 0
    for q in parts:
        n = q.shape[axis]
        arg = tuple(
            (start, total - start - n) if i == axis else (0, 0) for i in range(len(q.shape))
        )
        padded = UOp(Ops.PAD, work, (q if work == dtype else q.cast(work),), arg)
        out, start = padded if out is None else out + padded, start + n
    assert out is not None
    return out if work == dtype else out.cast(dtype)


def all_reduce(
    buffers: list[Buffer], op: Ops = Ops.ADD, algorithm: str | None = None
) -> list[Buffer]:
    """Combine equal-sized buffers on different devices element by element with ``op`` (ADD or
    MAX); return one buffer per device, each holding the result. ``algorithm``: "ring" or
    "tree"; by default the ring from ``RING_MIN`` elements on, the tree below.

    Built on the device contract only: copies between devices (``copy_buffer``) and kernels of
    ``op`` on each device. The devices of one round work at the same time.
    """
    if op not in (Ops.ADD, Ops.MAX):
        raise InvalidArgument(f"all_reduce combines with Ops.ADD or Ops.MAX, not {op}")
    if not buffers:
        raise InvalidArgument("all_reduce needs at least one buffer")
    first = buffers[0]
    if any(b.size != first.size or b.dtype != first.dtype for b in buffers):
        raise ShapeError("all_reduce needs buffers of one size and dtype on every device")
    if len(buffers) == 1:
        return list(buffers)
    if algorithm is None:
        algorithm = "ring" if first.size >= max(RING_MIN, len(buffers)) else "tree"
    if algorithm == "ring" and first.size >= len(buffers):
        return _ring(buffers, op)
    return _tree(buffers, op)


def _send(buf: Buffer, device: str) -> Buffer:
    """A copy of ``buf`` on ``device``."""
    out = Buffer(device, buf.size, buf.dtype)
    copy_buffer(out, buf)
    return out


def _combine(pairs: dict[str, tuple[Buffer, Buffer]], op: Ops) -> dict[str, Buffer]:
    """``op`` of each device's two buffers, computed on that device (all devices at once)."""
    work = {
        d: [UOp(op, a.dtype, (buffer_view(a, (a.size,)), buffer_view(b, (b.size,))))]
        for d, (a, b) in pairs.items()
    }
    return {d: bufs[0] for d, bufs in realize_on_devices(work).items()}


def _tree(buffers: list[Buffer], op: Ops) -> list[Buffer]:
    """Pairs combine into the lower device of each (1 into 0, 3 into 2, then 2 into 0, ...),
    then the total travels back down the same tree."""
    n, devices = len(buffers), [b.device for b in buffers]
    acc = list(buffers)
    step = 1
    while step < n:
        pairs = [(i, i + step) for i in range(0, n, 2 * step) if i + step < n]
        sent = {i: _send(acc[j], devices[i]) for i, j in pairs}
        combined = _combine({devices[i]: (acc[i], sent[i]) for i, _ in pairs}, op)
        for i, _ in pairs:
            acc[i] = combined[devices[i]]
        step *= 2
    while step > 1:
        step //= 2
        for i in range(0, n, 2 * step):
            if i + step < n:
                acc[i + step] = _send(acc[i], devices[i + step])
    return acc


def _ring(buffers: list[Buffer], op: Ops) -> list[Buffer]:
    """Each buffer cut in n chunks; n-1 rounds in which device i passes one chunk to device i+1,
    which combines it into its own (after them, device i holds the whole of chunk i+1), then n-1
    rounds passing the finished chunks on; each device joins its chunks."""
    n, devices = len(buffers), [b.device for b in buffers]
    sizes = split_sizes(buffers[0].size, n)
    starts = [int(s) for s in np.cumsum((0, *sizes))]
    cuts = {
        d: [
            UOp(Ops.SHRINK, b.dtype, (buffer_view(b, (b.size,)),), ((starts[c], starts[c + 1]),))
            for c in range(n)
        ]
        for d, b in zip(devices, buffers)
    }
    done = realize_on_devices(cuts)
    chunks = [list(done[d]) for d in devices]
    for k in range(n - 1):
        moves = {
            (i + 1) % n: ((i - k) % n, _send(chunks[i][(i - k) % n], devices[(i + 1) % n]))
            for i in range(n)
        }
        combined = _combine({devices[j]: (chunks[j][c], b) for j, (c, b) in moves.items()}, op)
        for j, (c, _) in moves.items():
            chunks[j][c] = combined[devices[j]]
    for k in range(n - 1):
        sends = [((i + 1) % n, (i + 1 - k) % n) for i in range(n)]
        moved = {j: _send(chunks[(j - 1) % n][c], devices[j]) for j, c in sends}
        for j, c in sends:
            chunks[j][c] = moved[j]
    pieces = {
        d: [joined([buffer_view(b, (b.size,)) for b in chunks[i]], 0)]
        for i, d in enumerate(devices)
    }
    whole = realize_on_devices(pieces)
    return [whole[d][0] for d in devices]
