"""Gradient buckets: many small arrays packed into a few large buffers, one all-reduce each.

An all-reduce costs a fixed latency plus its bytes over the bandwidth. A model's gradients are
many tensors, some tiny (biases, norms): reduced one by one, the latencies add up; reduced as
one buffer, nothing overlaps and the copy doubles the memory. Buckets of a few MB (PyTorch DDP
uses 25) are the middle way. Pure numpy, no MPI: tested on its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from fusegrad.errors import InvalidValue

DEFAULT_BUCKET_MB = 25.0


def plan_buckets(
    sizes: Sequence[int], kinds: Sequence[object], limit_bytes: int
) -> list[list[int]]:
    """Group the arrays ``0..n-1`` (``sizes`` in bytes) into buckets, in order.

    Arrays of one bucket share their ``kind`` (a dtype: one buffer holds one type) and add up
    to at most ``limit_bytes``; an array larger than the limit is a bucket of its own. An array
    joins the open bucket of its kind, so interleaved kinds still fill their buckets.

    >>> plan_buckets([4, 4, 8, 4], ["f", "f", "f", "f"], 8)
    [[0, 1], [2], [3]]
    >>> plan_buckets([4, 4, 4], ["f", "h", "f"], 100)
    [[0, 2], [1]]
    """
    if limit_bytes <= 0:
        raise InvalidValue(f"bucket size must be positive, got {limit_bytes} bytes")
    closed: list[list[int]] = []
    open_buckets: dict[object, tuple[list[int], int]] = {}
    for i, (size, kind) in enumerate(zip(sizes, kinds, strict=True)):
        members, used = open_buckets.get(kind, ([], 0))
        if members and used + size > limit_bytes:
            closed.append(members)
            members, used = [], 0
        open_buckets[kind] = (members + [i], used + size)
    buckets = closed + [members for members, _ in open_buckets.values()]
    return sorted(buckets, key=lambda b: b[0])


def flatten(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """One contiguous 1-d buffer holding ``arrays`` one after another (all of one dtype)."""
    return np.concatenate([a.reshape(-1) for a in arrays]) if arrays else np.empty(0)


def unflatten(buffer: np.ndarray, shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
    """The inverse of ``flatten``: views of ``buffer`` with ``shapes``."""
    out, start = [], 0
    for shape in shapes:
        size = int(np.prod(shape, dtype=np.int64))
        out.append(buffer[start : start + size].reshape(shape))
        start += size
    if start != buffer.size:
        raise InvalidValue(f"a buffer of {buffer.size} values does not hold shapes {shapes}")
    return out
