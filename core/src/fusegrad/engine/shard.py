"""Tensors on several devices of one process: placing a graph's values on their devices.

A sharded tensor's graph is the graph of the whole (logical) value. Its leaves are ``MULTI``
nodes (the realized pieces, one per device, laid end to end along an axis or each the whole
value) and ``SHARD`` nodes say where a value must be placed (``Tensor.shard``, ``.to``). Nothing
below the engine ever sees either: at realize time ``_placed_graph`` walks the graph, sources
first, and gives each node a ``Placed`` value, one graph per device:

- elementwise ops run per piece; a replicated operand of a sharded one is cut to each piece's
  rows where it is (a view, no copy), a constant is used as it is on every device;
- a reduction over other axes runs per piece; over the sharded axis, each piece's partial result
  is realized and all-reduced (``engine/allreduce.py``; those of one round in one bucket), and
  the result is replicated;
- movement ops run per piece when the shard's boundaries survive them (a reshape that keeps each
  piece a block along one axis, a permute, an expand, a pad or shrink of other axes); otherwise
  the pieces are gathered first (every device gets the whole value) and the op runs on each;
- a placement that moves data (gathering, re-sharding) realizes the pieces and copies them with
  ``Ops.COPY``, through the backends' copy hooks (``Allocator.transfer``, else host memory).

Communication needs values, so it realizes what it moves, then the walk goes on lazily: the
pieces' kernels still fuse everything between two such points. Each device's graphs are realized
by ``realize.realize_on_devices``, the devices' plans running at the same time. What a placement
did is recorded and replayed for the next graph of the same structure
(``engine/placement_cache.py``), as plans are below it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fusegrad.device import Buffer
from fusegrad.engine import placement_cache
from fusegrad.engine.allreduce import buffer_view, joined, split_sizes
from fusegrad.engine.placement_cache import all_reduced, realize_on_devices
from fusegrad.errors import InvalidArgument, ShapeError
from fusegrad.helpers import prod
from fusegrad.uop.ops import GroupOp, Ops, UOp, is_symbolic, toposort


@dataclass(frozen=True)
class Placed:
    """A value as pieces on devices: ``pieces[i]`` (a graph) on ``devices[i]``, laid end to end
    along ``axis``, or each the whole value when ``axis`` is None. No devices: a value built of
    constants only, the same graph wherever it is used."""

    pieces: tuple[UOp, ...]
    devices: tuple[str, ...]
    axis: int | None

    def sizes(self) -> tuple[int, ...]:
        """Each piece's length along the sharded axis."""
        assert self.axis is not None
        return tuple(p.shape[self.axis] for p in self.pieces)


def check_placement(shape: tuple[int, ...], devices: tuple[str, ...], axis: int | None) -> None:
    """Refuse a sharding that would leave a device an empty piece or that names no real axis."""
    if not devices:
        raise InvalidArgument("shard() needs at least one device, e.g. ('CPU', 'CPU:1')")
    if len(set(devices)) != len(devices):
        raise InvalidArgument(f"shard() got a device twice in {devices}; name each device once")
    if axis is None:
        return
    if is_symbolic(shape):
        raise ShapeError(f"cannot shard a tensor of symbolic shape {shape}; bind the sizes first")
    if not 0 <= axis < len(shape):
        raise ShapeError(f"shard axis {axis} is out of range for shape {shape}")
    if shape[axis] < len(devices):
        raise ShapeError(
            f"cannot shard axis {axis} of length {shape[axis]} over {len(devices)} devices: "
            "each needs at least one row; use fewer devices or axis=None (replicate)"
        )


def placement(u: UOp) -> tuple[tuple[str, ...], int | None] | None:
    """(devices, axis) of a sharded tensor's node when its top says so (MULTI, SHARD)."""
    return u.arg if u.op in (Ops.MULTI, Ops.SHARD) else None


def uses_devices(u: UOp) -> bool:
    """Whether the graph of ``u`` holds a MULTI or SHARD node (then ``realize`` must place it)."""
    return any(n.op in (Ops.MULTI, Ops.SHARD) for n in toposort([u]))


# ---- placing a graph --------------------------------------------------------------------------


