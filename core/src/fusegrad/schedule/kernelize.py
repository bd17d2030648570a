"""The scheduler: cut a tensor graph into kernels.

Buffers are first abstracted to numbered slots (``PARAM(slot, size)``), so the plan made for a
graph serves every graph of the same structure: the second realize of ``a + b`` with new buffers
costs one walk to collect them and one dictionary lookup (see ``engine/realize.py``).

Where the cuts go:

- every root, CONTIGUOUS and COPY is written to a buffer of its own, except an in-place write
  (``CONTIGUOUS(value, BUFFER)``, what ``Tensor.assign`` into a prefix view of a realized
  tensor makes): its kernel stores ``value`` into the first elements of that buffer
  (``_in_place_writes`` checks that this cannot change what any kernel reads);
- elementwise ops fuse into whoever consumes them (recomputed if consumed twice), unless the
  repeats add up: read through an EXPAND many times, or costly and read by three kernels;
- a reduce fuses with the elementwise ops before and after it, but it gets a buffer of its own
  when it has several consumers, when its consumer reads it through an EXPAND or PAD (the reduce
  would run again for every repeated element), or when it sits inside another reduce;
- an elementwise result that an elementwise kernel of the same shape reads element for element
  is computed and stored by that kernel too (``_merged_kernels``): one kernel with several
  outputs, as an optimizer's update of a parameter and its moments is.

Nothing with zero elements is computed (``fold_empty``): a value of size 0 gets an empty buffer
and no kernel, a reduce over an empty axis is its identity and a pad of an empty source its
padding. A kernel never sees a size-0 axis, whose index math would divide by zero.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from fusegrad.dtype import DType
from fusegrad.errors import FusegradError
from fusegrad.schedule.layout import Capabilities, lay_out
from fusegrad.schedule.online_softmax import online_softmax_reads
from fusegrad.uop import ops
from fusegrad.uop.ops import (
    GroupOp,
    Ops,
    UOp,
    broadcast_scalar,
    is_symbolic,
    live_entry,
    sint,
    sym_max,
    toposort,
    unbind,
)
from fusegrad.uop.spec import KERNEL_AST, check_stage


@dataclass
class KernelStep:
    """Run kernel ``ast`` with ``slots[i]`` bound to its ``PARAM(i)``; the first ``writes``
    slots are written (one per STORE of the kernel), the others read."""

    ast: UOp
    slots: tuple[int, ...]
    device: str
    runner: Any = None  # the compiled kernel, attached on first run
    reason: str = ""  # why the graph was cut here (DEBUG=4 prints it with the schedule)
    writes: int = 1


@dataclass
class CopyStep:
    """Copy slot ``source`` (on one device) into slot ``dest`` (on another)."""

    dest: int
    source: int


@dataclass
class Plan:
    """What realizing a graph structure takes: steps over slots, and which slots to create."""

    steps: list[KernelStep | CopyStep]
    new_slots: list[tuple[int, DType, str]]  # (size, dtype, device) of slots after the inputs
    outputs: list[int]  # the slot holding each root
    n_inputs: int
    compiled: bool = False  # set once its kernels were compiled (together, in parallel)
    #: new slot -> the memory it uses; slots whose lifetimes don't overlap share (see plan_memory)
    memory: list[int] = field(default_factory=list)
    #: memory piece -> ``id`` of the handle it had in the last run, asked back first in the next
    #: (``Buffer.prefer``): each piece then gets the same memory run after run. Taking whatever
    #: was freed last swapped a matmul's panel copy and output between two runs: its output was
    #: written where the panel both cores had just read was, 2% slower (1024², 2 cores)
    handles: dict[int, int] = field(default_factory=dict)
    #: the engine's batches of this plan's launches (engine/realize.py ``PlanBatch``), one per
    #: thread running it at once; ``batchable`` False: its device's programs cannot batch them
    batches: list[Any] = field(default_factory=list)
    batchable: bool = True
    #: the steps whose outputs depend on the plan's inputs only and may be kept from one run to
    #: the next (``constant_steps``), and what the engine keeps of them (``run_plan``)
    constant: list[int] = field(default_factory=list)
    kept: dict[int, Any] = field(default_factory=dict)


def abstract(roots: list[UOp]) -> tuple[tuple[UOp, ...], list[Any], dict[UOp, int]]:
    """Replace each BUFFER by ``PARAM(slot, size)``, numbering buffers by first appearance,
    and each CUSTOM_GRAD by its value. Bound variables become free ones, their values returned
    apart: the graph of ``seq=5`` and of ``seq=7`` is then one graph, with one plan."""
    buffers: list[Any] = []
    values: dict[UOp, int] = {}
    symbolic = ops.VARIABLES_USED  # until a Variable exists, no node needs looking at twice
    done: dict[UOp, UOp] = {}
    new_of, lookup = done.__getitem__, live_entry
    buffer, custom_grad = Ops.BUFFER, Ops.CUSTOM_GRAD  # (locals: a graph's every node meets them)
    for u in toposort(roots):
        op, src = u.op, u.src
        if op is buffer:
            done[u] = UOp(Ops.PARAM, u.dtype, (), (len(buffers), u.arg.size))
            buffers.append(u.arg)
        elif op is custom_grad:  # only autograd reads the rule; the value is src[0]
            done[u] = done[src[0]]
        elif symbolic and (free := _unbound(u, done, values)) is not None:
            done[u] = free
        elif src:
            new_src = tuple(map(new_of, src))
            if new_src == src:
                done[u] = u
            elif (entry := lookup((op, u.dtype, new_src, u.arg))) is not None and (
                hit := entry()
            ) is not None:
                done[u] = hit  # (the plan cache's key holds last time's nodes: most exist)
            else:
                done[u] = UOp(op, u.dtype, new_src, u.arg)
        else:
            done[u] = u
    return tuple(done[r] for r in roots), buffers, values


def _unbound(u: UOp, done: dict[UOp, UOp], values: dict[UOp, int]) -> UOp | None:
    """``u`` with its bound variables free (their values into ``values``), or None when it has
    none. A buffer viewed with a symbolic shape gets a symbolic size: then its PARAM, like the
    rest of the graph, is the same whatever the variable's value."""
    if u.op is Ops.BIND:
        free = unbind(u, values)
        return free if isinstance(free, UOp) else None
    if u.op not in GroupOp.Movement or not is_symbolic(u.arg):
        return None
    arg = tuple(
        tuple(unbind(x, values) for x in a) if type(a) is tuple else unbind(a, values)
        for a in u.arg
    )
    src = done[u.src[0]]
    base = u.src[0]
    while base.op is Ops.RESHAPE:  # reshapes compose: only the last one's shape matters
        base = base.src[0]
    if u.op is Ops.RESHAPE and base.op is Ops.BUFFER:
        size = math.prod(cast("tuple[int | UOp, ...]", arg))  # a reshape's arg is a flat shape
        src = UOp(Ops.PARAM, src.dtype, (), (done[base].arg[0], size))
        if arg == src.shape:
            return src
    return UOp(u.op, u.dtype, (src,), arg)


