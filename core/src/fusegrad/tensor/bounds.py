"""Index bounds, checked without waiting for the data.

An index op (gather, scatter, advanced indexing, embedding, one_hot, a loss's class labels) picks
by comparing each index with the positions of its axis, so an index outside the axis matches
nothing and would silently give zeros. Reading the indices to check them at once would stop the
lazy graph at every such op (a host sync). Instead each op adds a small lazy check: how many of
its indices are out of range, and the first of them. The checks are computed together with the
data at the next read (``numpy``, ``item``, ``tolist``) and an ``IndexError`` names the op, the
offending index and its range. So a training step pays one small reduction per index op, and no
wait.

``CHECK_BOUNDS=0`` (environment, or ``helpers.context(CHECK_BOUNDS=0)``) turns the checks off.
TinyJit records the checks of the call it captures with its kernels (``taken_since``), and each
replay queues them again (``queue``), their buffers rewritten by the replayed kernels.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fusegrad.errors import InvalidIndex
from fusegrad.helpers import Context

if TYPE_CHECKING:
    from fusegrad.tensor.tensor import Tensor

#: checks waiting for a read; a loop that never reads has them checked every so many
MAX_WAITING = 256


@dataclass(frozen=True, slots=True)
class BoundsCheck:
    """One op's pending check: ``found`` becomes [any outside, the largest outside, minus the
    smallest outside (when there is a lower bound)]."""

    op: str
    axis: str  # what the indices index, for the message: "dim 1 (size 5)"
    low: int
    high: int
    found: Tensor


_WAITING: list[BoundsCheck] = []


def check_later(op: str, index: Tensor, low: int, high: int, axis: str) -> None:
    """Have every value of ``index`` checked to lie in ``[low, high)`` at the next read."""
    if not Context.CHECK_BOUNDS or not isinstance(n := index.numel(), int) or n == 0:
        return
    flat, dtype = index.reshape(n), index.dtype
    # compared in the index's own dtype (a bound it cannot reach is no test; and WebGPU on
    # llvmpipe compares an int32 widened to int64 wrongly)
    tests = [flat < low] if low > dtype.min else []
    tests += [flat >= high] if high <= dtype.max else []
    if not tests:
        return
    outside = tests[0] | tests[1] if len(tests) == 2 else tests[0]
    # one kernel, one max over rows: whether any is outside, the largest outside, and (negated)
    # the smallest outside
    rows = [outside.cast(dtype), outside.where(flat, dtype.min)]
    if low > dtype.min:
        rows.append(-outside.where(flat, dtype.max))
    found = rows[0].stack(*rows[1:]).max(1)
    _WAITING.append(BoundsCheck(op, axis, low, high, found))
    if len(_WAITING) >= MAX_WAITING:
        verify()


def mark() -> int:
    """How many checks wait now (for ``taken_since``)."""
    return len(_WAITING)


def taken_since(start: int) -> list[BoundsCheck]:
    """The checks added since ``mark()`` gave ``start``, no longer waiting."""
    taken = _WAITING[start:]
    del _WAITING[start:]
    return taken


def queue(checks: list[BoundsCheck]) -> None:
    """Have ``checks`` (realized already, or not) read at the next read; one already waiting
    (a TinyJit replayed before any read) waits once."""
    waiting = {id(check) for check in _WAITING}
    _WAITING.extend(check for check in checks if id(check) not in waiting)


def waiting() -> list[Tensor]:
    """The checks' tensors, to be realized with the data being read (one schedule)."""
    return [check.found for check in _WAITING]


def verify() -> None:
    """Read the waiting checks and raise ``IndexError`` for the first that failed."""
    checks = _WAITING[:]
    _WAITING.clear()  # (reading them below is a read too: it must find nothing waiting)
    if not checks:
        return
    checks[0].found.realize(*(c.found for c in checks[1:]))
    for check in checks:
        outside, largest, *smallest = check.found.tolist()
        if outside:
            below = -smallest[0] if smallest and -smallest[0] < check.low else None
            value = largest if largest >= check.high else below if below is not None else "?"
            others = f" (and {below} too)" if below is not None and value != below else ""
            raise InvalidIndex(
                f"{check.op}: index {value} is out of bounds for {check.axis}: valid indices are "
                f"{check.low}..{check.high - 1}{others}. Found at this read, since indices are "
                "checked without stopping the graph; CHECK_BOUNDS=0 skips the check"
            )


def forget() -> None:
    """Drop the waiting checks (``fusegrad.reset_caches``)."""
    _WAITING.clear()
