"""One MNIST training step (the examples/mnist.py CNN, batch 128, Adam): fusegrad CPU vs torch CPU.

    python bench/bench_mnist.py [--steps 5] [--memory] [--cold]

Prints the median step time of each, measured in this run after a warm-up step (which for
fusegrad includes compiling every kernel: its time is printed too), and the ratio. ``--cold``
compiles with an empty kernel cache, as a first run does (issue #7: at most 5 s).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

from bench_core import medians_in_turn  # noqa: E402 - bench/ is on the path when a script there runs
from mnist import Model  # noqa: E402

from fusegrad import Tensor, TinyJit, nn  # noqa: E402
from fusegrad.nn.state import get_parameters  # noqa: E402


def fusegrad_step(
    x: np.ndarray, y: np.ndarray, jit: bool = False
) -> tuple[Callable[[], None], float]:
    """A warmed-up training step and the time its first call took (compiles included); with
    ``jit`` the step is a TinyJit (its first two calls run it, later ones replay its kernels),
    as examples/mnist.py runs it."""
    Tensor.manual_seed(0)
    model = Model()
    optimizer = nn.optim.Adam(get_parameters(model), lr=1e-3)
    images, labels = Tensor(x), Tensor(y)

    def step(images: Tensor, labels: Tensor) -> None:
        with Tensor.train():
            optimizer.zero_grad()
            model(images).sparse_categorical_crossentropy(labels).backward()
            optimizer.step()

    run = TinyJit(step) if jit else step
    start = time.perf_counter()
    run(images, labels)
    first = time.perf_counter() - start
    run(images, labels)  # a TinyJit captures on its second call
    return lambda: run(images, labels), first


def torch_step(x: np.ndarray, y: np.ndarray) -> Callable[[], None] | None:
    """The same model and step in torch, warmed up; None without torch."""
    try:
        import torch
    except ImportError:
        return None
    torch.manual_seed(0)
    tnn = torch.nn
    model = tnn.Sequential(
        tnn.Conv2d(1, 32, 5),
        tnn.ReLU(),
        tnn.Conv2d(32, 32, 5),
        tnn.BatchNorm2d(32),
        tnn.ReLU(),
        tnn.MaxPool2d(2),
        tnn.Conv2d(32, 64, 3),
        tnn.ReLU(),
        tnn.Conv2d(64, 64, 3),
        tnn.BatchNorm2d(64),
        tnn.ReLU(),
        tnn.MaxPool2d(2),
        tnn.Flatten(),
        tnn.Linear(576, 10),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    images, labels = torch.from_numpy(x), torch.from_numpy(y).long()

    def step() -> None:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()

    step()
    return step


def batch() -> tuple[np.ndarray, np.ndarray]:
    """The images and labels every side trains on: random, seeded, one batch of 128."""
    rng = np.random.default_rng(0)
    return rng.standard_normal((128, 1, 28, 28), dtype=np.float32), rng.integers(0, 10, 128).astype(
        np.int32
    )


def step_medians(steps: int) -> tuple[dict[str, float], float]:
    """Median seconds per step of fusegrad, fusegrad under TinyJit and torch (when installed),
    one step of each in turn so that a slow spell of the machine hits them all alike; and the
    seconds fusegrad's first step took (compiles included)."""
    x, y = batch()
    eager, first = fusegrad_step(x, y)
    runs = {"fusegrad": eager, "fusegrad TinyJit": fusegrad_step(x, y, jit=True)[0]}
    if (theirs := torch_step(x, y)) is not None:
        runs["torch"] = theirs
    return medians_in_turn(runs, steps), first


def peak_memory(which: str, steps: int) -> float:
    """Peak resident memory (MiB) of a fresh process that runs ``steps`` training steps."""
    import subprocess

    done = subprocess.run(
        [sys.executable, __file__, "--only", which, "--steps", str(steps)],
        check=True,
        capture_output=True,
        text=True,
    )
    return float(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--only", choices=["fusegrad", "torch"], help="run one side (for --memory)")
    parser.add_argument("--memory", action="store_true", help="also compare peak resident memory")
    parser.add_argument("--cold", action="store_true", help="start with an empty kernel cache")
    args = parser.parse_args()
    if args.cold:  # read when the first kernel is compiled, so setting it now is in time
        cache = tempfile.TemporaryDirectory(prefix="fusegrad-cold-cache-")
        os.environ["FUSEGRAD_CACHE"] = cache.name  # removed when ``cache`` is collected, at exit
    if args.only:  # a child of --memory: just train
        x, y = batch()
        run = fusegrad_step(x, y)[0] if args.only == "fusegrad" else torch_step(x, y)
        for _ in range(args.steps):
            run()
        # VmHWM, not ru_maxrss: Linux lets a child inherit its parent's ru_maxrss across exec
        status = open("/proc/self/status").read()
        print(
            int(next(line for line in status.splitlines() if line.startswith("VmHWM")).split()[1])
            / 1024
        )
        return
    seconds, first = step_medians(args.steps)
    ms = {name: t * 1e3 for name, t in seconds.items()}
    print(f"fusegrad first step (compiles included) {first:8.2f} s")
    print(f"fusegrad train step                     {ms['fusegrad']:8.1f} ms")
    print(f"fusegrad train step, TinyJit            {ms['fusegrad TinyJit']:8.1f} ms")
    if "torch" not in ms:
        print("torch is not installed: no ratio")
        return
    print(f"torch    train step                     {ms['torch']:8.1f} ms")
    print(
        f"ratio (fusegrad time / torch time)      {ms['fusegrad'] / ms['torch']:8.2f}x  "
        f"(TinyJit: {ms['fusegrad TinyJit'] / ms['torch']:.2f}x)"
    )
    if args.memory:
        ours_mib, theirs_mib = peak_memory("fusegrad", args.steps), peak_memory("torch", args.steps)
        print(
            f"peak resident memory: fusegrad {ours_mib:.0f} MiB, torch {theirs_mib:.0f} MiB "
            f"({ours_mib / theirs_mib:.2f}x)"
        )


if __name__ == "__main__":
    main()
