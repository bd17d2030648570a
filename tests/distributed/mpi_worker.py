"""What each rank runs in the MPI tests (``test_mpi.py`` starts it with ``mpirun -n 2``).

    mpirun -n 2 python tests/distributed/mpi_worker.py collectives|train|train_jit|die|hang|mismatch

Each scenario prints its findings on rank 0's stdout (``train``: one JSON line of losses and
overlap) and fails with a traceback when a value is wrong. Run with plain ``python``, it is a
world of one.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

import numpy as np

from fusegrad import Tensor, TinyJit, dtypes, nn
from fusegrad import distributed as dist
from fusegrad.nn.state import get_parameters

DTYPES = ["float32", "float64", "int32", "int64", "uint8", "bool", "float16", "bfloat16"]
SIZES = [(), (7,), (3, 5), (1_048_583,)]  # the last crosses comm.CHUNK_BYTES (4 MB)


def values(rank: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Rank ``rank``'s input: every rank can compute every other's, to check the result."""
    rng = np.random.default_rng(rank * 1000 + len(shape) * 10 + int(np.prod(shape)) % 997)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in ("float16", "bfloat16"):  # small integers: exact in both half types
        return rng.integers(-8, 8, shape).astype(np.float32)
    if dtype.startswith(("int", "uint")):
        return rng.integers(0, 100, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def tensor(array: np.ndarray, dtype: str) -> Tensor:
    return Tensor(array, dtype=getattr(dtypes, dtype))


def collectives() -> None:
    """all_reduce, broadcast and all_gather against numpy, for every dtype and odd sizes."""
    rank, size = dist.rank(), dist.world_size()
    checked = 0
    for dtype in DTYPES:
        for shape in SIZES if dtype in ("float32", "uint8") else SIZES[:3]:
            every = [values(r, shape, dtype) for r in range(size)]
            mine = tensor(every[rank], dtype)
            ops = ["max", "min"] if dtype == "bool" else ["sum", "max", "min"]
            ops += ["mean"] if dtype.startswith(("float", "bfloat")) else []
            for op in ops:
                expected = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[op](
                    np.stack(every), axis=0
                )
                got = dist.all_reduce(mine, op)
                assert got.dtype == mine.dtype and got.shape == mine.shape, (dtype, op)
                out = got.float().numpy() if dtype == "bfloat16" else got.numpy()
                np.testing.assert_allclose(out, expected.astype(out.dtype), rtol=1e-6)
                checked += 1
            root = size - 1
            got = dist.broadcast(mine, root=root)
            assert (got.numpy() == tensor(every[root], dtype).numpy()).all(), (dtype, shape)
            if 0 < len(shape) and shape[0] < 1000:
                ragged = [tensor(e[: r + 1], dtype) for r, e in enumerate(every)]
                gathered = dist.all_gather(ragged[rank], axis=0).numpy()
                assert (gathered == np.concatenate([t.numpy() for t in ragged])).all(), dtype
                if len(shape) == 2:
                    gathered = dist.all_gather(mine, axis=1).numpy()
                    expected = np.concatenate([tensor(e, dtype).numpy() for e in every], axis=1)
                    assert (gathered == expected).all(), dtype
            checked += 2
    dist.barrier()
    if rank == 0:
        print(f"checked {checked} collectives on {size} ranks")


class MLP:
    """Two linear layers: small enough to train in a second on any device."""

    def __init__(self) -> None:
        self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu())


def train(steps: int = 10, batch: int = 8, jit: bool = False) -> None:
    """Data-parallel Adam: each rank takes its rows of the same global batch; prints the loss
    of the whole batch (the mean of the ranks') at each step, then how the gradient exchange
    overlapped the backward kernels. With ``jit``, the whole step (forward, backward, exchange,
    update) is one TinyJit function. Each gradient is a bucket of its own (tiny buckets), so
    that there are several all-reduces to overlap."""
    rank, size = dist.rank(), dist.world_size()
    Tensor.manual_seed(rank)  # different on each rank: broadcast_parameters makes them equal
    model = MLP()
    optimizer = dist.DataParallel(nn.optim.Adam(get_parameters(model), lr=0.01), bucket_mb=1e-4)
    rng = np.random.default_rng(0)
    x_all = rng.standard_normal((steps, batch, 8)).astype(np.float32)
    y_all = rng.integers(0, 4, (steps, batch)).astype(np.int32)
    share = batch // size

    def step(x: Tensor, y: Tensor) -> Tensor:
        optimizer.zero_grad()
        loss = model(x).sparse_categorical_crossentropy(y)
        loss.backward()
        optimizer.step(loss)
        return loss

    run = TinyJit(step) if jit else step
    losses = []
    with Tensor.train():
        for i in range(steps):
            rows = slice(rank * share, (rank + 1) * share)
            loss = run(Tensor(x_all[i, rows]), Tensor(y_all[i, rows]))
            losses.append(dist.all_reduce(loss, "mean").item())
    if jit:  # where the replayed exchange starts: among the backward kernels, not after them
        kinds = [type(launch.runner).__name__ for launch in run.launches]
        sends = [k for k, kind in enumerate(kinds) if kind == "_SendBucket"]
        finish = kinds.index("_FinishBucket")  # the first wait for an all-reduce
        between = kinds[sends[0] : finish].count("Runner")  # backward kernels run meanwhile
        overlap = {"sends": len(sends), "kernels_after_first_send": between}
    else:
        last = dist.data_parallel.last_overlap
        assert last is not None
        overlap = {"sends": len(last.started_after), "kernels_after_first_send": last.overlapped}
    if rank == 0:
        print(json.dumps({"losses": losses, "overlap": overlap}))


def die() -> None:
    """Rank 1 exits without a word in the middle of a run of all-reduces."""
    for step in range(100):
        if step == 3 and dist.rank() == 1:
            if os.environ.get("DIE_BY") == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            os._exit(3)
        dist.all_reduce(Tensor([1.0, 2.0]))
    print("finished: the dead rank was not noticed")


def hang() -> None:
    """Rank 1 stays alive but stops taking part: rank 0's all-reduce must time out."""
    dist.all_reduce(Tensor([1.0]))
    if dist.rank() == 1:
        time.sleep(600)
    dist.all_reduce(Tensor([1.0]))
    print("finished: the hanging rank was not noticed")


def mismatch() -> None:
    """The ranks pass different shapes, then different numbers of gradients: every rank
    raises, naming what each passed."""
    rank = dist.rank()
    try:
        dist.all_reduce(Tensor(np.ones((rank + 2, 3), np.float32)))
    except dist.CollectiveMismatch as e:
        print(f"rank {rank}: {e}", flush=True)
    params = [Tensor.ones(3, requires_grad=True) for _ in range(rank + 1)]
    sum(p.sum() for p in params).backward()  # type: ignore[union-attr]
    try:
        dist.sync_gradients(params)
    except dist.CollectiveMismatch as e:
        print(f"rank {rank}: {e}", flush=True)
    dist.barrier()  # the ranks still agree on what comes next: the world is usable


if __name__ == "__main__":
    scenarios = {"collectives": collectives, "train": train, "die": die, "hang": hang}
    scenarios |= {"mismatch": mismatch, "train_jit": lambda: train(jit=True)}
    scenarios[sys.argv[1]]()
