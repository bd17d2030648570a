"""Data-parallel MNIST over 2 MPI ranks against 1 process, and the all-reduce's bandwidth.

    python bench/distributed.py [--steps 20] [--ranks 2] [--megabytes 100] [--bucket-mb 0.1]

Launches its own workers (``mpirun -n RANKS --oversubscribe`` and a plain process), so run it
with plain ``python``. Prints:

- MNIST (examples/mnist.py's CNN, Adam, global batch 128): steps/s of one process with every
  core, of one process with one rank's share of the cores (what a rank would have alone),
  then of the ranks each taking 128/RANKS rows and averaging gradients; with the share of a
  step spent in the gradient exchange's host steps (device to host, starting the all-reduces,
  waiting for what the backward kernels did not hide, host to device; a world of one rank
  copies only), which runs inside the jitted step, overlapping the backward kernels. The
  OpenMP threads of each process are set with ``CPU_THREADS``.
- all-reduce of MEGABYTES of float32 over the ranks: ``fusegrad.distributed.all_reduce`` of a
  CPU Tensor (with its copies), fusegrad's MPI path on a numpy array (non-blocking, in pieces,
  with the deadline; and with ``FUSEGRAD_MPI_TIMEOUT=0``, blocking) and mpi4py's own blocking
  ``Allreduce`` on the same numpy array; each as
  seconds and bus bandwidth (2(n-1)/n bytes per rank per second, as nccl-tests reports it).

Ratios are against the peer in the same run (> 1: fusegrad is faster). On a machine with fewer
cores than ranks x threads, the ranks compete for cores and data parallelism cannot win.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

from mnist import Model, normalise  # noqa: E402

from fusegrad import Tensor, TinyJit, nn  # noqa: E402
from fusegrad import distributed as dist  # noqa: E402
from fusegrad.distributed import comm, data_parallel  # noqa: E402
from fusegrad.nn.state import get_parameters  # noqa: E402

BATCH = 128
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def mnist_worker(steps: int, bucket_mb: float) -> dict:
    """Time ``steps`` data-parallel steps after 3 warm-up steps (the TinyJit captures). The
    whole step (forward, backward, gradient exchange, Adam) is one TinyJit function, the
    exchange overlapping the backward kernels (fusegrad/distributed/data_parallel.py)."""
    rank, size = dist.rank(), dist.world_size()
    Tensor.manual_seed(0)
    model = Model()
    adam = nn.optim.Adam(get_parameters(model), lr=1e-3)
    optimizer = dist.DataParallel(adam, bucket_mb=bucket_mb)
    rng = np.random.default_rng(rank)
    share = BATCH // size

    @TinyJit
    def step(images: Tensor, labels: Tensor) -> Tensor:
        optimizer.zero_grad()
        loss = model(normalise(images)).sparse_categorical_crossentropy(labels)
        loss.backward()
        optimizer.step(loss)
        return loss

    step_times, sync_times = [], []
    with Tensor.train():
        for _ in range(steps + 3):
            images = Tensor(rng.integers(0, 255, (share, 1, 28, 28)).astype(np.uint8))
            labels = Tensor(rng.integers(0, 10, share).astype(np.int32))
            dist.barrier()
            started, exchanged = time.perf_counter(), data_parallel.exchange_seconds[0]
            step(images, labels)
            optimizer.optimizer.params[0].numpy()  # the update has run
            step_times.append(time.perf_counter() - started)
            sync_times.append(data_parallel.exchange_seconds[0] - exchanged)
    step_time = statistics.median(step_times[3:])
    sync_share = statistics.median(sync_times[3:]) / step_time
    overlap = data_parallel.last_overlap
    return {
        "steps_per_s": 1 / step_time,
        "sync_share": sync_share,
        "buckets": len(overlap.started_after) if overlap else 0,
        "overlapped": overlap.overlapped if overlap else 0,
        "kernels": overlap.kernels if overlap else 0,
    }


def bandwidth_worker(megabytes: float) -> dict:
    """Median seconds of each all-reduce of ``megabytes`` MB of float32, over 5 runs."""
    world = comm.init()
    n = int(megabytes * 1e6 / 4)
    array = np.ones(n, np.float32)
    tensor = Tensor(array).realize()

    def fusegrad_tensor() -> None:
        dist.all_reduce(tensor).realize()

    def fusegrad_numpy() -> None:
        comm.wait(comm.start_allreduce(array, "sum"), "all_reduce")

    def fusegrad_no_deadline() -> None:
        world.timeout, deadline = 0.0, world.timeout  # FUSEGRAD_MPI_TIMEOUT=0: blocking calls
        fusegrad_numpy()
        world.timeout = deadline

    def mpi4py_numpy() -> None:
        world.comm.Allreduce(world.mpi.IN_PLACE, array, op=world.mpi.SUM)

    out = {}
    for name, fn in [("fusegrad_tensor", fusegrad_tensor), ("fusegrad_numpy", fusegrad_numpy),
                     ("fusegrad_no_deadline", fusegrad_no_deadline),
                     ("mpi4py_numpy", mpi4py_numpy)]:  # fmt: skip
        fn()
        times = []
        for _ in range(5):
            dist.barrier()
            started = time.perf_counter()
            fn()
            times.append(time.perf_counter() - started)
        out[name] = statistics.median(times)
    return out


def launch(args: list[str], ranks: int | None, threads: int) -> dict:
    """Run this script's worker ``args`` on ``ranks`` ranks (None: plain python); rank 0's
    JSON line."""
    command = [sys.executable, __file__, *args]
    if ranks is not None:
        command = ["mpirun", "-n", str(ranks), "--oversubscribe", "--bind-to", "none", *command]
    env = {**os.environ, **MPI_ENV, "CPU_THREADS": str(threads)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--megabytes", type=float, default=100)
    parser.add_argument(
        "--bucket-mb",
        type=float,
        default=0.1,
        help="gradient bucket size (the CNN's gradients are 0.4 MB: 0.1 makes several buckets "
        "to overlap; PyTorch DDP's default, 25, makes one)",
    )
    parser.add_argument("--worker", choices=["mnist", "bandwidth"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        work = mnist_worker(args.steps, args.bucket_mb) if args.worker == "mnist" else None
        work = work or bandwidth_worker(args.megabytes)
        if dist.rank() == 0:
            print(json.dumps(work))
        return
    cores = len(os.sched_getaffinity(0))
    ranks = args.ranks
    steps = ["--worker", "mnist", "--steps", str(args.steps), "--bucket-mb", str(args.bucket_mb)]
    each = max(1, cores // ranks)
    one = launch(steps, None, cores)
    alone = launch(steps, None, each)
    many = launch(steps, ranks, each)
    print(
        f"{cores} cores; MNIST CNN, Adam, global batch {BATCH}, median of {args.steps} steps, "
        f"gradient buckets of {args.bucket_mb:g} MB"
    )
    rows = [
        (f"1 process, {cores} thread(s)", one),
        (f"1 process, {each} thread(s)", alone),
        (f"{ranks} ranks, {each} thread(s) each", many),
    ]
    for label, got in rows:
        print(
            f"  {label:28s} {got['steps_per_s']:6.2f} steps/s, vs 1 process "
            f"{got['steps_per_s'] / one['steps_per_s']:5.2f}, gradient exchange "
            f"{got['sync_share'] * 100:4.1f}% of a step ({got['buckets']} bucket(s), the first "
            f"sent with {got['overlapped']} of the {got['kernels']} kernels still to run)"
        )
    mb = args.megabytes
    times = launch(["--worker", "bandwidth", "--megabytes", str(mb)], ranks, max(1, cores // ranks))
    bus = 2 * (ranks - 1) / ranks * mb / 1000  # GB each rank sends and receives
    print(f"all-reduce of {mb:g} MB float32 over {ranks} ranks (bus bandwidth)")
    peer = times["mpi4py_numpy"]
    for name, label in [("mpi4py_numpy", "mpi4py Allreduce, numpy"),
                        ("fusegrad_numpy", "fusegrad comm, numpy"),
                        ("fusegrad_no_deadline", "fusegrad comm, no deadline"),
                        ("fusegrad_tensor", "fusegrad all_reduce, Tensor")]:  # fmt: skip
        t = times[name]
        print(f"  {label:28s} {t * 1000:8.1f} ms {bus / t:6.2f} GB/s  vs mpi4py {peer / t:5.2f}")


if __name__ == "__main__":
    main()
