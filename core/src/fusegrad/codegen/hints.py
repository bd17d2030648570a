"""Loop hints: how each loop of a linear program should become vector code (``LoopHint``).

The optimiser plans short loops (kinds UPCAST and LANE, see codegen/opt.py) as register tiles,
and kernels that need a loop per axis end in an innermost loop over neighbouring elements. A C
compiler left to itself often misses both, so once the program is linear (every loop's body
known) each such loop gets a hint, recorded on its RANGE, that a renderer turns into its
language's form (``CStyleRenderer.loop_pragmas``):

- UNROLL for a short loop around other loops, or one that keeps accumulators in registers.
  Left to itself, gcc vectorises an upcast tile along whichever loop it likes, sometimes the
  outer one, and then shuffles the accumulators on every iteration (a conv kernel ran 6x slower
  so). Unrolling the whole tile gives the register tile the optimiser planned: once every
  accumulator is a statement of its own, gcc keeps them in registers and packs the statements
  of a row into vector instructions. (With ``omp simd`` on the inner loop it kept the
  accumulator array in memory and stored it back on every step: a matmul at half speed.) That
  holds for a tile inside one reduce loop; inside several (a convolution's channels and window)
  gcc packs nothing, so there the tile's vector loop stays SIMD.
- SIMD for another innermost short loop that reads memory consecutively, and for the innermost
  loop of an elementwise kernel whose reads move by one (or by one every k steps).
- Nothing (or SIMD) for a tile's loops outside its reduction: setting the accumulators before
  it, the epilogue after it. Unrolled, they cost gcc most of its time and ran no faster; but
  not around a short sum (``SHORT_SUM``), where gcc's copying of the register tile through
  memory between its loops is a tenth of the kernel: there the tile's loops are unrolled as
  with few registers.
"""

from __future__ import annotations

from fusegrad.uop.loops import AxisKind, LoopHint, trips_of
from fusegrad.uop.ops import GroupOp, Ops, UOp, toposort
from fusegrad.uop.symbolic import terms

#: loops the optimiser made short and fixed on purpose
_SHORT_LOOPS = (AxisKind.UPCAST, AxisKind.LANE)
#: ops gcc's straight-line vectoriser (SLP) leaves scalar once a loop is unrolled: a ternary may
#: not become ``vmaxps`` without -ffinite-math-only, and a long body (an exp) is not packed at all
_NOT_PACKED = frozenset({*GroupOp.Comparison, Ops.WHERE, Ops.MAX})
#: the most statements an unrolled lane loop may make (lanes x body) before it is left to SIMD
_UNROLL_STATEMENTS = 512
#: an epilogue of at most this many ops (a store, a bias) stays unrolled after a matmul's tile:
#: as a loop it kept the accumulators in memory on AVX2 (a 1024² matmul at 48 instead of 108
#: GFLOP/s per core)
_SHORT_EPILOGUE = 16


def reads_consecutively(
    loop: UOp, body: list[UOp], halving: bool = False, strided: bool = False
) -> bool:
    """Whether every memory access in ``body`` that moves with ``loop`` moves by one element
    (or, with ``halving``, by one element every ``k`` steps: ``loop // k``, as a pooling's
    backward reads, which vector code does with a shuffle; with ``strided``, a load may move by
    up to ``MAX_STRIDE`` elements, which vector code reads as whole vectors and shuffles)."""
    for u in body:
        if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX:
            index = u.src[0].src[1]
            moving = [t for t in terms(index) if loop in toposort([t])]
            for t in moving:
                slow = t.op is Ops.IDIV and t.src[0] is loop and t.src[1].op is Ops.CONST
                step = (
                    strided
                    and u.op is Ops.LOAD
                    and t.op is Ops.MUL
                    and t.src[0] is loop
                    and t.src[1].op is Ops.CONST
                    and 1 < t.src[1].arg <= MAX_STRIDE
                )
                if t is not loop and not (halving and slow or step or _clamped_step(t, loop)):
                    return False
    return True


#: the longest step of a strided load a short loop still runs as vectors (``reads_consecutively``)
MAX_STRIDE = 4


