"""The CUDA backend against torch on the same GPU, measured in one run; prints ratios.

    python bench/bench_cuda.py            # float32 and float16 matmuls, a fused chain, a sum
    python bench/bench_cuda.py --quick    # fewer repeats

Each workload runs under TinyJit (fusegrad) so that Python's scheduling is not timed, a few
times first (compile, capture), then the median of the repeats, each ended by a synchronize of
the GPU. torch is the peer (cuBLAS; float16 on tensor cores). Ratios > 1: fusegrad is faster.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
import torch
from bench_core import median_seconds  # bench/ is on the path when a script there runs

from fusegrad import Device, Tensor, TinyJit, dtypes
from fusegrad_cuda import driver


def fusegrad_rate(
    work: float, fn: Callable[..., Tensor], inputs: tuple[Tensor, ...], repeats: int
) -> float:
    jitted = TinyJit(lambda *xs: fn(*xs).realize())

    def step() -> None:
        jitted(*inputs)
        driver.synchronize()

    for _ in range(2):  # the jit captures on its second call
        step()
    return work / median_seconds(step, repeats)


def torch_rate(work: float, fn: Callable[[], object], repeats: int) -> float:
    def step() -> None:
        fn()
        torch.cuda.synchronize()

    return work / median_seconds(step, repeats)


def row(name: str, unit: str, ours: float, theirs: float) -> None:
    print(
        f"{name:<30s} fusegrad {ours:10.1f} {unit:<7s} torch {theirs:10.1f} {unit:<7s} "
        f"ratio {ours / theirs:5.2f}x"
    )


def matmul(n: int, half: bool, repeats: int) -> None:
    rng = np.random.default_rng(0)
    a_np, b_np = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    dtype = dtypes.float16 if half else dtypes.float32
    a, b = (Tensor(x, device="CUDA").cast(dtype).realize() for x in (a_np, b_np))
    tdtype = torch.float16 if half else torch.float32
    ta, tb = (torch.from_numpy(x).cuda().to(tdtype) for x in (a_np, b_np))
    # torch would use TF32 for float32 only when asked; it is not asked, as fusegrad has none
    work = 2 * n**3 * 1e-9
    ours = fusegrad_rate(work, lambda a, b: a @ b, (a, b), repeats)
    row(f"matmul {n}² {dtype.name}", "GFLOP/s", ours, torch_rate(work, lambda: ta @ tb, repeats))


def chain(n: int, repeats: int) -> None:
    x_np = np.random.default_rng(1).standard_normal(n, dtype=np.float32)
    x, tx = Tensor(x_np, device="CUDA").realize(), torch.from_numpy(x_np).cuda()
    work = 8 * n * 1e-9  # one read, one write
    ours = fusegrad_rate(work, lambda x: ((x * 2.0 + 1.0) * x - 0.5).relu(), (x,), repeats)
    theirs = torch_rate(work, lambda: ((tx * 2.0 + 1.0) * tx - 0.5).relu(), repeats)
    row(f"fused 5-op chain {n >> 20}M f32", "GB/s", ours, theirs)


def total(n: int, repeats: int) -> None:
    x_np = np.random.default_rng(2).standard_normal(n, dtype=np.float32)
    x, tx = Tensor(x_np, device="CUDA").realize(), torch.from_numpy(x_np).cuda()
    work = 4 * n * 1e-9
    ours = fusegrad_rate(work, lambda x: x.sum(), (x,), repeats)
    row(f"sum {n >> 20}M f32", "GB/s", ours, torch_rate(work, lambda: tx.sum(), repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    repeats = 5 if parser.parse_args().quick else 20
    torch.backends.cuda.matmul.allow_tf32 = False
    runtime = Device["CUDA"]  # fail now, with the reason, if there is no GPU
    gpu = torch.cuda.get_device_name()
    print(f"CUDA {runtime.renderer.arch}, {gpu}; torch {torch.__version__}")
    for n in (1024, 4096):
        matmul(n, half=False, repeats=repeats)
    for n in (1024, 4096):
        matmul(n, half=True, repeats=repeats)
    chain(1 << 26, repeats)
    total(1 << 26, repeats)


if __name__ == "__main__":
    main()
