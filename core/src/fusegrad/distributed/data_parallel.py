"""Data-parallel training: every rank holds the whole model and trains on its share of each
batch; the gradients are averaged over the ranks before each step, so every rank takes the
same step, the one a single process would take on the whole batch.

    dist.broadcast_parameters(params)         # once: every rank starts from rank 0's weights
    loss.backward()
    dist.sync_gradients(params)               # each step, between backward and the update
    optimizer.step()

or ``DataParallel(optimizer)``, whose ``step`` does both.

The exchange overlaps the backward pass. ``sync_gradients`` realizes the gradients itself, in
one plan whose roots are the gradients last layer first (the order backward produces them), so
the scheduler computes the last layers' gradients early. The gradients go in buckets
(``buckets.py``, last layer first); as soon as the kernel completing a bucket's last gradient
has run, the bucket is copied to its host buffer and its non-blocking all-reduce started,
while the kernels of the earlier layers run on (``realize_as_ready``). Buckets start in the
plan's order on every rank (MPI needs the same order everywhere), each once it and the ones
before it are complete. After the last kernel, the requests are waited for and the averaged
gradients copied back to the device.

Sending and finishing a bucket are launches like a kernel's (``_SendBucket``,
``_FinishBucket``: they run on handles, as ``realize.CopyRunner`` does), recorded by TinyJit in
their place among the kernels. So ``sync_gradients`` works inside a jitted step too: a replay
runs the backward kernels, starts each bucket's all-reduce at the same point, and waits for
them at the end, without Python between (a replay skips the ranks' agreement check, made
when the step was captured).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import TYPE_CHECKING, Any

import numpy as np

from fusegrad.device import Buffer, Device
from fusegrad.distributed import buckets, comm
from fusegrad.distributed.collectives import from_host, reduce_dtype, to_host
from fusegrad.distributed.errors import DistributedError
from fusegrad.engine import capture, realize
from fusegrad.errors import JitError, UnknownOption
from fusegrad.tensor import Tensor, realize_as_ready
from fusegrad.tensor.tensor import buffer_uop

if TYPE_CHECKING:
    from fusegrad.nn.optim import Optimizer


def _not_in_jit(name: str) -> None:
    """TinyJit replays kernels only: an exchange with the other ranks would silently vanish."""
    if capture.active() is not None:
        raise JitError(
            f"{name} cannot run inside a TinyJit function: a replay would skip its exchange "
            f"with the other ranks. Call {name} once, before the jitted training step "
            "(sync_gradients may run inside it)"
        )


def _signature(tensors: Sequence[Tensor]) -> str:
    return ", ".join(f"{t.dtype.name} {tuple(t.shape)}" for t in tensors)


def _exchange(
    plan: list[list[int]],
    host_of: Callable[[int], np.ndarray],
    start: Callable[[np.ndarray], list[Any]],
    what: str,
) -> list[tuple[list[int], np.ndarray]]:
    """Pack each bucket of ``plan`` (array ``i`` from ``host_of(i)``) into one buffer and start
    its exchange at once; wait for all. Returns (members, buffer) per bucket.

    Copying the next bucket to the host overlaps the exchange of the ones before: MPI moves
    data only inside its calls, so each new bucket also polls the ones in flight.
    """
    filled: list[tuple[list[int], np.ndarray]] = []
    requests: list[Any] = []
    for members in plan:
        flat = buckets.flatten([host_of(i) for i in members])
        requests += start(flat)
        filled.append((members, flat))
        comm.progress(requests)
    comm.wait(requests, what, filled)
    return filled


@dataclass
class _Bucket:
    """Gradients exchanged as one buffer: their host copy and the all-reduce in flight."""

    members: list[int]  # positions in the gradient list
    flat: np.ndarray  # the host buffer, in the dtype the ranks reduce in
    views: list[np.ndarray]  # each member's part of ``flat``
    device: str
    requests: list[Any] = field(default_factory=list)
    #: kernels the exchange had run when this bucket's all-reduce started (``Overlap``)
    started_after: int = 0


@dataclass
class Overlap:
    """How the last ``sync_gradients`` overlapped the backward pass: ``kernels`` it ran in all,
    and after how many of them each bucket's all-reduce started (in the order started)."""

    kernels: int
    started_after: list[int]

    @property
    def overlapped(self) -> int:
        """The kernels that ran while the first all-reduce was in flight."""
        return self.kernels - self.started_after[0] if self.started_after else 0


#: the last ``sync_gradients``'s overlap (for tests and benchmarks; None before the first)
last_overlap: Overlap | None = None
#: seconds spent in the exchange's host steps so far, TinyJit replays included: copies to and
#: from the host, starting the all-reduces, and waiting for what the kernels did not hide
exchange_seconds = [0.0]


