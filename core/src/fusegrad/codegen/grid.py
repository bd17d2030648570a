"""Grid kernels: how a kernel is spread over the threads of a GPU launch.

A grid device runs a kernel as groups of threads (``Renderer.local_size`` threads each). A
kernel takes one of two shapes:

- *flat*: thread ``gidx0`` (its group's index times the group size plus its index in the group)
  computes output element ``gidx0``. The launch rounds the output up to whole groups and the
  renderer guards the index. Elementwise kernels, and reductions with many outputs that each
  reduce few elements (a matmul), are flat.
- *grouped*: one group of ``L`` threads per output element, for kernels that reduce many
  elements into few outputs (a full sum, a mean over a long axis, a softmax's row sums), on
  targets with shared memory and barriers (``Renderer.has_local``). Thread ``l`` folds elements
  ``l, l+L, l+2L...`` of the reduced axes into a register (its share), writes the share to a
  shared array, and after a barrier thread 0 folds the shares and stores the output::

      acc = identity; for r: acc = acc <op> value(r*L + l)        (every thread)
      shared[l] = acc; barrier
      if (l == 0) { for i in 1..L-1: acc = acc <op> shared[i];  out[group] = f(acc) }

  No thread returns early: a barrier must be reached by every thread of its group. The launch
  covers the outputs exactly (one group each), and positions past the reduced size are masked
  (they read nothing and count as the identity).

  When the reduced axes are not the innermost of the reduction's input (a mean over axis 0),
  neighbouring outputs are neighbours in memory: a group then takes a block of ``O`` outputs,
  thread ``l`` working for output ``l % O`` on share ``l // O``, so that neighbouring threads
  read neighbouring elements. Threads ``l < O`` combine their output's shares.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fusegrad.codegen.linearize import Linearizer
from fusegrad.codegen.lower import Lowerer, clamp, idx_const, reduce_identity, unflatten
from fusegrad.dtype import dtypes
from fusegrad.helpers import Context, prod
from fusegrad.renderer import Renderer
from fusegrad.uop.loops import AxisKind
from fusegrad.uop.ops import Ops, UOp, toposort

#: each thread of a grouped reduction folds at least this many elements itself
MIN_SHARE = 4
#: fewer threads than this per group do not pay for the barrier and the combine
MIN_GROUP = 16
#: the most outputs one group computes together
MAX_BLOCK = 32
#: the fewest threads sharing one output's reduction in a block of outputs
MIN_SHARES = 8


def _largest_power_of_two(n: int) -> int:
    return 1 << (n.bit_length() - 1) if n > 0 else 0


@dataclass(frozen=True)
class Groups:
    """How a grouped reduction is launched: ``threads`` per group, working on ``outputs``
    neighbouring outputs (``threads // outputs`` threads share each output's reduction)."""

    threads: int
    outputs: int = 1

    @property
    def shares(self) -> int:
        """Threads (shares) per output."""
        return self.threads // self.outputs


def plan_groups(ast: UOp, renderer: Renderer) -> Groups | None:
    """How to run ``ast`` as a grouped reduction, or None to keep one thread per output.

    Grouped when the target has shared memory, the kernel reduces at least as many elements per
    output as it has outputs, each thread gets ``MIN_SHARE`` elements or more, the outputs fit
    in one grid dimension and the shares in shared memory. A group takes a block of outputs
    when the reductions keep their input's innermost axis (outputs are neighbours in memory).
    """
    value = ast.src[0].src[1]
    reduces = [u for u in toposort([value]) if u.op is Ops.REDUCE_AXIS]
    if not reduces or not renderer.has_local or Context.NOOPT:
        return None
    outputs = max(1, prod(value.shape))
    reduced = min(r.src[0].size // max(r.size, 1) for r in reduces)
    local = _largest_power_of_two(
        min(renderer.local_size, renderer.max_group_size, reduced // MIN_SHARE)
    )
    shared_bytes = local * sum(max(r.dtype.itemsize, 4) for r in reduces)
    if local < MIN_GROUP or outputs > reduced or outputs > renderer.global_max[0]:
        return None
    if shared_bytes > renderer.local_memory_bytes:
        return None
    inner_kept = all(len(r.src[0].shape) - 1 not in r.arg[1] for r in reduces)
    block = outputs & -outputs if inner_kept else 1  # the largest power of two dividing it
    return Groups(local, min(block, MAX_BLOCK, local // MIN_SHARES))


# ---- lowering ---------------------------------------------------------------------------------


@dataclass
class GroupedLowerer(Lowerer):
    """Lowers reductions as strided shares: share ``part`` of ``shares`` folds the reduced
    elements ``part, part + shares, ...`` (one flat loop over all the reduced axes)."""

    part: UOp | None = None
    shares: int = 1

    def _lower_reduce(self, u: UOp, idx: tuple[UOp, ...], gate: UOp) -> UOp:
        reduce_op, axes = u.arg
        src, part, local = u.src[0], self.part, self.shares
        sizes = tuple(src.shape[a] for a in axes)
        total = prod(sizes)
        if total <= 1 or part is None:  # nothing or one element: no loop to share
            return super()._lower_reduce(u, idx, gate)
        loop = self.new_range(-(-total // local), AxisKind.REDUCE)
        position = loop * local + part
        inner = dict(zip(axes, unflatten(position, sizes)))
        index = tuple(inner.get(a, i) for a, i in enumerate(idx))
        if total % local == 0:
            return UOp(Ops.REDUCE, u.dtype, (self.lower(src, index, gate), loop), reduce_op)
        inside = position.lt(total)  # the last trip runs past the end for some threads
        value = inside.where(
            self.lower(src, index, gate & inside), reduce_identity(reduce_op, u.dtype)
        )
        return UOp(Ops.REDUCE, u.dtype, (value, loop), reduce_op)


def thread_index(local: int) -> UOp:
    """The thread's index in its group (SPECIAL ``lidx0``)."""
    return UOp(Ops.SPECIAL, dtypes.index, (), ("lidx0", local))


def lower_grouped(ast: UOp, groups: Groups) -> UOp:
    """Lower ``SINK(STORE(PARAM, value))`` with a group of threads per block of outputs."""
    out, value = ast.src[0].src
    count = prod(value.shape) // groups.outputs
    thread = thread_index(groups.threads)
    output = UOp(Ops.SPECIAL, dtypes.index, (), ("group0", count)) if count > 1 else idx_const(0)
    part = thread
    if groups.outputs > 1:  # thread l: output l % O of the block, share l // O
        output, part = output * groups.outputs + thread % groups.outputs, thread // groups.outputs
    true = UOp.const(dtypes.bool, True)
    lowerer = GroupedLowerer(part=part, shares=groups.shares)
    result = lowerer.lower(value, unflatten(output, value.shape), true)
    write = UOp(Ops.STORE, dtypes.void, (UOp(Ops.INDEX, out.dtype, (out, output)), result))
    return UOp(Ops.SINK, dtypes.void, (write,))


# ---- linearisation ----------------------------------------------------------------------------


class GroupedLinearizer(Linearizer):
    """Places a grouped kernel: the shares, the barrier, then the first share of each output
    combines and stores."""

    def __init__(self, sink: UOp, groups: Groups):
        super().__init__(sink)
        self.groups = groups
        self.thread = thread_index(groups.threads)
        if self.outer or self.upcast:
            raise NotImplementedError("a grouped kernel has no output loops (one group per output)")

    def linearize(self) -> list[UOp]:
        self.place([self.thread])
        before = [u for u in self.order if u not in self.after and not self.used[u]]
        self.place_nested([], set(), before, self.used)
        shares = [self.place_share(red, number) for number, red in enumerate(self.reduces)]
        self.place([UOp(Ops.BARRIER, src=tuple(store for _, _, store in shares))])
        first = self.thread.lt(self.groups.outputs)
        self.place_tree(first)
        guard = UOp(Ops.IF, src=(first,))
        self.place([guard])
        totals = {
            red: self.combine(red, number, shared, share)
            for number, (red, (shared, share, _)) in enumerate(zip(self.reduces, shares))
        }
        self.place_rest({red: _constant(total) for red, total in totals.items()})
        self.place([UOp(Ops.ENDIF, src=(guard,))])
        return self.program

    def place_share(self, red: UOp, number: int) -> tuple[UOp, UOp, UOp]:
        """This thread's share of ``red`` in a register, then copied to the shared array."""
        share = self.place_reduce(red, number)({})
        shared = UOp(Ops.DEFINE_LOCAL, red.dtype, (), (number, self.groups.threads))
        store = UOp(Ops.STORE, src=(UOp(Ops.INDEX, red.dtype, (shared, self.thread)), share))
        self.place([shared])
        self.place_tree(store)
        return shared, share, store

    def combine(self, red: UOp, number: int, shared: UOp, share: UOp) -> UOp:
        """Fold the output's other shares into this thread's register; return the total."""
        acc, block = share.src[0], self.groups.outputs
        count = idx_const(self.groups.shares - 1)
        loop = self.axes.range(count, AxisKind.REDUCE)
        current = UOp(Ops.LOAD, red.dtype, (acc, loop))
        # share j of this output is at l + j*O. The guard holds l < O; clamped to it, l's bounds
        # show the verifier (codegen/verify.py) the load stays in the shared array
        thread = clamp(self.thread, 0, block - 1)
        position = thread + (loop + 1) * block
        other = UOp(Ops.LOAD, red.dtype, (UOp(Ops.INDEX, red.dtype, (shared, position)),))
        # placed before the loop: the next output's loop reads it too, outside this one's scope
        self.place_tree(thread)
        self.place([loop.src[0], loop])
        self.place_tree(UOp(Ops.STORE, src=(acc, current.alu(red.arg, other))))
        end = UOp(Ops.END, src=(loop,))
        self.place([end])
        return UOp(Ops.LOAD, red.dtype, (acc, end))


def linearize_grouped(sink: UOp, groups: Groups) -> list[UOp]:
    """Order a grouped kernel graph (from ``lower_grouped``) into a program."""
    return GroupedLinearizer(sink, groups).linearize()


# ---- the launch -------------------------------------------------------------------------------


def launch_size(
    program: list[UOp], renderer: Renderer
) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """``(global_size, local_size)``: the threads a kernel needs and the threads per group.

    A grouped kernel needs exactly its groups' threads. A flat one needs one thread per output
    element, in groups of ``renderer.local_size`` (the program rounds up to whole groups; the
    renderer guards the index); None leaves the group size to the driver.
    """
    special = {u.arg[0]: u.arg[1] for u in program if u.op is Ops.SPECIAL}
    if "lidx0" in special:
        local = special["lidx0"]
        return (special.get("group0", 1) * local,), (local,)
    if "gidx0" in special:
        n = special["gidx0"]
        local = min(renderer.local_size, n)
        return (n,), ((local,) if local > 1 else None)
    return None, None


def _constant(total: UOp) -> Callable[[dict[UOp, UOp]], UOp]:
    """A ``place_rest`` result that needs no copy of the upcast loops: the combined total."""
    return lambda copies: total
