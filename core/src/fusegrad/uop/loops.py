"""The loops of a kernel: what kind each is, and how the target's compiler should treat it.

Codegen records both on the loop's RANGE, whose arg is a ``LoopArg``, at the point where it
decides them: the kind when lowering opens the loop (``codegen/lower.py``, following the
optimiser's ``KernelOpts``), the hint once the loop's body is placed (``codegen/hints.py``).
Renderers only look them up in tables: a loop variable's name prefix (``Renderer.loop_prefixes``),
the pragma before it (``CStyleRenderer.loop_pragmas``).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum, auto
from typing import NamedTuple

from fusegrad.dtype import DType, dtypes
from fusegrad.uop.ops import Ops, UOp


class AxisKind(Enum):
    """What a loop of a kernel is for."""

    GLOBAL = auto()  # an output loop: one trip per output element (or per block of them)
    PARALLEL = auto()  # the outermost output loop of a big kernel, its trips spread over the cores
    REDUCE = auto()  # a loop of a reduction, folding its values into an accumulator
    UPCAST = auto()  # a short inner loop over a register tile of outputs (``KernelOpts.upcast``)
    LANE = auto()  # a short loop over a reduction's vector lanes, each an accumulator of its own


class LoopHint(Enum):
    """How the target's compiler should turn a loop into machine code."""

    NONE = auto()  # as it likes
    UNROLL = auto()  # unrolled whole: each accumulator a statement of its own, kept in registers
    SIMD = auto()  # as vector instructions: its memory accesses move by one element per trip


class LoopArg(NamedTuple):
    """The arg of a RANGE: its number in the kernel, its kind and the compiler hint."""

    axis: int
    kind: AxisKind
    hint: LoopHint = LoopHint.NONE

    def __repr__(self) -> str:  # ``(3, REDUCE)``, ``(5, UPCAST, UNROLL)`` in DEBUG=4's listings
        hint = "" if self.hint is LoopHint.NONE else f", {self.hint.name}"
        return f"({self.axis}, {self.kind.name}{hint})"


class AxisCounter:
    """Numbers the loops of one kernel in the order they are made; the one place loops are built.

    Numbers are unique within a kernel, so loops that must stay apart (an upcast loop and its
    copies after the reduction) are different UOps, and their rendered names differ.
    """

    def __init__(self, start: int = 0, index: DType = dtypes.index):
        self.next = start
        #: the type of the loop counters: the kernel's index type (see ``codegen/lower.py``)
        self.index = index

    @staticmethod
    def after(nodes: Iterable[UOp]) -> AxisCounter:
        """A counter that goes on after the loops among ``nodes`` (to add loops to a kernel),
        counting in the same type as they do."""
        loops = [u for u in nodes if u.op is Ops.RANGE]
        start = max((u.arg[0] + 1 for u in loops), default=0)
        return AxisCounter(start, loops[0].dtype if loops else dtypes.index)

    def range(self, size: int | UOp, kind: AxisKind) -> UOp:
        """A new loop of ``size`` trips (an index constant or expression)."""
        trips = size if isinstance(size, UOp) else UOp.const(self.index, size)
        loop = UOp(Ops.RANGE, self.index, (trips,), LoopArg(self.next, kind))
        self.next += 1
        return loop


def trips_of(loop: UOp) -> int | None:
    """A RANGE's number of trips, or None when its size is an expression (of variables)."""
    size = loop.src[0]
    return size.arg if size.op is Ops.CONST else None
