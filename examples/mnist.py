"""Train a small CNN on MNIST with Adam, report test accuracy, save the weights.

    python examples/mnist.py                      # data from FUSEGRAD_DATA or the download cache
    python examples/mnist.py --data ../shared/data/mnist --steps 1500
    DEV=PYTHON python examples/mnist.py --steps 5  # any device
    mpirun -n 2 python examples/mnist.py --distributed  # data-parallel over MPI ranks

The model: two 5x5 conv blocks with BatchNorm and max-pool, then 3x3 convs, then a linear layer.
When only part of the data can be found, it says so and trains (or tests) on what there is.

With ``--distributed`` (``pip install 'fusegrad[mpi]'``, see docs/distributed.md), each MPI
rank trains on its share of every global batch of ``--batch`` rows and the gradients are
averaged, so the ranks take the steps one process would take; only rank 0 prints and saves.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from fusegrad import Device, GlobalCounters, Tensor, TinyJit, nn
from fusegrad import distributed as dist
from fusegrad.errors import DownloadError
from fusegrad.nn.datasets import mnist
from fusegrad.nn.state import get_parameters, get_state_dict, safe_save
from fusegrad.progress import progress


class Model:
    """Conv(5x5) x2 + BatchNorm + max-pool, Conv(3x3) x2 + BatchNorm + max-pool, Linear."""

    def __init__(self) -> None:
        self.layers = [
            nn.Conv2d(1, 32, 5),
            Tensor.relu,
            nn.Conv2d(32, 32, 5),
            nn.BatchNorm(32),
            Tensor.relu,
            Tensor.max_pool2d,
            nn.Conv2d(32, 64, 3),
            Tensor.relu,
            nn.Conv2d(64, 64, 3),
            nn.BatchNorm(64),
            Tensor.relu,
            Tensor.max_pool2d,
            lambda x: x.flatten(1),
            nn.Linear(576, 10),
        ]

    def __call__(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


def shown(loss: Tensor, accuracy: Tensor) -> str:
    """The training bar's figures (read back from the device every 10 steps)."""
    return f"loss {loss.item():6.3f} acc {accuracy.item() * 100:5.1f}%"


def normalise(images: Tensor) -> Tensor:
    return (images.float() / 255.0 - 0.1307) / 0.3081


def evaluate(model: Model, x_test: Tensor, y_test: Tensor, batch: int = 1000) -> float:
    correct = 0
    for start in range(0, x_test.shape[0], batch):
        end = min(start + batch, x_test.shape[0])
        logits = model(normalise(x_test[start:end]))
        correct += int((logits.argmax(1) == y_test[start:end]).sum().item())
    return correct / x_test.shape[0]