def _clamped_step(t: UOp, loop: UOp) -> bool:
    """Whether index term ``t`` is ``loop`` (plus a constant) clamped into a range, as a pad's
    loads index its source (lower.py ``clamp``: MAX with constants, under NEGs): it moves by one
    inside the range and stands still at its ends, which vector code does with a min and a max
    (a padded copy's loop, scalar without the hint, ran 4x slower)."""
    flips = 0
    while t.op in (Ops.NEG, Ops.MAX):
        if t.op is Ops.NEG:
            t, flips = t.src[0], flips + 1
            continue
        const = [s for s in t.src if s.op is Ops.CONST]
        if len(const) != 1:
            return False
        t = t.src[0] if t.src[1] is const[0] else t.src[1]
    if flips % 2:
        return False
    return t is loop or (
        t.op is Ops.ADD and loop in t.src and any(s.op is Ops.CONST for s in t.src)
    )


def _uses_accumulators(body: list[UOp]) -> bool:
    """Whether ``body`` reads or writes an element of a reduction's accumulator array."""
    return any(
        u.op in (Ops.LOAD, Ops.STORE)
        and u.src[0].op is Ops.INDEX
        and u.src[0].src[0].op is Ops.DEFINE_REG
        for u in body
    )


#: an upcast loop this long or longer is no register tile: its accumulators live in memory (a
#: row's product summing a run of 1024 columns, ``opt._streamed_columns``) and it runs as SIMD
UNROLLED_UPCAST = 256


def _packs_in_registers(loop: UOp, body: list[UOp]) -> bool:
    """Whether unrolling ``loop`` leaves code gcc packs into vector registers. An upcast tile
    always (its rows are the register tile); a lane loop only when its body is short arithmetic.
    Unrolled, a sum's accumulators live in registers (under ``omp simd`` gcc loads and stores
    each on every step: a 16M sum ran 10-20% slower); a max or an exp unrolled runs scalar (a
    softmax row max ran 1.8x slower)."""
    if loop.arg.kind is AxisKind.UPCAST:  # (not a run of columns summed in memory: 1024 floats)
        return (trips := trips_of(loop)) is None or trips < UNROLLED_UPCAST
    if any(u.op in _NOT_PACKED for u in body):
        return False
    return loop.src[0].arg * len(body) <= _UNROLL_STATEMENTS


def loop_spans(program: list[UOp]) -> dict[UOp, tuple[int, int]]:
    """Each loop -> (position of its RANGE, position of its END), inner loops first."""
    opened: dict[UOp, int] = {}
    spans: dict[UOp, tuple[int, int]] = {}
    for i, u in enumerate(program):
        if u.op is Ops.RANGE:
            opened[u] = i
        elif u.op is Ops.END and (loop := u.src[0]) in opened:
            spans[loop] = (opened[loop], i)
    return spans


def open_loops(program: list[UOp]) -> list[tuple[UOp, ...]]:
    """For each position of ``program``, the loops open there (outermost first)."""
    opened: list[UOp] = []
    out = []
    for u in program:
        out.append(tuple(opened))
        if u.op is Ops.RANGE:
            opened.append(u)
        elif u.op is Ops.END:
            opened = [r for r in opened if r not in u.src]
    return out


def _reduce_loops_around(loop: UOp, spans: dict[UOp, tuple[int, int]]) -> int:
    start, end = spans[loop]
    reduces = [(s, e) for r, (s, e) in spans.items() if r.arg.kind is AxisKind.REDUCE]
    return sum(1 for s, e in reduces if s < start and end < e)


def _after_a_reduction(loop: UOp, spans: dict[UOp, tuple[int, int]]) -> bool:
    """Whether ``loop`` comes after a reduce loop has ended (an epilogue, not the set-up)."""
    start = spans[loop][0]
    return any(r.arg.kind is AxisKind.REDUCE and e < start for r, (_, e) in spans.items())


def _short_arithmetic(body: list[UOp]) -> bool:
    """Whether the values ``body`` computes (its index arithmetic aside) are a few ops, none
    that gcc's straight-line vectoriser leaves scalar (a comparison, a select)."""
    values = [u for u in body if u.op in GroupOp.ALU and not u.src[-1].dtype.is_int]
    return len(values) <= _SHORT_EPILOGUE and not any(u.op in _NOT_PACKED for u in values)