def realize(roots: list[UOp], devices: list[tuple[str, ...]]) -> list[UOp]:
    """Compute tensor-graph ``roots`` whose tensors live on ``devices`` (a tuple of names each);
    return each one's new node: a view of its buffer for one device, else a MULTI of views.
    A structure placed before replays its recorded placement (``engine/placement_cache.py``)."""
    cache_key, inputs = placement_cache.key(roots, devices)
    if cache_key is not None and (known := placement_cache.lookup(cache_key)) is not None:
        return known.replay(inputs)
    with placement_cache.recording(cache_key, inputs) as results:
        memo = _placed_graph(roots)
        placed = []
        for root, want in zip(roots, devices):
            p = memo[root]
            if p.devices != want:
                p = reshard(p, want, p.axis if len(p.devices) == len(want) else None)
            placed.append(p)
        results += [p.pieces[0] if len(p.devices) == 1 else multi(p) for p in _realized(*placed)]
    return results


def _placed_graph(roots: list[UOp]) -> dict[UOp, Placed]:
    """Every node's ``Placed`` value, in rounds: a round places what it can, sources first, and
    collects the reductions over a sharded axis it meets (their users wait for the next round);
    then their partial results are realized together, one plan per device (so what they share,
    a forward pass under several gradients, is computed once), and all-reduced. Computed values
    a later round reads are realized with them, so that no round computes them again."""
    order = toposort(roots)
    users: dict[UOp, list[UOp]] = {}
    for u in order:
        for s in u.src:
            users.setdefault(s, []).append(u)
    memo: dict[UOp, Placed] = {}
    while True:
        waiting: dict[UOp, Placed] = {}
        for u in order:
            if u in memo or any(s not in memo for s in u.src):
                continue
            srcs = [memo[s] for s in u.src]
            if u.op is Ops.REDUCE_AXIS and srcs[0].axis in u.arg[1]:
                waiting[u] = _per_piece(u, srcs)
            else:
                memo[u] = _place(u, srcs)
        if not waiting:
            return memo
        later = _needed_later(memo, waiting, users)
        done = _realized(*waiting.values(), *(memo[u] for u in later))
        memo.update(zip(later, done[len(waiting) :]))
        realized = set(later)
        for u in [u for u in memo if u.op in GroupOp.Movement and _base(u) in realized]:
            del memo[u]  # placed again, as views of the realized value
        memo.update(_all_reduced(list(zip(waiting, done))))


def _all_reduced(partials: list[tuple[UOp, Placed]]) -> dict[UOp, Placed]:
    """The all-reduces of one round, bucketed: the realized partial results that share an op, a
    dtype and devices are laid end to end on each device and all-reduced at once (one round of
    copies and launches instead of one per gradient); each result is a view of its part."""
    buckets: dict[tuple, list[tuple[UOp, Placed]]] = {}
    for u, parts in partials:
        buckets.setdefault((u.arg[0], u.dtype, parts.devices), []).append((u, parts))
    out: dict[UOp, Placed] = {}
    for (op, _, devices), group in buckets.items():
        flat = [[buffer_view(_buffer_of(q), (q.size,)) for q in parts.pieces] for _, parts in group]
        if len(group) == 1:
            laid = [_buffer_of(q) for q in flat[0]]
        else:
            done = realize_on_devices(
                {d: [joined([f[i] for f in flat], 0)] for i, d in enumerate(devices)}
            )
            laid = [done[d][0] for d in devices]
        summed = all_reduced(laid, op)
        start = 0
        for u, _ in group:
            n = u.size
            views = tuple(_part(buffer_view(b, (b.size,)), start, n, u.shape) for b in summed)
            out[u], start = Placed(views, devices, None), start + n
    return out


def _part(flat: UOp, start: int, n: int, shape: tuple[int, ...]) -> UOp:
    """Elements ``start:start+n`` of the 1-d ``flat``, viewed as ``shape``."""
    if (start, n) != (0, flat.shape[0]):
        flat = UOp(Ops.SHRINK, flat.dtype, (flat,), ((start, start + n),))
    return UOp(Ops.RESHAPE, flat.dtype, (flat,), shape) if shape != (n,) else flat


