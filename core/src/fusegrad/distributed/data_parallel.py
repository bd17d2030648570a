"""Data-parallel training: every rank holds the whole model and trains on its share of each
batch; the gradients are averaged over the ranks before each step, so every rank takes the
same step, the one a single process would take on the whole batch.

    dist.broadcast_parameters(params)         # once: every rank starts from rank 0's weights
    loss.backward()
    dist.sync_gradients(params)               # each step, between backward and the update
    optimizer.step()

or ``DataParallel(optimizer)``, whose ``step`` does both. The backward pass is one lazy graph,
computed in one schedule: the gradients are realized together, then copied to the host in
buckets (``buckets.py``), each bucket's all-reduce started as soon as it is filled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import prod
from typing import TYPE_CHECKING, Any

import numpy as np

from fusegrad.distributed import buckets, comm
from fusegrad.distributed.collectives import from_host, reduce_dtype, to_host
from fusegrad.distributed.errors import DistributedError
from fusegrad.engine import capture
from fusegrad.errors import JitError, UnknownOption
from fusegrad.tensor import Tensor

if TYPE_CHECKING:
    from fusegrad.nn.optim import Optimizer


def _not_in_jit(name: str) -> None:
    """TinyJit replays kernels only: an exchange with the other ranks would silently vanish."""
    if capture.active() is not None:
        raise JitError(
            f"{name} cannot run inside a TinyJit function: a replay runs kernels only, and "
            "would skip the exchange with the other ranks. Jit the forward and backward pass "
            f"(returning the gradients), call {name} outside, then jit the optimizer step"
        )


def _signature(tensors: Sequence[Tensor]) -> str:
    return ", ".join(f"{t.dtype.name} {tuple(t.shape)}" for t in tensors)


def _start_sum(flat: np.ndarray) -> list[Any]:
    return comm.start_allreduce(flat, "sum")


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


def sync_gradients(
    params: Sequence[Tensor],
    *also: Tensor,
    op: str = "mean",
    bucket_mb: float = buckets.DEFAULT_BUCKET_MB,
) -> list[Tensor]:
    """Replace each ``p.grad`` by its ``op`` ("mean" or "sum") over all ranks; returns them.

    ``also``: tensors of the same step to realize with the gradients (the loss, a metric), so
    the forward pass runs once. Gradients go in buckets of up to ``bucket_mb`` MB, one
    all-reduce each.
    """
    _not_in_jit("sync_gradients")
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
    sent = [g if w == g.dtype else g.cast(w) for g, w in zip(grads, wires)]
    Tensor.realize(*also, *sent)
    comm.agree("sync_gradients", f"op={op} [{_signature(grads)}]")
    sizes = [prod(g.shape) * w.itemsize for g, w in zip(grads, wires)]
    plan = buckets.plan_buckets(sizes, wires, int(bucket_mb * 2**20))
    filled = _exchange(plan, lambda i: to_host(sent[i]), _start_sum, "sync_gradients")
    size = comm.init().size
    for members, flat in filled:
        if op == "mean":
            flat /= size
        for i, values in zip(members, buckets.unflatten(flat, [grads[i].shape for i in members])):
            out = from_host(values, grads[i].device, wires[i])
            params[i].grad = out if wires[i] == grads[i].dtype else out.cast(grads[i].dtype)
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
