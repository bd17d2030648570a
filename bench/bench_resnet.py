"""A small ResNet's training step (CIFAR-sized: 3x32x32 images, batch 32, SGD with momentum):
fusegrad eager and TinyJit against torch, both CPU.

    python bench/bench_resnet.py [--steps 8] [--batch 32]

The model: a 3x3 stem of 32 channels, then four residual blocks of two 3x3 convolutions, each
followed by a batch norm (32, 64, 128 and 256 channels; the last three halve the map with a
stride of 2 and add through a 1x1 convolution), then the mean over the map and a linear layer
of 10. Both sides start from the same weights (torch's, copied), so their losses agree to
float32 rounding; the script prints them. Steps are timed in turn, one of each side after the
other, so that a slow spell of the machine hits all alike; it prints medians, the ratio to
torch and fusegrad's kernels per step.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from bench_core import medians_in_turn

from fusegrad import GlobalCounters, Tensor, TinyJit, nn
from fusegrad.nn.state import get_parameters, load_state_dict

#: (input channels, output channels, stride) of each residual block
BLOCKS = ((32, 32, 1), (32, 64, 2), (64, 128, 2), (128, 256, 2))


class Block:
    """Two 3x3 convolutions with batch norms; the input added back (through a 1x1 convolution
    where the shape changes), then a ReLU."""

    def __init__(self, cin: int, cout: int, stride: int):
        self.c1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.b1 = nn.BatchNorm(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.b2 = nn.BatchNorm(cout)
        self.short = None
        if stride != 1 or cin != cout:
            self.short = (nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm(cout))

    def __call__(self, x: Tensor) -> Tensor:
        y = self.b2(self.c2(self.b1(self.c1(x)).relu()))
        skip = x if self.short is None else self.short[1](self.short[0](x))
        return (y + skip).relu()


class ResNet:
    def __init__(self) -> None:
        self.stem = nn.Conv2d(3, 32, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm(32)
        self.blocks = [Block(*b) for b in BLOCKS]
        self.fc = nn.Linear(256, 10)

    def __call__(self, x: Tensor) -> Tensor:
        x = self.bn(self.stem(x)).relu()
        for block in self.blocks:
            x = block(x)
        return self.fc(x.mean((2, 3)))


def torch_model():  # noqa: ANN201 - torch is optional: no annotation that names it
    import torch

    tnn = torch.nn

    class TorchBlock(tnn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.c1 = tnn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.b1 = tnn.BatchNorm2d(cout)
            self.c2 = tnn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.b2 = tnn.BatchNorm2d(cout)
            self.short = None
            if stride != 1 or cin != cout:
                self.short = tnn.Sequential(
                    tnn.Conv2d(cin, cout, 1, stride, bias=False), tnn.BatchNorm2d(cout)
                )

        def forward(self, x):  # noqa: ANN001, ANN201
            y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
            return torch.relu(y + (x if self.short is None else self.short(x)))

    class TorchResNet(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem, self.bn = tnn.Conv2d(3, 32, 3, 1, 1, bias=False), tnn.BatchNorm2d(32)
            self.blocks = tnn.Sequential(*(TorchBlock(*b) for b in BLOCKS))
            self.fc = tnn.Linear(256, 10)

        def forward(self, x):  # noqa: ANN001, ANN201
            x = self.blocks(torch.relu(self.bn(self.stem(x))))
            return self.fc(x.mean((2, 3)))

    torch.manual_seed(0)
    return TorchResNet()


def batch(size: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    images = rng.standard_normal((size, 3, 32, 32), dtype=np.float32)
    return images, rng.integers(0, 10, size).astype(np.int32)


def fusegrad_step(theirs, x: np.ndarray, y: np.ndarray, jit: bool) -> Callable[[], float]:  # noqa: ANN001
    """A training step of fusegrad's model (with torch's first weights) that returns its loss;
    under TinyJit when ``jit`` (warmed up: its first two calls capture)."""
    model = ResNet()
    # (the same names as torch's: ``short.0`` is the shortcut's convolution on both sides)
    load_state_dict(model, {k: v.detach().numpy().copy() for k, v in theirs.state_dict().items()})
    optimizer = nn.optim.SGD(get_parameters(model), lr=0.01, momentum=0.9)
    images, labels = Tensor(x), Tensor(y)

    def step(images: Tensor, labels: Tensor) -> Tensor:
        with Tensor.train():
            optimizer.zero_grad()
            loss = model(images).cross_entropy(labels)
            loss.backward()
            optimizer.step()
            return loss.realize()

    run = TinyJit(step) if jit else step
    return lambda: run(images, labels).item()


def torch_step(model, x: np.ndarray, y: np.ndarray) -> Callable[[], float]:  # noqa: ANN001
    import torch

    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images, labels = torch.from_numpy(x), torch.from_numpy(y).long()

    def step() -> float:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss.item()

    return step


def measure(steps: int, size: int) -> tuple[dict[str, float], int, dict[str, list[float]]]:
    """Median seconds per step of fusegrad, fusegrad under TinyJit and torch, timed in turn;
    fusegrad's kernels per step; and each side's losses over its first three steps."""
    x, y = batch(size)
    theirs = torch_model()
    # (fusegrad's models copy torch's first weights, before torch's own steps change them)
    runs = {
        "fusegrad": fusegrad_step(theirs, x, y, jit=False),
        "fusegrad TinyJit": fusegrad_step(theirs, x, y, jit=True),
        "torch": torch_step(theirs, x, y),
    }
    losses = {name: [run() for _ in range(3)] for name, run in runs.items()}  # (compiles too)
    GlobalCounters.reset()
    runs["fusegrad"]()
    kernels = GlobalCounters.kernel_count
    return medians_in_turn(runs, steps), kernels, losses


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=8, help="timed steps of each side")
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    times, kernels, losses = measure(args.steps, args.batch)
    for name, values in losses.items():
        print(f"losses of steps 0-2, {name:17s}" + " ".join(f"{v:.4f}" for v in values))
    print(f"ResNet train step, batch {args.batch}, 3x32x32; median of {args.steps} steps")
    for name, seconds in times.items():
        ratio = times["torch"] / seconds
        print(f"  {name:17s} {seconds * 1e3:7.1f} ms/step   torch / this: {ratio:5.2f}x")
    print(f"  fusegrad kernels per step: {kernels}")


if __name__ == "__main__":
    main()