def _is_empty(u: UOp) -> bool:
    """Whether ``u`` has no elements (a symbolic size is never known to be empty)."""
    return 0 in u.shape


def _empty_folded(u: UOp) -> UOp | None:
    """What ``u`` is when its source is empty: a reduce of nothing is the identity (a sum 0, a
    max the dtype's smallest value), a pad of nothing is all padding (0). None: not such a node."""
    if u.op is Ops.REDUCE_AXIS and _is_empty(u.src[0]):
        return broadcast_scalar(0 if u.arg[0] is Ops.ADD else u.dtype.min, u.dtype, u.shape)
    if u.op is Ops.PAD and _is_empty(u.src[0]):
        return broadcast_scalar(0, u.dtype, u.shape)
    return None


def fold_empty(roots: list[UOp], order: list[UOp]) -> list[UOp]:
    """``roots`` with every reduce or pad of an empty value replaced by constants, so that
    no value with elements depends on an empty one (``order`` is their toposort)."""
    if not any(_is_empty(u) for u in order if u.op is not Ops.PARAM):
        return roots
    done: dict[UOp, UOp] = {}
    for u in order:
        if (folded := _empty_folded(u)) is not None:
            done[u] = folded
        else:
            src = tuple(done[s] for s in u.src)
            done[u] = u if src == u.src else u.replace(src=src)
    return [done[r] for r in roots]


def _forced_realizes(roots: list[UOp], order: list[UOp], why: dict[UOp, str]) -> set[UOp]:
    """Roots, CONTIGUOUS, COPY (and what it copies), and reduces read by several consumers."""
    realize = {r for r in roots if r.op is not Ops.PARAM}
    for r in realize:
        why.setdefault(r, "a result asked for (a realized tensor)")
    consumers: dict[UOp, int] = {}
    reduce_below: dict[UOp, UOp] = {}  # a REDUCE_AXIS, or a movement op over one -> that reduce
    for u in order:
        for s in u.src:
            consumers[s] = consumers.get(s, 0) + 1
        if u.op in (Ops.CONTIGUOUS, Ops.COPY):
            realize.add(u)
            why.setdefault(u, _FORCED[u.op])
        if u.op is Ops.COPY and u.src[0].op is not Ops.PARAM:
            realize.add(u.src[0])
            why.setdefault(u.src[0], "copied to another device")
        if u.op is Ops.REDUCE_AXIS:
            reduce_below[u] = u
        elif u.op in GroupOp.Movement and u.src[0] in reduce_below:
            reduce_below[u] = reduce_below[u.src[0]]
    shared = {red for u, red in reduce_below.items() if consumers.get(u, 0) > 1}
    for red in shared:
        why.setdefault(red, "a reduce read by several consumers")
    return realize | shared


_FORCED = {
    Ops.CONTIGUOUS: "contiguous(): a copy in memory order (asked for, or by the layout pass)",
    Ops.COPY: "a copy between devices",
}


#: a cut costs a kernel launch and a pass over memory: worth it when it saves this much ALU work
REPEATED_WORK_LIMIT = 1 << 20
_COSTLY = frozenset({Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.SQRT, Ops.RECIP, Ops.IDIV, Ops.MOD})


