"""C for the host CPU: the core C-family renderer plus OpenMP on the output loop, and hints that
make gcc vectorise the short upcast loops the way the optimiser meant, and the innermost loop of
elementwise kernels."""

from __future__ import annotations

import copy

from fusegrad.dtype import dtypes
from fusegrad.renderer.cstyle import CStyleRenderer
from fusegrad.uop.ops import Ops, UOp, toposort
from fusegrad.uop.symbolic import terms

#: loops the optimiser made short and fixed on purpose (see codegen/opt.py)
_SHORT_LOOPS = ("upcast", "lane")


def _reads_consecutively(loop: UOp, body: list[UOp], halving: bool = False) -> bool:
    """Whether every memory access in ``body`` that moves with ``loop`` moves by one element
    (or, with ``halving``, by one element every ``k`` steps: ``loop // k``, as a pooling's
    backward reads, which vector code does with a shuffle)."""
    for u in body:
        if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX:
            index = u.src[0].src[1]
            moving = [t for t in terms(index) if loop in toposort([t])]
            for t in moving:
                slow = t.op is Ops.IDIV and t.src[0] is loop and t.src[1].op is Ops.CONST
                if t is not loop and not (halving and slow):
                    return False
    return True


def vector_hints(program: list[UOp]) -> dict[UOp, str]:
    """A pragma for each short loop: ``omp simd`` for an innermost one that reads memory
    consecutively, ``GCC unroll`` for one around other loops; and ``omp simd`` for the innermost
    loop of an elementwise kernel whose reads move by one (or by one every k steps).

    Left to itself, gcc vectorises an upcast tile along whichever loop it likes, sometimes the
    outer one, and then shuffles the accumulators on every iteration (a conv kernel ran 6x
    slower so). Unrolling the outer upcast loops and marking the inner one as the vector loop
    gives the register tile the optimiser planned.
    """
    hints: dict[UOp, str] = {}
    opened: dict[UOp, int] = {}
    elementwise = not any(u.op is Ops.DEFINE_REG for u in program)
    for i, u in enumerate(program):
        if u.op is Ops.RANGE:
            opened[u] = i
        elif u.op is Ops.END and (loop := u.src[0]) in opened:
            body = program[opened[loop] + 1 : i]
            innermost = not any(b.op is Ops.RANGE for b in body)
            if loop.arg[1] in _SHORT_LOOPS:
                if not innermost:
                    hints[loop] = f"#pragma GCC unroll {loop.src[0].arg}"
                elif _reads_consecutively(loop, body):
                    hints[loop] = "#pragma omp simd"
            elif elementwise and innermost and _reads_consecutively(loop, body, halving=True):
                # gcc leaves many such loops scalar on its own: a pooling's backward ran 4x slower
                hints[loop] = "#pragma omp simd"
    return hints


class CPURenderer(CStyleRenderer):
    """Renders a kernel as a C function; its output loop runs on all cores when it is long."""

    type_names = {**CStyleRenderer.type_names, dtypes.float16: "_Float16"}
    #: libm's exp2f and log2f: gcc vectorises no loop that calls them (it would with -ffast-math,
    #: which we do not use), so a softmax spent most of its time in scalar calls
    scalar_math_ops = frozenset({Ops.EXP2, Ops.LOG2})

    def prelude(self, program: list[UOp]) -> str:
        return "#include <math.h>\n#include <stdbool.h>\n"

    #: pragmas for this program's loops; set on a copy of the renderer per render (thread-safe)
    hints: dict[UOp, str] = {}

    def render(self, name: str, program: list[UOp]) -> str:
        one = copy.copy(self)
        one.hints = vector_hints(program)
        return CStyleRenderer.render(one, name, program)

    def render_loop(self, u: UOp, name: str, size: str) -> list[str]:
        lines = super().render_loop(u, name, size)
        if u.arg[1] == "parallel":
            simd = " simd" if self.hints.get(u) else ""
            return [f"#pragma omp parallel for{simd} schedule(static)", *lines]
        if hint := self.hints.get(u):
            return [hint, *lines]
        return lines