def _hint(
    loop: UOp,
    body: list[UOp],
    spans: dict[UOp, tuple[int, int]],
    elementwise: bool,
    nested: bool = False,
    roomy: bool = False,
    short: bool = False,
) -> LoopHint:
    """The hint for ``loop``, whose body is ``body`` (see the module docstring); ``short``: the
    program's reductions are ``SHORT_SUM`` steps or fewer."""
    innermost = not any(b.op is Ops.RANGE for b in body)
    roomy = roomy and not (short and loop.arg.kind is AxisKind.UPCAST)
    if loop.arg.kind in _SHORT_LOOPS:
        around = _reduce_loops_around(loop, spans)
        if (
            not elementwise
            and not nested
            and around == 0
            and not _opens_a_reduction(body)
            and (roomy or (_after_a_reduction(loop, spans) and not _short_arithmetic(body)))
        ):
            # the tile's loops before and after its reduction (setting the accumulators, the
            # epilogue reading them): unrolled, gcc spent most of its time there, and ran them
            # no faster (a GPT's kernels took 13 s of gcc, 6 s so; a GELU epilogue unrolled
            # over an 8 x 32 tile even took the matmul from 96 to 4.6 GFLOP/s). Not where the
            # reduction is loops in loops (a convolution's channels, then its window): there
            # the unrolled tile ran 3-8% faster (MNIST's step 2.6 ms on two cores). With 16
            # vector registers (AVX2) only a long epilogue: as loops, the set-up and a plain
            # store kept the accumulators in memory (a matmul at 48 instead of 108 GFLOP/s)
            return LoopHint.SIMD if innermost and reads_consecutively(loop, body) else LoopHint.NONE
        # a tile inside several reduce loops (a convolution's channels, then its window) stays
        # a loop of vectors: unrolled there, gcc left the whole tile scalar (a conv 8-19x slower)
        if not innermost or (
            _uses_accumulators(body) and _packs_in_registers(loop, body) and around < 2
        ):
            return LoopHint.UNROLL
        # (a load every other element, silero-vad's LSTM input: scalar without the hint)
        strided = loop.arg.kind is AxisKind.LANE
        return LoopHint.SIMD if reads_consecutively(loop, body, strided=strided) else LoopHint.NONE
    if elementwise and innermost and reads_consecutively(loop, body, halving=True):
        # gcc leaves many such loops scalar on its own: a pooling's backward ran 4x slower
        return LoopHint.SIMD
    return LoopHint.NONE


def _opens_a_reduction(body: list[UOp]) -> bool:
    return any(u.op is Ops.RANGE and u.arg.kind is AxisKind.REDUCE for u in body)


#: a register tile summed over at most this many steps has its set-up and epilogue unrolled
#: even with 32 registers: as loops, gcc stored the accumulators to a stack array and copied
#: that out, ~17 us of attention's (4, 4, 128, 64) scores, 182 -> 165 us (AVX-512, 2 cores)
SHORT_SUM = 128


def _short_sum(spans: dict[UOp, tuple[int, int]]) -> bool:
    """Whether the program's reductions run ``SHORT_SUM`` steps or fewer in all."""
    total = 1
    for loop in spans:
        if loop.arg.kind is AxisKind.REDUCE:
            if (trips := trips_of(loop)) is None:
                return False
            total *= trips
    return total <= SHORT_SUM


def hint_loops(program: list[UOp], roomy: bool = False) -> list[UOp]:
    """``program`` with each loop's RANGE carrying its hint (the ops inside rebuilt on it).
    ``roomy``: the target has 32 or more vector registers (see ``_hint``)."""
    spans = loop_spans(program)
    short = _short_sum(spans)
    elementwise = not any(u.op is Ops.DEFINE_REG for u in program)
    nested = any(
        loop.arg.kind is AxisKind.REDUCE and _reduce_loops_around(loop, spans) for loop in spans
    )
    hints = {
        loop: _hint(loop, program[start + 1 : end], spans, elementwise, nested, roomy, short)
        for loop, (start, end) in spans.items()
    }
    hints = {loop: hint for loop, hint in hints.items() if hint is not LoopHint.NONE}
    return _rebuilt(program, hints) if hints else program


def _rebuilt(program: list[UOp], hints: dict[UOp, LoopHint]) -> list[UOp]:
    """``program`` with the loops of ``hints`` given their hint, and every op that uses one of
    them (its loop variable, its END) rebuilt on the new loop."""
    done: dict[UOp, UOp] = {}

    def new(u: UOp) -> UOp:
        if (hit := done.get(u)) is None:
            src = tuple(new(s) for s in u.src)
            arg = u.arg._replace(hint=hints[u]) if u in hints else u.arg
            hit = done[u] = u if src == u.src and u not in hints else UOp(u.op, u.dtype, src, arg)
        return hit

    return [new(u) for u in program]