def _alu_cost(node: UOp, realize: set[UOp], cap: int = 64) -> int:
    """Roughly how many ALU ops computing one element of ``node`` takes (4 per costly op)."""
    cost, stack, seen = 0, [node], set()
    while stack and cost < cap:
        u = stack.pop()
        if u in seen or u.op is Ops.PARAM or (u in realize and u is not node):
            continue
        seen.add(u)
        if u.op in GroupOp.ALU:
            cost += 4 if u.op in _COSTLY else 1
        stack.extend(u.src)
    return cost


def _repeats_work(expand: UOp, base: UOp, realize: set[UOp]) -> bool:
    """Whether reading ``base`` through ``expand`` recomputes enough to deserve a buffer."""
    if base.op in (Ops.PARAM, Ops.CONST) or base in realize or base.size == 0:
        return False
    repeated = sym_max(expand.size) - sym_max(base.size)
    return repeated * _alu_cost(base, realize) > REPEATED_WORK_LIMIT


def _below_views(u: UOp) -> UOp:
    while u.op in GroupOp.Movement:
        u = u.src[0]
    return u


def _row_reads(root: UOp, realize: set[UOp]) -> set[UOp]:
    """The EXPANDs and reductions of a row kernel rooted at ``root``, or an empty set.

    A row kernel computes an output of shape (..., n) from reductions over its last axis, read
    back along that axis: a softmax (``exp(x - max) / sum``), a layernorm (the mean, the
    variance about it, then each element normalised). Each reduction is then needed once per
    row, however many elements of the row read it: the kernel computes it once per row, before
    the row's elements (codegen/opt.py ``row_opts``), and needs no buffer for it. So every
    reduction must sum over the last axis of an array of the output's shape, and be read only
    through an EXPAND along that axis (with elementwise work between); a view over anything
    holding a reduction, or any other reduction, makes it no row kernel.
    """
    shape = root.shape
    if len(shape) == 0 or shape[-1] == 1 or is_symbolic(shape) or root.op is Ops.REDUCE_AXIS:
        return set()
    row = (len(shape) - 1,)
    found: set[UOp] = set()
    stack, seen = [(root, _FULL)], set()
    while stack:
        node, where = stack.pop()
        if (node, where) in seen or node.op in (Ops.PARAM, Ops.CONST):
            continue
        if node is not root and node in realize:
            continue
        seen.add((node, where))
        if node.op is Ops.REDUCE_AXIS:
            if where != _BELOW_EXPAND or node.arg[1] != row or node.src[0].shape != shape:
                return set()
            found.add(node)
            stack.append((node.src[0], _FULL))
        elif node.op is Ops.EXPAND and where == _FULL and node.src[0].shape == shape[:-1] + (1,):
            found.add(node)  # (its shape is the output's: elementwise work sits above)
            stack.append((node.src[0], _BELOW_EXPAND))
        elif node.op in GroupOp.Movement or node.op is Ops.GATHER:
            stack.extend((s, _IN_VIEW) for s in node.src)  # no reduction may sit below
        else:
            stack.extend((s, where) for s in node.src)
    return found if any(u.op is Ops.REDUCE_AXIS for u in found) else set()


#: where ``_row_reads`` is: at the output's shape, below an EXPAND along the row (where the
#: row's reductions are), or below another view (where no reduction may be)
_FULL, _BELOW_EXPAND, _IN_VIEW = 0, 1, 2


def _kernel_cuts(
    realize: set[UOp], why: dict[UOp, str], rank: dict[UOp, int], rows: bool = False
) -> set[UOp]:
    """Nodes that must be cut off from the kernels of ``realize`` to avoid repeated work.

    A REDUCE reached through an EXPAND/PAD (state bit 1) or inside a REDUCE (bit 2) would run
    again for every repeated element; so would elementwise work read through an EXPAND when the
    repeats add up (a convolution reads each input element once per filter tap). With ``rows``
    (every device runs loops), a row kernel keeps its reductions (``_row_reads``).

    The kernels are walked in graph order (``rank``: each node's place in it), the first first:
    which of two nodes a cut lands on can depend on which kernel reaches them first, and a set's
    order (by object identity) made the GPT step's plan 186 to 190 kernels from one process to
    the next; in this order it is 186 every time (the last first: 191), its kernels' time the
    same or lower (37.1-37.5 ms against 37.8).
    """
    cuts: set[UOp] = set()
    work = sorted((r for r in realize if r.op is not Ops.COPY), key=rank.__getitem__, reverse=True)
    seen: set[tuple[UOp, int]] = set()
    while work:
        kernel_root = work.pop()
        stack = [(kernel_root, 0)]
        in_row = _row_reads(kernel_root, realize | cuts) if rows else set()
        if rows:  # attention's softmax-weighted sum runs online (schedule/online_softmax.py)
            in_row |= online_softmax_reads(kernel_root, realize | cuts)
        while stack:
            node, state = stack.pop()
            if node is not kernel_root and (
                node.op is Ops.PARAM or node in realize or node in cuts
            ):
                continue
            if (node, state) in seen:
                continue
            seen.add((node, state))
            if node in in_row:  # computed once per row, before the row: nothing repeats
                stack.extend((s, state) for s in node.src)
                continue
            if node.op is Ops.REDUCE_AXIS and state:
                cuts.add(node)
                work.append(node)
                why.setdefault(node, _REPEATED_REDUCE[state])
                continue
            if node.op is Ops.EXPAND and _repeats_work(node, base := _below_views(node), realize):
                cuts.add(base)
                work.append(base)
                why.setdefault(base, "elementwise work read through an EXPAND (repeats add up)")
                continue
            state |= (
                2 if node.op is Ops.REDUCE_AXIS else 1 if node.op in (Ops.EXPAND, Ops.PAD) else 0
            )
            if node.op is Ops.GATHER:  # the table is read anywhere, repeatedly: as through EXPAND
                stack.extend(((node.src[0], state | 1), (node.src[1], state)))
                continue
            stack.extend((s, state) for s in node.src)
    return cuts