def _needed_later(
    memo: dict[UOp, Placed], waiting: dict[UOp, Placed], users: dict[UOp, list[UOp]]
) -> list[UOp]:
    """The computed values that nodes of later rounds read: realized with this round's work.
    Of a view (an expand, a reshape) the value under it, which is smaller and all it costs."""
    found: dict[UOp, None] = {}
    for u, p in memo.items():
        if _computes(p) and any(v not in memo and v not in waiting for v in users.get(u, ())):
            found[_base(u)] = None
    return list(found)


def _base(u: UOp) -> UOp:
    """The node under ``u``'s movement ops."""
    while u.op in GroupOp.Movement:
        u = u.src[0]
    return u


def _computes(p: Placed) -> bool:
    """Whether realizing ``p`` runs a kernel: a piece that is not a view of a buffer."""
    return bool(p.devices) and any(_base(q).op is not Ops.BUFFER for q in p.pieces)


def multi(p: Placed) -> UOp:
    """The MULTI node of ``p``'s pieces."""
    return UOp(Ops.MULTI, p.pieces[0].dtype, p.pieces, (p.devices, p.axis))


def _place(u: UOp, srcs: list[Placed]) -> Placed:
    """``u``'s value, given its sources' (see the module's docstring)."""
    op = u.op
    if op is Ops.BUFFER:
        return Placed((u,), (u.arg.device,), None)
    if op is Ops.MULTI:
        return Placed(u.src, *u.arg)
    if op is Ops.SHARD:
        return reshard(srcs[0], *u.arg)
    if not srcs:  # CONST, DEFINE_VAR
        return Placed((u,), (), None)
    if op is Ops.CUSTOM_GRAD:  # only autograd reads its rule
        return srcs[0]
    if op is Ops.COPY:  # Tensor.to between single devices (its source gathered there first)
        (source,) = reshard(srcs[0], (u.arg[0],), None).pieces
        return Placed((u.replace(src=(source,)),), (u.arg[1],), None)
    if op is Ops.REDUCE_AXIS:  # over other axes (``_placed_graph`` all-reduces the others)
        return _per_piece(u, srcs)
    if op in GroupOp.Movement:
        return _move(u, srcs[0])
    if op is Ops.GATHER:
        return _per_piece(u, [_gathered(s) for s in srcs])
    return _per_piece(u, srcs)


def _per_piece(u: UOp, srcs: list[Placed]) -> Placed:
    """``u`` applied piece by piece, its sources first placed alike (``_aligned``)."""
    devices, axis, srcs = _aligned(srcs)
    pieces = tuple(
        u.replace(src=tuple(s.pieces[i] for s in srcs)) for i in range(max(1, len(devices)))
    )
    return Placed(pieces, devices, axis)


def _aligned(srcs: list[Placed]) -> tuple[tuple[str, ...], int | None, list[Placed]]:
    """The sources of an elementwise op placed alike: on the devices they share, sharded like
    the first sharded one (a replicated source is cut, a differently sharded one re-sharded)."""
    placed = [s for s in srcs if s.devices]
    if not placed:
        return (), None, srcs
    devices = placed[0].devices
    for s in placed:
        if s.devices != devices:
            raise InvalidArgument(
                f"tensors on {devices} and {s.devices} cannot be combined; move one with "
                f".to(...) or .shard(...) onto the other's devices"
            )
    model = next((s for s in placed if s.axis is not None), None)
    if model is None:
        return devices, None, [_replicated(s, devices) for s in srcs]
    axis, sizes = model.axis, model.sizes()
    return devices, axis, [reshard(s, devices, axis, sizes) for s in srcs]


def _replicated(p: Placed, devices: tuple[str, ...]) -> Placed:
    """A constant's graph used on every device; ``p`` itself when it already is."""
    return Placed(p.pieces * len(devices), devices, None) if not p.devices else p