def _copyout(view: np.ndarray, device: str, handle: Any, nbytes: int) -> None:
    """A buffer's first ``view.nbytes`` bytes into ``view`` (its whole ``nbytes`` copied)."""
    allocator = Device[device].allocator
    if not view.nbytes:
        return
    if nbytes == view.nbytes:
        allocator.copyout(view.data.cast("B"), handle)
        return
    scratch = np.empty(nbytes, np.uint8)
    allocator.copyout(scratch.data, handle)
    view.view(np.uint8)[:] = scratch[: view.nbytes]


class _HostStep:
    """A step on the host that TinyJit records and replays among the kernels, launched on
    handles as a kernel's ``Runner`` is (as ``realize.CopyRunner``)."""

    program: Any = None  # not a kernel: never part of a device's batch of launches
    mem_bytes = 0  # (kernels' memory traffic only)

    def __call__(self, handles: list[Any], wait: bool = False, vals: tuple[int, ...] = ()) -> None:
        raise NotImplementedError

    def profiled(self, active: Any, handles: list[Any], vals: tuple[int, ...] = ()) -> float:
        """Run (a profile shows host steps as the time between kernels)."""
        started = time.perf_counter()
        self(handles)
        return time.perf_counter() - started

    def vals(self, values: dict) -> tuple[int, ...]:
        """A host step takes no variables."""
        return ()


@dataclass(frozen=True, eq=False)
class _SendBucket(_HostStep):
    """Copy a bucket's gradients (``handles``, as computed) to the host and start their
    all-reduce: launched like a kernel, so that TinyJit replays it among the kernels."""

    bucket: _Bucket
    exchange: _Exchange
    nbytes: tuple[int, ...]  # each gradient buffer's size in bytes
    written: frozenset[int] = frozenset()  # (as ``Runner.written``): it writes no buffer

    def __call__(self, handles: list[Any], wait: bool = False, vals: tuple[int, ...] = ()) -> None:
        started, bucket = time.perf_counter(), self.bucket
        for view, handle, nbytes in zip(bucket.views, handles, self.nbytes):
            _copyout(view, bucket.device, handle, nbytes)
        bucket.requests = comm.start_allreduce(bucket.flat, "sum")
        bucket.started_after = realize.GlobalCounters.kernel_count - self.exchange.first_kernel
        comm.progress([r for b in self.exchange.buckets for r in b.requests])
        exchange_seconds[0] += time.perf_counter() - started


@dataclass(frozen=True, eq=False)
class _FinishBucket(_HostStep):
    """Wait for a bucket's all-reduce and copy the result (divided by the number of ranks for
    a mean) into the first ``len(members)`` handles; the rest are the gradients it was sent
    from, read by no one here but making TinyJit see that it depends on them."""

    bucket: _Bucket
    mean: bool
    written: frozenset[int]

    def __call__(self, handles: list[Any], wait: bool = False, vals: tuple[int, ...] = ()) -> None:
        started, bucket = time.perf_counter(), self.bucket
        comm.wait(bucket.requests, "sync_gradients", bucket.flat)
        if self.mean:
            bucket.flat /= comm.init().size
        allocator = Device[bucket.device].allocator
        for view, handle in zip(bucket.views, handles):
            if view.nbytes:
                allocator.copyin(handle, view.data.cast("B"))
        exchange_seconds[0] += time.perf_counter() - started


@dataclass
class _Exchange:
    """One ``sync_gradients``: its buckets in the order they start, and the gradients' buffers
    as they are computed."""

    buckets: list[_Bucket]
    first_kernel: int
    computed: dict[int, Buffer] = field(default_factory=dict)
    started: int = 0  # how many buckets have started

    def ready(self, i: int, buffer: Buffer) -> None:
        """Gradient ``i`` is computed: start every bucket, in order, whose gradients all are."""
        self.computed[i] = buffer
        while self.started < len(self.buckets):
            bucket = self.buckets[self.started]
            if any(m not in self.computed for m in bucket.members):
                return
            sources = [self.computed[m] for m in bucket.members]
            _launch(_SendBucket(bucket, self, tuple(b.nbytes for b in sources)), sources)
            self.started += 1


def _launch(runner: Any, buffers: list[Buffer]) -> None:
    """Run a host step on ``buffers`` now, and record it where TinyJit is capturing."""
    runner([b.handle for b in buffers])
    for i in runner.written:  # (counted as a kernel's writes: see ``Buffer.version``)
        buffers[i].version += 1
    if (recording := capture.active()) is not None:
        recording.launched(runner, buffers)


