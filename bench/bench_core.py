"""fusegrad (default device) against numpy, measured in one run; prints medians and ratios.

    python bench/bench_core.py            # all workloads
    python bench/bench_core.py --quick    # smaller sizes, fewer repeats
    FUSEGRAD_CPU_ARCH=x86-64-v3 python bench/bench_core.py   # CPU kernels for AVX2, no AVX-512

Workloads: a 1024x1024 float32 matmul (GFLOP/s), a fused 5-op elementwise chain over 16M floats
(GB/s of input+output), a sum over 16M floats (GB/s read), and one eager tiny op (µs).
Ratios > 1 mean fusegrad is faster. Compile time is excluded: every workload runs once first.
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np

from fusegrad import Device, Tensor


def tinygrad_on_cpu() -> None:
    """Point tinygrad at its CPU device and a C compiler it can use: it runs ``clang``, which
    Debian installs as ``clang-15`` (or another version) without the plain name. A ``clang``
    link to it goes first on ``PATH``; ``CC`` is left alone, since fusegrad's CPU compiler
    reads it too (set, it moved fusegrad's kernels to clang and halved their speed)."""
    os.environ.setdefault("DEV", "CPU")
    if shutil.which("clang") is not None:
        return
    found = sorted(glob.glob("/usr/bin/clang-[0-9]*"))
    if found:
        folder = tempfile.mkdtemp(prefix="fusegrad-bench-clang-")
        os.symlink(found[-1], os.path.join(folder, "clang"))
        os.environ["PATH"] = folder + os.pathsep + os.environ.get("PATH", "")


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm up: compile, allocate
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def medians_in_turn(runs: dict[str, Callable[[], object]], steps: int) -> dict[str, float]:
    """Median seconds per call of each of ``runs``, over ``steps`` rounds of one call of each in
    turn, so that a slow spell of the machine hits them all alike (training steps: MNIST's,
    bench_mnist.py; a ResNet's, bench_resnet.py)."""
    samples: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(steps):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def row(name: str, unit: str, ours: float, numpy_: float, higher_is_better: bool = True) -> None:
    ratio = ours / numpy_ if higher_is_better else numpy_ / ours
    print(
        f"{name:<36s} fusegrad {ours:10.2f} {unit:<8s} numpy {numpy_:10.2f} {unit:<8s} ratio "
        f"{ratio:6.2f}x"
    )


def bench_matmul(n: int, repeats: int) -> None:
    a_np = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b_np = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)
    a, b = Tensor(a_np), Tensor(b_np)
    flops = 2 * n**3
    ours = median_seconds(lambda: (a @ b).realize(), repeats)
    theirs = median_seconds(lambda: a_np @ b_np, repeats)
    row(f"matmul {n}x{n} f32", "GFLOP/s", flops / ours * 1e-9, flops / theirs * 1e-9)


def bench_chain(n: int, repeats: int) -> None:
    x_np = np.random.default_rng(2).standard_normal(n, dtype=np.float32)
    x = Tensor(x_np)
    nbytes = 2 * 4 * n  # read x, write the result

    def chain_np() -> np.ndarray:
        return np.maximum((x_np * 2.0 + 1.0) * x_np - 0.5, 0.0)

    ours = median_seconds(lambda: (((x * 2.0 + 1.0) * x - 0.5).relu()).realize(), repeats)
    theirs = median_seconds(chain_np, repeats)
    row(
        f"fused 5-op chain, {n / 2**20:.0f}M f32",
        "GB/s",
        nbytes / ours * 1e-9,
        nbytes / theirs * 1e-9,
    )


def bench_sum(n: int, repeats: int) -> None:
    x_np = np.random.default_rng(3).standard_normal(n, dtype=np.float32)
    x = Tensor(x_np)
    ours = median_seconds(lambda: x.sum().realize(), repeats)
    theirs = median_seconds(lambda: x_np.sum(), repeats)
    row(f"sum of {n / 2**20:.0f}M f32", "GB/s", 4 * n / ours * 1e-9, 4 * n / theirs * 1e-9)


def bench_tiny_op(repeats: int) -> None:
    a, b = Tensor([1.0, 2.0, 3.0, 4.0]), Tensor([4.0, 3.0, 2.0, 1.0])
    a_np, b_np = a.numpy(), b.numpy()
    inner = 200
    ours = median_seconds(lambda: [(a + b).realize() for _ in range(inner)], repeats) / inner
    theirs = median_seconds(lambda: [a_np + b_np for _ in range(inner)], repeats) / inner
    row("eager tiny op (4-elem add)", "us", ours * 1e6, theirs * 1e6, higher_is_better=False)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    args = parser.parse_args()
    repeats = 3 if args.quick else 7
    big = 1 << (20 if args.quick else 24)
    print(f"device {Device.DEFAULT}; medians of {repeats} runs; ratio > 1: fusegrad faster\n")
    bench_matmul(256 if args.quick else 1024, repeats)
    bench_chain(big, repeats)
    bench_sum(big, repeats)
    bench_tiny_op(repeats)


if __name__ == "__main__":
    main()
