"""WEBGPU against CPU on small matmuls and elementwise chains, measured in one run, as ratios.

    python bench/bench_webgpu.py            # 64..1024 matmuls, 64K..1M elementwise
    python bench/bench_webgpu.py --quick    # the smallest sizes and the 1024 matmul only

Times are medians of whole realizes (launch, kernel, and for WEBGPU the wait for the queue), the
result read back once per repeat so that WEBGPU's asynchronous submits are counted. Compile time
is excluded: every workload runs once first. Ratios > 1 mean WEBGPU is faster. On a machine
without a GPU, WEBGPU runs on a software adapter (llvmpipe), so expect ratios well below 1.
The 1024 matmul is the tiled plan's measure (core's codegen/tiled.py, docs/gpu-codegen.md).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from fusegrad import Device, Tensor


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    fn()  # warm up: compile, allocate
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compare(
    name: str, unit: str, work: float, build: Callable[[str], Callable[[], object]], repeats: int
) -> None:
    """Print WEBGPU's and CPU's rate for ``work`` units and their ratio."""
    rates = {dev: work / median_seconds(build(dev), repeats) for dev in ("WEBGPU", "CPU")}
    print(
        f"{name:<30s} WEBGPU {rates['WEBGPU']:9.3f} {unit:<8s} CPU {rates['CPU']:9.3f} {unit:<8s} "
        f"ratio {rates['WEBGPU'] / rates['CPU']:7.3f}x"
    )


def matmul(n: int) -> Callable[[str], Callable[[], object]]:
    a_np = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
    b_np = np.random.default_rng(1).standard_normal((n, n), dtype=np.float32)

    def build(device: str) -> Callable[[], object]:
        a, b = Tensor(a_np, device=device), Tensor(b_np, device=device)
        return lambda: (a @ b).numpy()

    return build


def chain(n: int) -> Callable[[str], Callable[[], object]]:
    x_np = np.random.default_rng(2).standard_normal(n, dtype=np.float32)

    def build(device: str) -> Callable[[], object]:
        x = Tensor(x_np, device=device)
        return lambda: ((x * 2.0 + 1.0) * x - 0.5).relu().numpy()

    return build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smallest sizes, fewer repeats")
    args = parser.parse_args()
    repeats = 3 if args.quick else 7
    renderer = Device["WEBGPU"].renderer
    print(f"WEBGPU: {renderer.adapter}; CPU: the C backend")
    for n in (64, 1024) if args.quick else (64, 128, 256, 1024):
        compare(f"matmul {n}x{n} f32", "GFLOP/s", 2 * n**3 * 1e-9, matmul(n), repeats)
    for n in (1 << 16,) if args.quick else (1 << 16, 1 << 20):
        compare(f"5-op chain {n >> 10}K f32", "GB/s", 8 * n * 1e-9, chain(n), repeats)


if __name__ == "__main__":
    main()