def sync_gradients(
    params: Sequence[Tensor],
    *also: Tensor,
    op: str = "mean",
    bucket_mb: float = buckets.DEFAULT_BUCKET_MB,
) -> list[Tensor]:
    """Replace each ``p.grad`` by its ``op`` ("mean" or "sum") over all ranks; returns them.

    ``also``: tensors of the same step to realize with the gradients (the loss, a metric), so
    the forward pass runs once. Gradients go in buckets of up to ``bucket_mb`` MB, one
    all-reduce each, started while the backward kernels of earlier layers still run (module
    docstring). Works inside TinyJit: a replay exchanges as the captured call did.
    """
    global last_overlap
    params = list(params)
    missing = [i for i, p in enumerate(params) if p.grad is None]
    if missing:
        raise DistributedError(
            f"sync_gradients: parameters {missing} have no .grad; call loss.backward() first "
            "(every rank must pass the same parameters, each with a gradient)"
        )
    if op not in ("mean", "sum"):
        raise UnknownOption(f"sync_gradients takes op='mean' or op='sum', got {op!r}")
    grads: list[Tensor] = [p.grad for p in params]  # type: ignore[misc]
    wires = [reduce_dtype(g.dtype, op) for g in grads]
    comm.agree("sync_gradients", f"op={op} [{_signature(grads)}]")
    order = list(reversed(range(len(grads))))  # last layer first: as backward computes them
    sent = [g if w == g.dtype else g.cast(w) for g, w in zip(grads, wires)]
    sizes = [prod(grads[i].shape) * wires[i].itemsize for i in order]
    kinds = [(wires[i], grads[i].device) for i in order]  # a bucket: one dtype, one device
    plan = buckets.plan_buckets(sizes, kinds, int(bucket_mb * 2**20))
    filled = []
    for members in plan:
        members = [order[k] for k in members]
        flat = np.empty(sum(prod(grads[i].shape) for i in members), wires[members[0]].np)
        views = buckets.unflatten(flat, [(prod(grads[i].shape),) for i in members])
        filled.append(_Bucket(members, flat, views, grads[members[0]].device))
    exchange = _Exchange(filled, realize.GlobalCounters.kernel_count)
    skip = len(also)

    def ready(root: int, buffer: Buffer) -> None:
        if root >= skip:
            exchange.ready(order[root - skip], buffer)

    realize_as_ready([*also, *(sent[i] for i in order)], ready)
    for bucket in filled:
        outs = [Buffer(bucket.device, prod(grads[i].shape), wires[i]) for i in bucket.members]
        sources = [exchange.computed[i] for i in bucket.members]
        written = frozenset(range(len(outs)))
        _launch(_FinishBucket(bucket, op == "mean", written), outs + sources)
        for i, buffer in zip(bucket.members, outs):
            buffer.version += 1
            got = Tensor._wrap(buffer_uop(buffer, grads[i].shape), grads[i].device)
            params[i].grad = got if wires[i] == grads[i].dtype else got.cast(grads[i].dtype)
    last_overlap = Overlap(
        realize.GlobalCounters.kernel_count - exchange.first_kernel,
        [b.started_after for b in filled],
    )
    return [p.grad for p in params]  # type: ignore[misc]


def broadcast_parameters(
    params: Sequence[Tensor], root: int = 0, bucket_mb: float = buckets.DEFAULT_BUCKET_MB
) -> None:
    """Give every rank rank ``root``'s values of ``params`` (in place, with ``assign``).

    Call it once before training, so that the ranks start equal (each initialized its model
    from its own random numbers); BatchNorm's running statistics too, if they matter.
    """
    _not_in_jit("broadcast_parameters")
    params = list(params)
    comm.check_root(root)
    comm.agree("broadcast_parameters", f"root={root} [{_signature(params)}]")
    arrays = [to_host(p) for p in params]
    raw = [a.reshape(-1).view(np.uint8) for a in arrays]  # one bucket holds every dtype
    plan = buckets.plan_buckets([r.nbytes for r in raw], [0] * len(raw), int(bucket_mb * 2**20))
    filled = _exchange(
        plan, raw.__getitem__, lambda flat: comm.start_broadcast(flat, root), "broadcast_parameters"
    )
    for members, flat in filled:
        for i, got in zip(members, buckets.unflatten(flat, [raw[i].shape for i in members])):
            values = got.view(arrays[i].dtype).reshape(arrays[i].shape)
            params[i].assign(from_host(values, params[i].device, params[i].dtype))
    if params:
        Tensor.realize(*params)


class DataParallel:
    """An optimizer whose ``step`` first averages the gradients over the ranks.

    Made on every rank with the same model: it broadcasts rank 0's parameters and buffers
    (BatchNorm's statistics), so training starts equal everywhere.
    """

    def __init__(self, optimizer: Optimizer, bucket_mb: float = buckets.DEFAULT_BUCKET_MB):
        self.optimizer = optimizer
        self.bucket_mb = bucket_mb
        broadcast_parameters(optimizer.params + optimizer.buffers, bucket_mb=bucket_mb)

    def zero_grad(self) -> None:
        """Forget the gradients (the optimizer's ``zero_grad``)."""
        self.optimizer.zero_grad()

    def step(self, *also: Tensor) -> None:
        """Average the gradients over the ranks, then update (``also``: as ``Optimizer.step``)."""
        sync_gradients(
            self.optimizer.params, *also, *self.optimizer.buffers, bucket_mb=self.bucket_mb
        )
        self.optimizer.step()
