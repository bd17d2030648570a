"""Software prefetches for inputs a kernel streams through once (loop targets).

A matrix-vector product reads each weight once: a decode step of a language model streams
megabytes of weights per kernel, in runs of a few kilobytes (a block of rows), read by a
reduction that moves several cache lines a trip. The processor's own prefetcher follows such a
stream only within a 4 KB page and loses it at each new one, so loads wait on memory: SmolLM2's
3072 x 576 4-bit product ran at 7.7 GB/s on one core, whose reads reach 12.7. A prefetch of the
address ``prefetch_bytes`` ahead at each trip of the reduction keeps the next runs on their way
(97 -> 68 us on two cores, 191 -> 148 on one, in C written by hand).

``prefetch_streams`` adds them to a linear program: for each outermost reduction loop, each input
whose every read there is new (its index moves along every output loop around the reduction,
so no output reads it again), that moves at least ``STREAM_BYTES`` a trip, in a short run (the
loop's trips, ``STREAM_RUN_BYTES`` at most: the next output's run starts elsewhere) gets a
PREFETCH of where that read will be ``prefetch_bytes`` later, at the start of the loop's body,
one per cache line a trip moves. A prefetch never faults, so one past the buffer's end is
harmless. Only renderers with ``prefetch_bytes`` get them (``Renderer.prefetch_bytes``, the
CPU's).
"""

from __future__ import annotations

from fusegrad.uop.alu import exec_alu
from fusegrad.uop.loops import AxisKind, trips_of
from fusegrad.uop.ops import GroupOp, Ops, UOp, substitute, toposort

#: bytes of a cache line
LINE_BYTES = 64
#: a read moving fewer bytes a trip is left to the processor's prefetcher (a plain sum's lanes
#: move one line a trip, and it follows that)
STREAM_BYTES = 2 * LINE_BYTES
#: inputs smaller than this stay in cache between calls: no prefetch
STREAM_BUFFER_BYTES = 64 * 1024
#: a reduction reading a run longer than this per output (its trips times what a trip moves)
#: crosses pages only now and then, and the processor's prefetcher keeps up: a 64 MB sum in runs
#: of 64 KB ran 5% slower with prefetches, rows of 16 KB the same
STREAM_RUN_BYTES = 16 * 1024
#: at most this many prefetches per trip
MOST_LINES = 4

_OUTPUT_KINDS = (AxisKind.GLOBAL, AxisKind.PARALLEL)
#: what the position of a streamed read is computed from: loop counters, variables, numbers
_INDEX_OPS = GroupOp.ALU | {Ops.RANGE, Ops.DEFINE_VAR, Ops.SPECIAL, Ops.CONST, Ops.CAST}


def prefetch_streams(program: list[UOp], prefetch_bytes: int) -> list[UOp]:
    """``program`` with PREFETCH ops for the inputs it streams through (see the module's note)."""
    if prefetch_bytes <= 0:
        return program
    out = list(program)
    for loop, inner, outputs in _outermost_reductions(program):
        found = _streams(program, loop, inner, outputs)
        if not found:
            continue
        added: list[UOp] = []
        zero = {r: UOp.const(r.dtype, 0) for r in inner}
        for index, step in found:
            ahead = -(-prefetch_bytes // step)
            base = substitute(index.src[1], {loop: loop + ahead, **zero})
            per_line = LINE_BYTES // index.src[0].dtype.itemsize
            for line in range(min(MOST_LINES, -(-step // LINE_BYTES))):
                offset = base + line * per_line if line else base  # (the compiler folds it)
                where = UOp(Ops.INDEX, index.dtype, (index.src[0], offset))
                added.append(UOp(Ops.PREFETCH, src=(where,)))
        out = _placed_after(out, loop, added)
    return out


def _outermost_reductions(program: list[UOp]) -> list[tuple[UOp, list[UOp], list[UOp]]]:
    """Each reduction loop not inside another, with the loops inside it and the output loops
    around it."""
    found: list[tuple[UOp, list[UOp], list[UOp]]] = []
    open_loops: list[UOp] = []
    current: tuple[UOp, list[UOp], list[UOp]] | None = None
    for u in program:
        if u.op is Ops.RANGE:
            if current is not None:
                current[1].append(u)
            elif u.arg.kind is AxisKind.REDUCE:
                outputs = [r for r in open_loops if r.arg.kind in _OUTPUT_KINDS]
                current = (u, [], outputs)
                found.append(current)
            open_loops.append(u)
        elif u.op is Ops.END:
            for r in u.src:
                if r in open_loops:
                    open_loops.remove(r)
                if current is not None and r is current[0]:
                    current = None
    return found


def _streams(
    program: list[UOp], loop: UOp, inner: list[UOp], outputs: list[UOp]
) -> list[tuple[UOp, int]]:
    """The INDEX of each input streamed through inside ``loop`` (its first such read), and the
    bytes it moves a trip."""
    if (trips := trips_of(loop)) is None:  # (a loop of variable length: its run is unknown)
        return []
    start, inside = program.index(loop), set(inner) | {loop}
    seen, found = set(), []
    for u in program[start + 1 :]:
        if u.op is Ops.END and loop in u.src:
            break
        if u.op is not Ops.LOAD or len(u.src) != 1 or u.src[0].op is not Ops.INDEX:
            continue
        index = u.src[0]
        buffer, offset = index.src
        if buffer.op is not Ops.PARAM or buffer in seen:
            continue
        seen.add(buffer)
        if buffer.arg[1] * buffer.dtype.itemsize < STREAM_BUFFER_BYTES:
            continue
        nodes = toposort([offset])
        if any(n.op not in _INDEX_OPS for n in nodes):  # read at a loaded position (a gather)
            continue
        loops = {n for n in nodes if n.op is Ops.RANGE}
        if loop not in loops or not all(r in loops for r in outputs) or not loops & inside:
            continue
        step = _step(offset, loop) * buffer.dtype.itemsize
        if STREAM_BYTES <= step and trips * step <= STREAM_RUN_BYTES:
            found.append((index, step))
    return found


def _step(offset: UOp, loop: UOp) -> int:
    """How far ``offset`` moves (in elements) when ``loop`` counts one up from 0 and from 1,
    every other loop at 0; 0 when the two differ (not a steady stream)."""
    at = [_value(offset, {loop: n}) for n in range(3)]
    return at[1] - at[0] if at[2] - at[1] == at[1] - at[0] else 0


def _value(u: UOp, loops: dict[UOp, int]) -> int:
    """``u``, an index expression, with each loop counter at its value in ``loops`` (else 0)."""
    values: dict[UOp, int] = {}
    for n in toposort([u]):
        if n.op in (Ops.RANGE, Ops.DEFINE_VAR, Ops.SPECIAL):
            values[n] = loops.get(n, 0)
        elif n.op is Ops.CONST:
            values[n] = n.arg
        elif n.op is Ops.CAST:
            values[n] = values[n.src[0]]
        else:
            values[n] = int(exec_alu(n.op, n.dtype, tuple(values[s] for s in n.src)))
    return values[u]


def _placed_after(program: list[UOp], loop: UOp, added: list[UOp]) -> list[UOp]:
    """``program`` with ``added`` (and what they compute from) right after ``loop``: a node
    already computed before it stays; one computed later moves up to here (it reads only
    nodes from before the loop, the loop, or each other)."""
    at = program.index(loop) + 1
    before = set(program[:at])
    new = [n for n in toposort(added) if n not in before]
    moved = set(new)
    rest = [u for u in program[at:] if u not in moved]
    return program[:at] + new + rest