def _move(u: UOp, p: Placed) -> Placed:
    """A movement op per piece where the shard boundaries survive it, else on gathered pieces."""
    a = p.axis
    if a is None:
        return _per_piece(u, [p])
    op, arg, shape = u.op, u.arg, u.src[0].shape
    if op is Ops.PERMUTE:
        moved = tuple(UOp(op, q.dtype, (q,), arg) for q in p.pieces)
        return Placed(moved, p.devices, arg.index(a))
    if op is Ops.EXPAND:
        moved = tuple(
            UOp(op, q.dtype, (q,), (*arg[:a], q.shape[a], *arg[a + 1 :])) for q in p.pieces
        )
        return Placed(moved, p.devices, a)
    if op is Ops.RESHAPE and (mapped := _reshaped_axis(shape, arg, a, p.sizes())) is not None:
        na, sizes = mapped
        moved = tuple(
            UOp(op, q.dtype, (q,), (*arg[:na], n, *arg[na + 1 :])) for q, n in zip(p.pieces, sizes)
        )
        return Placed(moved, p.devices, na)
    untouched = {Ops.PAD: (0, 0), Ops.SHRINK: (0, shape[a]), Ops.FLIP: False}
    if op in untouched and arg[a] == untouched[op]:
        pieces = []
        for q in p.pieces:  # the piece's own axis untouched (a SHRINK keeps its whole length)
            own = (0, q.shape[a]) if op is Ops.SHRINK else arg[a]
            pieces.append(UOp(op, q.dtype, (q,), (*arg[:a], own, *arg[a + 1 :])))
        return Placed(tuple(pieces), p.devices, a)
    return _per_piece(u, [_gathered(p)])