#: why a reduce reached in _kernel_cuts' state gets a buffer: it would run again for each repeat
_REPEATED_REDUCE = {
    1: "a reduce read through an EXPAND, PAD or GATHER (it would run again per repeated read)",
    2: "a reduce inside another reduce (it would run again for each outer element)",
    3: "a reduce read through an EXPAND, PAD or GATHER inside another reduce (it would run again)",
}


def _kernels_computing(realize: set[UOp], wanted: frozenset[Ops]) -> dict[UOp, int]:
    """For each node of an op in ``wanted``: how many kernels of ``realize`` would compute it."""
    reached_by: dict[UOp, int] = {}
    for kernel_root in realize:
        if kernel_root.op is Ops.COPY:
            continue
        stack, seen = list(kernel_root.src), set()
        while stack:
            u = stack.pop()
            if u in seen or u.op is Ops.PARAM or u in realize:
                continue
            seen.add(u)
            if u.op in wanted:
                reached_by[u] = reached_by.get(u, 0) + 1
            stack.extend(u.src)
    return reached_by


def _shared_reduces(realize: set[UOp], why: dict[UOp, str]) -> set[UOp]:
    """Reduces that two or more kernels would each compute: they get a buffer instead."""
    shared = set()
    for u, n in _kernels_computing(realize, frozenset({Ops.REDUCE_AXIS})).items():
        if n > 1:
            shared.add(u)
            why.setdefault(u, f"a reduce that {n} kernels would each compute")
    return shared


#: rounds of _shared_work: each sees the buffers the last chose (a ReLU under a pooling's
#: gradient is still computed by the kernels that do not read that gradient)
SHARED_WORK_ROUNDS = 3
#: elementwise work read by this many kernels or more may get a buffer (see _shared_work)
SHARED_WORK_KERNELS = 3
#: ... when one element of it costs at least this many ALU ops (``_alu_cost``)
SHARED_WORK_COST = 8
#: elementwise work this costly per element gets a buffer when two kernels would compute it:
#: a depthwise 5x5 convolution (25 taps) with its norm and activation, read by a
#: squeeze-and-excitation's pooling and by the product with its scale (PP-OCR's classifier ran
#: each such convolution twice: 80 + 80 us where the copy costs 10)
HEAVY_WORK_COST = 48
#: ... and has at least this many elements (a few rows are cheaper computed again)
HEAVY_WORK_ELEMENTS = 1 << 12


def _buffer_cost(kernels: int, u: UOp) -> int | None:
    """The ALU ops per element from which ``u``, computed by ``kernels`` kernels, is worth a
    buffer; None where it never is."""
    size = sym_max(u.size)
    if kernels >= SHARED_WORK_KERNELS and size >= 1 << 16:
        return SHARED_WORK_COST
    return HEAVY_WORK_COST if kernels >= 2 and size >= HEAVY_WORK_ELEMENTS else None


def _shared_work(realize: set[UOp], order: list[UOp], why: dict[UOp, str]) -> set[UOp]:
    """Costly elementwise results that three or more kernels would each compute again, or two
    when each element costs ``HEAVY_WORK_COST`` ALU ops or more.

    A gradient flowing back through a pooling and a ReLU into a BatchNorm is read by each of
    the norm's backward sums and by its output: computed once into a buffer, each of them reads
    one array instead of redoing the pooling's index math from all its inputs.
    """
    reached_by = _kernels_computing(realize, GroupOp.ALU)
    chosen: set[UOp] = set()
    covered: set[UOp] = set()
    for u in reversed(order):  # consumers first: the largest shared expression wins
        if u in covered or (least := _buffer_cost(reached_by.get(u, 0), u)) is None:
            continue
        if _alu_cost(u, realize) < least:
            continue
        chosen.add(u)
        why.setdefault(u, f"costly elementwise work that {reached_by[u]} kernels would compute")
        stack = list(u.src)
        while stack:
            v = stack.pop()
            if v not in covered and v.op is not Ops.PARAM and v not in realize:
                covered.add(v)
                stack.extend(v.src)
    return chosen


