"""Train a small CNN on MNIST with Adam, report test accuracy, save the weights.

    python examples/mnist.py                      # data from FUSEGRAD_DATA or the download cache
    python examples/mnist.py --data ../shared/data/mnist --steps 1500
    DEV=PYTHON python examples/mnist.py --steps 5  # any device

The model: two 5x5 conv blocks with BatchNorm and max-pool, then 3x3 convs, then a linear layer.
When only part of the data can be found, it says so and trains (or tests) on what there is.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from fusegrad import Device, GlobalCounters, Tensor, TinyJit, nn
from fusegrad.nn.datasets import mnist
from fusegrad.nn.state import get_parameters, get_state_dict, safe_save


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


def progress(step: int, total: int, loss: float, acc: float, started: float) -> None:
    done = int(30 * step / total)
    rate = step / max(time.perf_counter() - started, 1e-9)
    sys.stderr.write(
        f"\r[{'=' * done}{' ' * (30 - done)}] {step}/{total} "
        f"loss {loss:6.3f} acc {acc * 100:5.1f}% {rate:5.2f} steps/s"
    )
    sys.stderr.flush()


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

    started = time.perf_counter()
    with Tensor.train():
        for step in range(1, steps + 1):
            rows = rng.integers(0, x_host.shape[0], batch)
            images = Tensor(x_host[rows], device=x.device)
            labels = Tensor(y_host[rows], device=x.device)
            loss, accuracy = train_step(images, labels)
            if step % 10 == 0 or step == steps:
                progress(step, steps, loss.item(), accuracy.item(), started)
    sys.stderr.write("\n")


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
    args = parser.parse_args()

    x_train, y_train, x_test, y_test = mnist(args.data, allow_partial=True)
    if x_train is None:
        print("no MNIST training images were found: testing an untrained model only")
    elif x_train.shape[0] < 60000:
        print(f"only {x_train.shape[0]} training images were found: training on those")
    print(f"device {Device.DEFAULT}; {args.steps} steps of batch {args.batch}")
    Tensor.manual_seed(0)
    model = Model()
    started = time.perf_counter()
    if x_train is not None:
        train(model, x_train, y_train.int(), args.steps, args.batch, args.lr)
    train_seconds = time.perf_counter() - started
    if x_test is not None:
        accuracy = evaluate(model, x_test, y_test.int())
        print(f"kernels run: {GlobalCounters.kernel_count}")
        print(f"test accuracy {accuracy * 100:.2f}% after {train_seconds:.1f} s of training")
    else:
        print("no MNIST test set was found: accuracy not measured")
    safe_save(get_state_dict(model), args.save)
    print(f"weights saved to {os.path.abspath(args.save)}")


if __name__ == "__main__":
    main()