def _reshaped_axis(
    old: tuple[int, ...], new: tuple[int, ...], axis: int, sizes: tuple[int, ...]
) -> tuple[int, tuple[int, ...]] | None:
    """(new axis, its piece lengths) when reshaping ``old`` to ``new`` keeps every piece of the
    sharded ``axis`` a block along one new axis; None when it does not (then gather)."""
    if is_symbolic(old) or is_symbolic(new):
        return None
    outer, inner = prod(old[:axis]), prod(old[axis + 1 :])
    for na in range(len(new)):
        if prod(new[:na]) != outer or new[na] == 1:
            continue
        below = prod(new[na + 1 :])
        if below and all(n * inner % below == 0 for n in sizes):
            return na, tuple(n * inner // below for n in sizes)
    return None


# ---- moving data --------------------------------------------------------------------------------


def reshard(
    p: Placed, devices: tuple[str, ...], axis: int | None, sizes: tuple[int, ...] | None = None
) -> Placed:
    """``p`` placed on ``devices``, sharded along ``axis`` in pieces of ``sizes`` (default:
    ``split_sizes``) or replicated (None). Cutting a replicated value is a view on each device;
    anything else realizes ``p`` and copies pieces between devices (``_moved``)."""
    if p.devices == devices and p.axis == axis and (axis is None or sizes in (None, p.sizes())):
        return p
    if axis is None and p.axis is None and p.devices and set(devices) <= set(p.devices):
        return Placed(tuple(p.pieces[p.devices.index(d)] for d in devices), devices, None)
    shape = p.pieces[0].shape if p.axis is None else _whole_shape(p)
    if axis is not None:
        sizes = sizes or split_sizes(shape[axis], len(devices))
    if not p.devices or (p.devices == devices and p.axis is None):
        whole = p.pieces * len(devices) if not p.devices else p.pieces
        if axis is None:
            return Placed(whole, devices, None)
        assert sizes is not None
        return Placed(_cut(whole, axis, sizes), devices, axis)
    return _moved(p, devices, axis, sizes)


def _gathered(p: Placed) -> Placed:
    """``p`` whole on each of its devices."""
    return reshard(p, p.devices, None) if p.axis is not None else p


def _whole_shape(p: Placed) -> tuple[int, ...]:
    shape, axis = p.pieces[0].shape, p.axis
    assert axis is not None
    return (*shape[:axis], sum(p.sizes()), *shape[axis + 1 :])


def _cut(wholes: tuple[UOp, ...], axis: int, sizes: tuple[int, ...]) -> tuple[UOp, ...]:
    """Piece i of each whole value ``wholes[i]``: its i-th run of ``sizes`` rows along ``axis``."""
    starts = np.cumsum((0, *sizes))
    return tuple(_shrunk(q, axis, int(b), int(e)) for q, b, e in zip(wholes, starts, starts[1:]))


def _shrunk(u: UOp, axis: int, begin: int, end: int) -> UOp:
    """Rows ``begin:end`` of ``u`` along ``axis``; of a broadcast (an EXPAND of a length-1 axis)
    a smaller broadcast, so that the piece's kernel still sees the plain pattern (a matmul's
    operand is recognised, and laid out in panels, through an EXPAND, not through a SHRINK)."""
    if u.op is Ops.EXPAND and u.src[0].shape[axis] == 1:
        return UOp(Ops.EXPAND, u.dtype, u.src, (*u.arg[:axis], end - begin, *u.arg[axis + 1 :]))
    arg = tuple((begin, end) if i == axis else (0, n) for i, n in enumerate(u.shape))
    return UOp(Ops.SHRINK, u.dtype, (u,), arg)


def _moved(
    p: Placed, devices: tuple[str, ...], axis: int | None, sizes: tuple[int, ...] | None
) -> Placed:
    """``p`` sent to other devices or another axis: its pieces are realized, then copied
    (``Ops.COPY``: the backends' copy hooks, a direct path where they have one). A value on one
    device is cut there and each piece sent to its device; else each device gets every piece,
    joins them, and cuts its own rows from the whole (a view)."""
    (p,) = _realized(p)
    if p.axis is None and axis is not None:
        assert sizes is not None
        source = p.devices[0]
        cut = _cut(p.pieces * len(sizes), axis, sizes)
        (cut_here,) = _realized(Placed(cut, (source,) * len(cut), axis))
        sent = tuple(_copied(q, source, d) for q, d in zip(cut_here.pieces, devices))
        return Placed(sent, devices, axis)
    gathered = Placed(tuple(_assembled(p, d) for d in devices), devices, None)
    return gathered if axis is None else reshard(gathered, devices, axis, sizes)


def _assembled(p: Placed, device: str) -> UOp:
    """The whole value of realized ``p`` on ``device``: its own piece when it holds a whole one,
    else the pieces copied there and joined."""
    if p.axis is None:
        if device in p.devices:
            return p.pieces[p.devices.index(device)]
        return _copied(p.pieces[0], p.devices[0], device)
    parts = [_copied(q, source, device) for q, source in zip(p.pieces, p.devices)]
    return joined(parts, p.axis)


def _copied(u: UOp, source: str, device: str) -> UOp:
    """The realized view ``u`` on ``source`` as a view on ``device`` (a COPY of its buffer)."""
    if source == device:
        return u
    node = u.src[0] if u.op is Ops.RESHAPE else u
    moved = UOp(Ops.COPY, u.dtype, (node,), (source, device))
    return moved if u.shape == node.shape else UOp(Ops.RESHAPE, u.dtype, (moved,), u.shape)


def _realized(*placed: Placed) -> list[Placed]:
    """Each of ``placed`` with every piece a view of a buffer: the other pieces realized, all
    of one device's in one plan (what they share is computed once)."""
    work: dict[str, dict[UOp, None]] = {}
    for p in placed:
        for q, device in zip(p.pieces, p.devices):
            if _buffer_of(q, strict=False) is None:
                work.setdefault(device, {})[_root(q)] = None
    if not work:
        return list(placed)
    roots = {device: list(qs) for device, qs in work.items()}
    done = realize_on_devices(roots)
    found = {(d, r): b for d, rs in roots.items() for r, b in zip(rs, done[d])}
    out = []
    for p in placed:
        pieces = tuple(
            q
            if _buffer_of(q, strict=False) is not None
            else buffer_view(found[(d, _root(q))], q.shape)
            for q, d in zip(p.pieces, p.devices)
        )
        out.append(Placed(pieces, p.devices, p.axis))
    return out


def _root(u: UOp) -> UOp:
    """What to realize for piece ``u``: a reshape costs nothing once its source has a buffer."""
    return u.src[0] if u.op is Ops.RESHAPE else u


def _buffer_of(u: UOp, strict: bool = True) -> Buffer:
    """The buffer a view made by ``_view`` reads (None, unless ``strict``, for other nodes)."""
    node = u.src[0] if u.op is Ops.RESHAPE else u
    if node.op is Ops.BUFFER:
        return node.arg
    assert not strict, f"not a buffer view: {u.op}"
    return None  # type: ignore[return-value]
