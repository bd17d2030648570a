"""OpenCL (PoCL's CPU device here) against the CPU backend, measured in one run; prints ratios.

    python bench/bench_opencl.py            # matmul 256, 512 and 1024, a fused chain, a sum
    python bench/bench_opencl.py --quick    # fewer repeats

Each workload runs once first (compile, allocate), then the median of the repeats is taken.
Ratios > 1 mean OPENCL is faster than CPU.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import numpy as np
from bench_core import median_seconds  # bench/ is on the path when a script there runs

from fusegrad import Device, Tensor

PEERS = ("OPENCL", "CPU")


def compare(
    name: str, unit: str, work: float, make: Callable[[str], Callable[[], object]], repeats: int
) -> None:
    """Print ``work / seconds`` in ``unit`` on each peer, and OPENCL's ratio to CPU."""
    rates = {dev: work / median_seconds(make(dev), repeats) for dev in PEERS}
    cl, cpu = rates["OPENCL"], rates["CPU"]
    print(
        f"{name:<28s} OPENCL {cl:9.2f} {unit:<8s} CPU {cpu:9.2f} {unit:<8s} ratio {cl / cpu:6.2f}x"
    )


def matmul(n: int) -> Callable[[str], Callable[[], object]]:
    rng = np.random.default_rng(0)
    a_np, b_np = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))

    def make(dev: str) -> Callable[[], object]:
        a, b = Tensor(a_np, device=dev), Tensor(b_np, device=dev)
        return lambda: (a @ b).numpy()

    return make


def chain(n: int) -> Callable[[str], Callable[[], object]]:
    x_np = np.random.default_rng(1).standard_normal(n, dtype=np.float32)

    def make(dev: str) -> Callable[[], object]:
        x = Tensor(x_np, device=dev)
        return lambda: (((x * 2.0 + 1.0) * x - 0.5).relu()).numpy()

    return make


def total(n: int) -> Callable[[str], Callable[[], object]]:
    x_np = np.random.default_rng(2).standard_normal(n, dtype=np.float32)

    def make(dev: str) -> Callable[[], object]:
        x = Tensor(x_np, device=dev)
        return lambda: x.sum().numpy()

    return make


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    repeats = 3 if parser.parse_args().quick else 7
    Device["OPENCL"]  # fail now, with the reason, if there is no OpenCL device
    from fusegrad_opencl.device import open_device

    print(f"OPENCL is {open_device('OPENCL').describe()}; times include the copy back to the host")
    for n in (256, 512, 1024):  # 1024: the tiled plan's measure (docs/gpu-codegen.md)
        compare(f"matmul {n}x{n} f32", "GFLOP/s", 2 * n**3 * 1e-9, matmul(n), repeats)
    n = 1 << 22
    compare(f"fused 5-op chain, {n >> 20}M f32", "GB/s", 8 * n * 1e-9, chain(n), repeats)
    compare(f"sum, {n >> 20}M f32", "GB/s", 4 * n * 1e-9, total(n), repeats)


if __name__ == "__main__":
    main()