def find_realizes(
    roots: list[UOp], order: list[UOp], why: dict[UOp, str] | None = None, rows: bool = False
) -> set[UOp]:
    """The nodes that must be written to a buffer; everything else fuses into its consumer.
    ``why`` receives, for each, the first reason found for cutting the graph there. ``rows``:
    row kernels keep their reductions (every device the graph runs on loops over outputs)."""
    why = {} if why is None else why
    rank = {u: i for i, u in enumerate(order)}
    realize = _with_cuts(_forced_realizes(roots, order, why), why, rank, rows)
    for _ in range(SHARED_WORK_ROUNDS):  # a buffer chosen leaves its sources to other kernels
        if not (shared := _shared_work(realize, order, why) - realize):
            break
        realize = _with_cuts(realize | shared, why, rank, rows)
    return realize


def _with_cuts(
    realize: set[UOp], why: dict[UOp, str], rank: dict[UOp, int], rows: bool = False
) -> set[UOp]:
    """``realize`` and the cuts its kernels need, until no kernel needs another."""
    while (
        added := (_kernel_cuts(realize, why, rank, rows) | _shared_reduces(realize, why)) - realize
    ):
        realize = realize | added
    return realize


def _kernel_nodes(roots: list[UOp], slot_of: dict[UOp, int] | set[UOp]) -> list[UOp]:
    """The nodes of the kernel computing ``roots``: stop at other realized nodes (in
    ``slot_of``), which are other kernels' outputs."""
    order: list[UOp] = []
    seen: set[UOp] = set()
    stack: list[tuple[UOp, bool]] = [(r, False) for r in reversed(roots)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
        elif node not in seen:
            seen.add(node)
            stack.append((node, True))
            if node in roots or node not in slot_of:
                stack.extend((s, False) for s in reversed(_sources(node)) if s not in seen)
    return order


def writes_in_place(u: UOp) -> bool:
    """Whether ``u`` is an in-place write: ``CONTIGUOUS(value, target)`` stores ``value`` (in
    element order) into the first elements of the buffer ``target``, a PARAM (or BUFFER)."""
    return u.op is Ops.CONTIGUOUS and len(u.src) == 2


def _sources(u: UOp) -> tuple[UOp, ...]:
    """What computing ``u`` reads: an in-place write's target is where it goes, not an input."""
    return u.src[:1] if writes_in_place(u) else u.src


def _merged_kernels(
    order: list[UOp], realize: set[UOp], device_of: dict[UOp, str]
) -> dict[UOp, list[UOp]]:
    """Kernels with several outputs: for each realized node whose kernel also computes and
    stores others, those others (in order), itself last.

    An elementwise kernel reading an elementwise result of its own shape element for element
    (no view between) computes that result itself, where the value is at hand, and stores it
    too: a launch and a round trip through memory fewer. Every other kernel reading the result
    must come later in the order, since it is now written at the reader's place.
    """
    position = {u: i for i, u in enumerate(order)}
    stops = realize | {u for u in order if u.op is Ops.PARAM}
    nodes = {u: _kernel_nodes([u], stops) for u in order if u in realize and u.op is not Ops.COPY}
    readers: dict[UOp, list[UOp]] = {}
    for u, kernel in nodes.items():
        for n in kernel:
            if n is not u and n in nodes:
                readers.setdefault(n, []).append(u)
    elementwise = {
        u
        for u, kernel in nodes.items()
        if not _is_empty(u)
        and not writes_in_place(u)
        and not any(n.op is Ops.REDUCE_AXIS for n in kernel if n is u or n not in stops)
    }
    group: dict[UOp, list[UOp]] = {}  # leader -> members (itself last)
    leader: dict[UOp, UOp] = {}
    for y in order:
        if y not in elementwise:
            continue
        members = [y]
        direct = _direct_reads(y, nodes[y], stops)
        read = {s for n in nodes[y] if n is y or n not in stops for s in n.src if s in stops}
        for x in direct:
            if x not in elementwise or leader.get(x, x) is not x or x.shape != y.shape:
                continue
            if device_of.get(x) != device_of.get(y):
                continue
            taken = group.get(x, [x])
            # y computes the group's values at its own positions: a member it reads through a
            # view (shifted, say) would be computed again there instead of read back
            if any(m in read and m not in direct for m in taken):
                continue
            others = (r for m in taken for r in readers.get(m, ()) if r is not y and r not in taken)
            if all(position[r] > position[y] for r in others):
                for m in taken:
                    leader[m] = y
                group.pop(x, None)
                members = taken + members
        if len(members) > 1:
            group[y] = members
    return group


def _direct_reads(y: UOp, kernel: list[UOp], stops: set[UOp]) -> list[UOp]:
    """The realized nodes ``y``'s kernel reads only element for element: at the output's own
    positions, on every path from ``y`` (no view, reduction or gathered table above them)."""
    moved: set[UOp] = set()  # nodes computed at other positions than the output's
    direct: dict[UOp, bool] = {}
    for n in reversed(kernel):  # users before what they read
        if n is not y and n in stops:
            continue
        for i, s in enumerate(n.src):
            shifted = (
                n in moved
                or n.op in GroupOp.Movement
                or n.op is Ops.REDUCE_AXIS
                or (n.op is Ops.GATHER and i == 0)
            )
            if shifted:
                moved.add(s)
            if s in stops and s.op is not Ops.PARAM:
                direct[s] = direct.get(s, True) and not shifted
    return [s for s, plain in direct.items() if plain]


def kernel_ast(roots: list[UOp], slot_of: dict[UOp, int]) -> tuple[UOp, tuple[int, ...]]:
    """The kernel computing and storing each of ``roots`` (to ``PARAM(0)``, ``PARAM(1)``, ...):
    its inputs become the next ``PARAM(i)``s; slot ``i`` for each."""
    slots: list[int] = [slot_of[r] for r in roots]
    outs = [UOp(Ops.PARAM, r.dtype, (), (i, _stored_size(r))) for i, r in enumerate(roots)]
    # an in-place write reads its buffer through its output argument: one binding per buffer
    # (WebGPU refuses a buffer bound twice in one dispatch, C's restrict assumes it)
    local = {slot_of[r]: out for r, out in zip(roots, outs) if writes_in_place(r)}

    def param(slot: int, dtype: DType, size: sint, shape: tuple) -> UOp:
        """The kernel's argument for ``slot``, viewed with ``shape``. A symbolic size is a
        buffer big enough for every value of its variables (its largest)."""
        if slot not in local:
            local[slot] = UOp(Ops.PARAM, dtype, (), (len(slots), sym_max(size)))
            slots.append(slot)
        p = local[slot]
        return p if shape == p.shape else UOp(Ops.RESHAPE, dtype, (p,), shape)

    done: dict[UOp, UOp] = {}
    for u in _kernel_nodes(roots, slot_of):
        if u.op is Ops.PARAM:
            done[u] = param(u.arg[0], u.dtype, u.arg[1], u.shape)
        elif u not in roots and u in slot_of:
            done[u] = param(slot_of[u], u.dtype, u.size, u.shape)
        elif u.src:
            done[u] = u.replace(src=tuple(done.get(s, s) for s in u.src))
        else:
            done[u] = u
    stores = []
    for i, root in enumerate(roots):
        value = done[root]
        if value.op is Ops.CONTIGUOUS:
            value = value.src[0]
        stores.append(UOp(Ops.STORE, root.dtype, (outs[i], value)))
    return UOp(Ops.SINK, roots[-1].dtype, tuple(stores)), tuple(slots)


def _stored_size(root: UOp) -> int:
    """The size of the buffer ``root`` is stored to: its own (for its variables' largest
    values), or for an in-place write the whole buffer it writes the start of."""
    return root.src[1].arg[1] if writes_in_place(root) else sym_max(root.size)


def make_plan(
    roots: tuple[UOp, ...],
    devices: list[str],
    slot_devices: list[str],
    capabilities: Callable[[str], Capabilities] | None = None,
) -> Plan:
    """Cut an abstracted graph into steps. ``devices[i]`` is where root ``i`` lives. With the
    ``capabilities`` of each device, the layout pass first lays out reductions for it."""
    order = toposort(list(roots))
    if (folded := fold_empty(list(roots), order)) != list(roots):
        roots, order = tuple(folded), toposort(folded)
    if capabilities is not None and (laid := lay_out(roots, devices, capabilities)) != roots:
        roots, order = laid, toposort(list(laid))
    why: dict[UOp, str] = {}
    loops = capabilities is not None and all(
        capabilities(d).grid_dims is None for d in {*devices, *slot_devices}
    )
    realize = find_realizes(list(roots), order, why, rows=loops)
    n_inputs = len(slot_devices)
    slot_of: dict[UOp, int] = {u: u.arg[0] for u in order if u.op is Ops.PARAM}
    device_of = _assign_devices(roots, devices, realize, slot_devices)
    groups = _merged_kernels(order, realize, device_of)
    merged = {m for members in groups.values() for m in members[:-1]}
    in_place = _in_place_writes(order, realize, groups)
    new_slots: list[tuple[int, DType, str]] = []
    steps: list[KernelStep | CopyStep] = []
    for u in order:
        if u not in realize:
            continue
        if u in in_place:  # stored into its target's buffer, which is an input slot
            slot_of[u] = in_place[u]
        else:
            slot_of[u] = n_inputs + len(new_slots)
            new_slots.append((sym_max(u.size), u.dtype, device_of[u]))  # fits every value
        if _is_empty(u) or u in merged:  # nothing to compute, or computed by a later kernel
            continue
        if u.op is Ops.COPY:
            steps.append(CopyStep(slot_of[u], slot_of[u.src[0]]))
            continue
        outs = groups.get(u, [u])
        ast, slots = kernel_ast(outs, slot_of)
        check_stage(ast, KERNEL_AST)
        _check_devices(slots[len(outs) :], device_of[u], n_inputs, slot_devices, new_slots)
        reason = "; ".join(dict.fromkeys(why.get(m, "") for m in outs))
        steps.append(KernelStep(ast, slots, device_of[u], reason=reason, writes=len(outs)))
    outputs = [slot_of[r] for r in roots]
    memory = plan_memory(steps, new_slots, n_inputs, set(outputs))
    constant = constant_steps(steps, new_slots, n_inputs, set(outputs))
    return Plan(steps, new_slots, outputs, n_inputs, memory=memory, constant=constant)


def _slots_of(step: KernelStep | CopyStep) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The slots a step writes and the slots it reads."""
    if isinstance(step, CopyStep):
        return (step.dest,), (step.source,)
    return step.slots[: step.writes], step.slots[step.writes :]


#: a step reading only the plan's inputs keeps an output this small in memory of its own
#: (``plan_memory``), or one no larger than what it reads (a weight's layout copy). Larger
#: ones, such as a language model's dequantized weight panels (one per matrix, 0.4-9 MB each,
#: several times their 4-bit source), share memory as other slots do
PRIVATE_BYTES = 256 << 10


def _bytes_read(step: KernelStep | CopyStep) -> int:
    """The bytes of the buffers a kernel step reads (0 for a copy, or for sizes not known)."""
    if not isinstance(step, KernelStep) or step.ast is None:
        return 0
    params = (u for u in toposort([step.ast]) if u.op is Ops.PARAM and u.arg[0] >= step.writes)
    return sum(u.arg[1] * u.dtype.itemsize for u in params if isinstance(u.arg[1], int))


def constant_steps(
    steps: list, new_slots: list[tuple[int, DType, str]], n_inputs: int, outputs: set[int]
) -> list[int]:
    """The kernel steps that read only the plan's inputs (or nothing) and write slots of their
    own (no root, no other step's), each small or no larger than what the step reads: a
    weight's layout copy, not a dequantized panel several times its source. Run again on the
    same, unwritten inputs they compute the same, so the engine may keep their outputs from one
    eager run to the next (``run_plan``), as TinyJit skips them at replays."""
    writers = Counter(slot for step in steps for slot in _slots_of(step)[0])
    found = []
    for i, step in enumerate(steps):
        writes, read = _slots_of(step)
        if not isinstance(step, KernelStep) or any(slot >= n_inputs for slot in read):
            continue
        if any(slot < n_inputs or slot in outputs or writers[slot] > 1 for slot in writes):
            continue
        if all(_own_memory(step, new_slots[slot - n_inputs]) for slot in writes):
            found.append(i)
    return found


def _own_memory(step: KernelStep | CopyStep, slot: tuple[int, DType, str]) -> bool:
    """Whether an output ``slot`` (size, dtype, device) of a step that reads only the plan's
    inputs is small, or no larger than what the step reads (a weight's layout copy, not a
    dequantized panel several times its source): such an output keeps memory of its own."""
    size, dtype, _ = slot
    return isinstance(size, int) and (
        size * dtype.itemsize <= PRIVATE_BYTES or size * dtype.itemsize <= _bytes_read(step)
    )


def plan_memory(
    steps: list, new_slots: list[tuple[int, DType, str]], n_inputs: int, outputs: set[int]
) -> list[int]:
    """Give each new slot a piece of memory, reusing one whose slot is dead (never read again).

    A step's output never shares memory with a slot that step reads. Outputs are never reused:
    they are what realize returns. An empty slot, which no step writes, has a piece of its own.
    So has the output of a step that reads only the plan's inputs (a weight's layout copy,
    ``private``) when it is small or no larger than what the step reads: under TinyJit such a
    step, reading weights, computes the same at every call and is skipped when its output is
    its own (jit.py ``_constant_launches``); sharing that memory with another slot made
    silero-vad run its weights' copies at every call, and PP-OCR recognition its 1x1
    convolutions' (0.9 MB each, 0.8 ms a call).
    """
    last_read: dict[int, int] = {}
    for i, step in enumerate(steps):
        for slot in _slots_of(step)[1]:
            last_read[slot] = i
    memory: list[int] = [-1] * len(new_slots)
    free: dict[tuple, list[int]] = {}
    pieces = 0
    private: set[int] = set()
    for i, step in enumerate(steps):
        writes, read = _slots_of(step)
        leaf = all(slot < n_inputs for slot in read)
        for written in writes:
            if written < n_inputs:  # an in-place write into an input's buffer
                continue
            key = new_slots[written - n_inputs]
            if leaf and _own_memory(step, key):
                private.add(written)
            if (pool := free.get(key)) and written not in outputs and written not in private:
                memory[written - n_inputs] = pool.pop()
            else:
                memory[written - n_inputs], pieces = pieces, pieces + 1
        for slot in set(read):
            if slot in private:
                continue
            if slot >= n_inputs and slot not in outputs and last_read.get(slot) == i:
                free.setdefault(new_slots[slot - n_inputs], []).append(memory[slot - n_inputs])
    for slot, piece in enumerate(memory):
        if piece == -1:
            memory[slot], pieces = pieces, pieces + 1
    return memory


def _in_place_writes(
    order: list[UOp], realize: set[UOp], groups: dict[UOp, list[UOp]]
) -> dict[UOp, int]:
    """The in-place writes of the graph (``writes_in_place``), each with its target's slot.

    Writing into a buffer that the graph also reads is safe when the write cannot change what
    is read: its own kernel reads the target only element for element (each element before it
    stores that element), and every other kernel reading the target comes before it in
    ``order``. A write that breaks this raises, naming what to change: it is asked for by
    ``Tensor.assign`` into a view, whose base tensor must see the new values.
    """
    position = {u: i for i, u in enumerate(order)}
    leader = {m: y for y, members in groups.items() for m in members}
    stops = realize | {u for u in order if u.op is Ops.PARAM}
    writes = {u: u.src[1] for u in order if u in realize and writes_in_place(u)}
    if not writes:
        return {}
    reads = {  # the buffers each kernel reads, and where that kernel runs
        v: ({n for n in _kernel_nodes([v], stops) if n.op is Ops.PARAM}, leader.get(v, v))
        for v in order
        if v in realize and v.op is not Ops.COPY
    }
    reads.update({v: ({v.src[0]}, v) for v in order if v in realize and v.op is Ops.COPY})
    out: dict[UOp, int] = {}
    for u, target in writes.items():
        _check_in_place(u, target, writes, stops)
        late = (v for v, (read, at) in reads.items() if v is not u and position[at] > position[u])
        if any(target in reads[v][0] for v in late):
            raise FusegradError(_LATE_READ)
        out[u] = target.arg[0]
    return out


def _check_in_place(u: UOp, target: UOp, writes: dict[UOp, UOp], stops: set[UOp]) -> None:
    """Raise unless ``u`` can store into ``target``: a buffer no other write of the graph
    targets, big enough, of its dtype, which ``u``'s own kernel reads only in element order."""
    if target.op is not Ops.PARAM:
        raise FusegradError(f"an in-place write into {target.op.name}: expected a buffer")
    if sum(t is target for t in writes.values()) > 1:
        raise FusegradError(
            "two assigns into views of one buffer in one realize; realize the first one first"
        )
    if sym_max(u.size) > target.arg[1] or u.dtype != target.dtype:
        raise FusegradError(
            f"an in-place write of {u.dtype.name}[{u.size}] into a "
            f"{target.dtype.name}[{target.arg[1]}] buffer; assign a value that fits"
        )
    if not _reads_in_order(u.src[0], target, stops):
        raise FusegradError(
            "an assign into a view reads that view's buffer out of element order (through "
            "a permute, expand, flip, pad or reduce), so writing it in place would change "
            "what it reads; assign a .contiguous() copy of the value instead"
        )


_LATE_READ = (
    "an assign into a view of a buffer that another part of the same realize still reads "
    "afterwards; realize that part first (or assign to a copy)"
)


def _reads_in_order(value: UOp, target: UOp, stops: set[UOp]) -> bool:
    """Whether ``value``'s kernel reads ``target`` only at each output element's own position:
    through elementwise ops, reshapes and shrinks of the first elements (which keep the flat
    position), never through a reduce, another view or a gathered table."""
    stack, seen = [(value, True)], set()
    while stack:
        node, in_order = stack.pop()
        if node is target:
            if not in_order:
                return False
            continue
        if (node, in_order) in seen or node in stops:  # (another kernel's: read before)
            continue
        seen.add((node, in_order))
        keeps = node.op in GroupOp.ALU or node.op in (Ops.CAST, Ops.BITCAST, Ops.RESHAPE)
        keeps = keeps or node.op in (Ops.CONTIGUOUS, Ops.DETACH) or _is_prefix_shrink(node)
        stack.extend((s, in_order and keeps) for s in node.src)
    return True


def _is_prefix_shrink(u: UOp) -> bool:
    """Whether ``u`` is a SHRINK keeping the first elements in flat order: every axis from 0,
    at most one axis cut short, and only axes of size 1 before it."""
    if u.op is not Ops.SHRINK or any(not (type(b) is int and b == 0) for b, _ in u.arg):
        return False
    sizes = u.src[0].shape
    cut = [i for i, ((_, end), size) in enumerate(zip(u.arg, sizes)) if end is not size]
    cut = [i for i in cut if not (type(sizes[i]) is int and u.arg[i][1] == sizes[i])]
    return not cut or (len(cut) == 1 and all(s == 1 for s in sizes[: cut[0]]))


def _assign_devices(roots, devices, realize, slot_devices) -> dict[UOp, str]:
    """Each realized node runs on the device of the root that needs it (COPY switches device)."""
    device_of: dict[UOp, str] = {}
    seen: set[UOp] = set()
    stack = list(zip(roots, devices))
    while stack:
        node, dev = stack.pop()
        if node in seen or node.op is Ops.PARAM:
            continue
        seen.add(node)
        if node in realize:
            device_of[node] = dev
        if node.op is Ops.COPY:
            stack.append((node.src[0], node.arg[0]))
        else:
            stack.extend((s, dev) for s in node.src)
    return device_of


def _check_devices(reads, device, n_inputs, slot_devices, new_slots) -> None:
    for slot in reads:
        where = slot_devices[slot] if slot < n_inputs else new_slots[slot - n_inputs][2]
        if where != device:
            raise FusegradError(
                f"a kernel on {device} reads a tensor on {where}; move one of them with "
                f".to({device!r})"
            )
