"""In-place writes that change a few rows: the loops of the rows kept are skipped (loop targets).

``view.assign(cond.where(new, view))`` into a realized buffer (a KV cache's new position: every
position up to the current one is written, each with its own value but one) is a kernel that
stores ``WHERE(c, x, LOAD(same place))``: it reads and writes back every row it keeps. Where the
condition depends only on outer loops (one per row), ``gate_kept_rows`` stores ``x`` alone and
puts the loops inside that condition under an ``IF(c)``: a kept row costs reading its condition.
SmolLM2's cache write at 160 positions: 11-17 -> ~1 us, 60 a token. (Left to the compiler, a
store under a condition in a vector loop stayed scalar: 2.5x slower than the select.)
"""

from __future__ import annotations

from fusegrad.codegen.hints import loop_spans, open_loops
from fusegrad.uop.ops import Ops, UOp


def gate_kept_rows(program: list[UOp]) -> list[UOp]:
    """``program`` with each such write gated (see the module's note); unchanged when a store
    is not of that form or the loops under the condition do anything else."""
    for at, u in enumerate(program):
        if u.op is not Ops.STORE or (kept := _kept_value(u)) is None:
            continue
        cond = kept[0]
        start, end = _region(program, at, cond)
        if start is None or not _only_kept_rows(program[start : end + 1], cond):
            continue
        body = [_plain(x) if x.op is Ops.STORE else x for x in program[start : end + 1]]
        gate = UOp(Ops.IF, src=(cond,))
        return gate_kept_rows(
            program[:start] + [gate, *body, UOp(Ops.ENDIF, src=(gate,))] + program[end + 1 :]
        )
    return program


def _kept_value(store: UOp) -> tuple[UOp, UOp] | None:
    """``(c, x)`` when ``store`` writes ``WHERE(c, x, LOAD(its own place))`` into a buffer."""
    index, value = store.src[0], store.src[1]
    if index.op is not Ops.INDEX or index.src[0].op is not Ops.PARAM or value.op is not Ops.WHERE:
        return None
    cond, new, old = value.src
    if old.op is Ops.LOAD and len(old.src) == 1 and old.src[0] is index:
        return cond, new
    return None


def _plain(store: UOp) -> UOp:
    """The store of a kept row's new value alone (the select and the read are left unused)."""
    kept = _kept_value(store)
    assert kept is not None
    return store.replace(src=(store.src[0], kept[1]))


def _region(program: list[UOp], at: int, cond: UOp) -> tuple[int | None, int]:
    """The span of the outermost loop around ``program[at]`` that opens after ``cond`` is
    computed (its RANGE to its END); None when there is none (the condition changes in the
    innermost loop)."""
    if cond not in program:
        return None, at
    defined = program.index(cond)
    spans = loop_spans(program)
    around = [r for r in open_loops(program)[at] if spans[r][0] > defined]
    return spans[around[0]] if around else (None, at)


def _only_kept_rows(region: list[UOp], cond: UOp) -> bool:
    """Whether the only effects of ``region`` are stores of kept rows under ``cond`` (no other
    output, no accumulator, no gate of its own)."""
    for u in region:
        if u.op is Ops.STORE and ((kept := _kept_value(u)) is None or kept[0] is not cond):
            return False
        if u.op in (Ops.DEFINE_REG, Ops.ATOMIC_AND, Ops.ATOMIC_OR, Ops.IF, Ops.BARRIER):
            return False
    return True