def train(model: Model, x: Tensor, y: Tensor, steps: int, batch: int, lr: float) -> None:
    optimizer = nn.optim.Adam(get_parameters(model), lr=lr)
    rng = np.random.default_rng(0)
    # batches are picked on the host: a gather from 60000 rows is a copy there, not a kernel
    x_host, y_host = x.numpy(), y.numpy()

    @TinyJit  # from the third step on, only the step's kernels run: no graph, no schedule
    def train_step(images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        optimizer.zero_grad()
        logits = model(normalise(images))
        loss = logits.sparse_categorical_crossentropy(labels)
        loss.backward()
        accuracy = (logits.argmax(1) == labels).float().mean()
        optimizer.step(loss, accuracy)  # in the step's realize: alone, the forward would run again
        return loss, accuracy

    with Tensor.train(), progress(total=steps, desc="train", unit="step") as bar:
        for step in range(1, steps + 1):
            rows = rng.integers(0, x_host.shape[0], batch)
            images = Tensor(x_host[rows], device=x.device)
            labels = Tensor(y_host[rows], device=x.device)
            loss, accuracy = train_step(images, labels)
            if step % 10 == 0 or step == steps:
                bar.postfix(shown(loss, accuracy))
            bar.update()


def train_distributed(
    model: Model, x: Tensor, y: Tensor, steps: int, batch: int, lr: float
) -> None:
    """``train`` over the MPI ranks: every rank draws the same global batch of ``batch`` rows
    and takes its share; the gradients are averaged over the ranks between the backward pass
    and the update, each bucket's all-reduce started while the earlier layers' backward
    kernels still run: the whole step, exchange included, is one TinyJit function."""
    rank, size = dist.rank(), dist.world_size()
    if batch % size:
        raise SystemExit(f"--batch {batch} must be a multiple of the {size} MPI ranks")
    share = slice(rank * (batch // size), (rank + 1) * (batch // size))
    optimizer = dist.DataParallel(nn.optim.Adam(get_parameters(model), lr=lr))  # starts equal
    rng = np.random.default_rng(0)  # the same on every rank: the same global batches
    x_host, y_host = x.numpy(), y.numpy()

    @TinyJit
    def train_step(images: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        optimizer.zero_grad()
        logits = model(normalise(images))
        loss = logits.sparse_categorical_crossentropy(labels)
        loss.backward()
        accuracy = (logits.argmax(1) == labels).float().mean()
        optimizer.step(loss, accuracy)  # averages the gradients over the ranks, then updates
        return loss, accuracy

    shown_here = steps if rank == 0 else 0  # (a bar of 0 steps is never drawn)
    with Tensor.train(), progress(total=shown_here, desc="train", unit="step") as bar:
        for step in range(1, steps + 1):
            rows = rng.integers(0, x_host.shape[0], batch)[share]
            images = Tensor(x_host[rows], device=x.device)
            labels = Tensor(y_host[rows], device=x.device)
            loss, accuracy = train_step(images, labels)
            if step % 10 == 0 or step == steps:
                loss, accuracy = dist.all_reduce(loss, "mean"), dist.all_reduce(accuracy, "mean")
                bar.postfix(shown(loss, accuracy))
            bar.update()
    # the ranks' BatchNorm statistics differ (each saw its own rows): test with rank 0's
    dist.broadcast_parameters(optimizer.optimizer.buffers)


def evaluate_distributed(model: Model, x_test: Tensor, y_test: Tensor) -> float:
    """``evaluate`` with the test set split between the ranks, the counts summed."""
    rank, size = dist.rank(), dist.world_size()
    start, end = (x_test.shape[0] * r // size for r in (rank, rank + 1))
    correct = evaluate(model, x_test[start:end], y_test[start:end]) * (end - start)
    return dist.all_reduce(Tensor([round(correct)]), "sum").item() / x_test.shape[0]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--data", help="folder with the MNIST IDX files (default: FUSEGRAD_DATA or download)"
    )
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.002)
    parser.add_argument("--save", default="mnist.safetensors")
    parser.add_argument(
        "--distributed", action="store_true", help="data-parallel over the ranks of mpirun"
    )
    args = parser.parse_args()
    if args.distributed:
        dist.init()
        if dist.rank() != 0:  # only rank 0 speaks
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (for the life of the process)

    try:
        x_train, y_train, x_test, y_test = mnist(args.data, allow_partial=True)
    except DownloadError as e:  # name this script's own flag, not the library's folder=
        sys.exit(f"{e}\nor run this example with --data DIR, a folder with the 4 MNIST IDX files")
    if x_train is None:
        print("no MNIST training images were found: testing an untrained model only")
    elif x_train.shape[0] < 60000:
        print(f"only {x_train.shape[0]} training images were found: training on those")
    print(f"device {Device.DEFAULT}; {args.steps} steps of batch {args.batch}")
    if args.distributed:
        print(f"data-parallel over {dist.world_size()} MPI ranks")
    Tensor.manual_seed(0)
    model = Model()
    started = time.perf_counter()
    if x_train is not None:
        fit = train_distributed if args.distributed else train
        fit(model, x_train, y_train.int(), args.steps, args.batch, args.lr)
    train_seconds = time.perf_counter() - started
    if x_test is not None:
        test = evaluate_distributed if args.distributed else evaluate
        accuracy = test(model, x_test, y_test.int())
        print(f"kernels run: {GlobalCounters.kernel_count}")
        print(f"test accuracy {accuracy * 100:.2f}% after {train_seconds:.1f} s of training")
    else:
        print("no MNIST test set was found: accuracy not measured")
    if not args.distributed or dist.rank() == 0:
        safe_save(get_state_dict(model), args.save)
        print(f"weights saved to {os.path.abspath(args.save)}")


if __name__ == "__main__":
    main()
