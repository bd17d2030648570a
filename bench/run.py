"""Every speed workload of the project, fusegrad against the peers installed, in one run.

    python bench/run.py [--quick] [--beam N] [--kernels-only]

Peers: numpy, torch (2.13.0) and tinygrad (0.14.0), each when importable. For each workload it
prints medians and the ratio of each peer's time to fusegrad's (> 1: fusegrad is faster), plus
this machine's copy bandwidth and a measured FMA peak, so the figures can be read against the
hardware. Compile time is excluded (each workload runs once before timing). Each matmul also
gets a paired ratio to numpy (``paired_ratios``: both timed in each of 16 rounds), steadier on
a noisy machine than the ratio of two medians. The MNIST train
step (batch 128, Adam) is measured as bench/bench_mnist.py does, one step of each side in turn,
and a small ResNet's (batch 32, bench/bench_resnet.py) likewise; bench_mnist.py also measures
the cold first step and peak memory. The GPT step (examples/gpt.py)
comes from bench/bench_gpt.py, with kernels and MB moved per step (against the least a step
needs, bench/gpt_minimum.py) and the first step of a fresh process; the last line is a matmul
on each grid device that runs here, against the CPU backend.

    FUSEGRAD_CPU_ARCH=x86-64-v3 python bench/run.py --kernels-only

builds fusegrad's CPU kernels for another processor than this one (a ``-march`` name; here AVX2
and FMA without AVX-512), to measure on an AVX-512 machine what most laptops run. The peers
keep their own choice of instructions; with ``--avx2`` every contender runs AVX2 code, as on
an AVX2 machine: fusegrad's kernels are built for x86-64-v3, numpy's OpenBLAS takes its Haswell
kernels (``OPENBLAS_CORETYPE``), torch its AVX2 paths (``ATEN_CPU_CAPABILITY``, and oneDNN's
and MKL's instruction limits).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable

#: what ``--avx2`` sets before numpy, torch or fusegrad load (each reads it once, at import)
AVX2_ENVIRONMENT = {
    "FUSEGRAD_CPU_ARCH": "x86-64-v3",
    "OPENBLAS_CORETYPE": "Haswell",
    "ATEN_CPU_CAPABILITY": "avx2",
    "DNNL_MAX_CPU_ISA": "AVX2",
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",
}
if "--avx2" in sys.argv:
    os.environ.update(AVX2_ENVIRONMENT)

# (after the environment above: these read it as they load)
import numpy as np  # noqa: E402
from bench_core import tinygrad_on_cpu  # noqa: E402 - bench/ is on the path when a script there runs

from fusegrad import Device, Tensor, TinyJit  # noqa: E402
from fusegrad.helpers import context  # noqa: E402

Peer = dict[str, Callable[[], object]]


def median(fn: Callable[[], object], repeats: int, inner: int = 1) -> float:
    """``fn``'s median time over ``repeats`` timed runs of ``inner`` calls, after one untimed
    (without the pause between contenders: a peak is measured on a core kept busy)."""
    return medians({"fn": fn}, repeats, inner, rounds=1, settle=0.0)["fn"]


#: seconds each turn waits first: a peer's worker threads busy-wait after its call (OpenBLAS's
#: for about 0.1 s), and on a 2-core machine they took a core from the next contender's threads
#: (a 1024 matmul ran at half speed in the 0.1 s after numpy's: 1.03x numpy's speed measured
#: so, 1.8x with this pause, numpy's own time unchanged)
SETTLE_SECONDS = 0.2


def medians(
    fns: dict[str, Callable[[], object]],
    repeats: int,
    inner: int = 1,
    rounds: int = 3,
    settle: float = SETTLE_SECONDS,
) -> dict[str, float]:
    """Each contender's median of about ``repeats`` timed runs, taken in ``rounds`` turns: in
    each, every contender waits ``settle`` seconds for the previous one's worker threads to go
    idle, runs once untimed, then its share of the timed runs. Turns spread this machine's
    slow spells over all of them instead of one."""
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            time.sleep(settle)
            fn()
            for _ in range(-(-repeats // rounds)):
                start = time.perf_counter()
                for _ in range(inner):
                    fn()
                samples[name].append((time.perf_counter() - start) / inner)
    return {name: statistics.median(t) for name, t in samples.items()}


#: rounds of ``paired_ratios`` for the matmuls (about 10 s each)
PAIRED_ROUNDS = 16


def _seconds(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def paired_ratios(
    ours: Callable[[], object], theirs: Callable[[], object], rounds: int
) -> list[float]:
    """``theirs`` time / ``ours`` in each of ``rounds`` rounds: each times both, after a pause
    (``SETTLE_SECONDS``) and one untimed call, as the best of a few calls, who goes first
    alternating. A slow spell of this machine then hits one round's pair, not one contender:
    on a 2-core VM whose numpy 1024² moved 179-219 GFLOP/s between runs, the medians of
    ``medians`` put fusegrad at 0.84-1.09x numpy, the paired median at 0.98x (quartiles
    0.96-0.99)."""
    ratios = []
    for r in range(rounds):
        best = {}
        for name, fn in (("ours", ours), ("theirs", theirs))[:: 1 if r % 2 == 0 else -1]:
            time.sleep(SETTLE_SECONDS)
            fn()
            first = _seconds(fn)
            calls = max(1, min(5, int(0.05 / max(first, 1e-9))))  # about 50 ms more, 1 to 5 calls
            best[name] = min([first] + [_seconds(fn) for _ in range(calls)])
        ratios.append(best["theirs"] / best["ours"])
    return ratios


def peers() -> dict[str, object]:
    found: dict[str, object] = {}
    try:
        import torch

        torch.set_num_threads(max(1, torch.get_num_threads()))
        found["torch"] = torch
    except ImportError:
        pass
    # tinygrad on its CPU device: left alone it picks OpenCL where that works, and writes its
    # choice into DEV, which fusegrad reads too
    previous = os.environ.get("DEV")
    os.environ["DEV"] = "CPU"
    tinygrad_on_cpu()
    try:
        import tinygrad

        tinygrad.Tensor([1.0]).realize()  # its CPU device needs clang (or LLVM) installed
        found["tinygrad"] = tinygrad
    except ImportError:
        pass
    except Exception as e:  # installed, but no device it can use here: say so, go on without
        print(f"tinygrad left out: it cannot run here ({e})")
    finally:
        if previous is None:
            del os.environ["DEV"]
        else:
            os.environ["DEV"] = previous
    return found


#: seconds in each unit a time is printed in (``report`` without an amount)
TIME_UNITS = {"us": 1e-6, "ms": 1e-3}


def report(name: str, unit: str, amount: float, times: dict[str, float]) -> None:
    """A line of rates (``amount`` per second, in ``unit``) or, without an amount, of times in
    ``unit`` ("us" or "ms"), with each peer's ratio to fusegrad."""
    ours = times["fusegrad"]
    scale = TIME_UNITS.get(unit, 1.0)
    cells = [
        f"fusegrad {amount / ours:9.2f} {unit}"
        if amount
        else f"fusegrad {ours / scale:9.1f} {unit}"
    ]
    for peer, t in times.items():
        if peer != "fusegrad":
            value = f"{amount / t:9.2f}" if amount else f"{t / scale:9.1f}"
            cells.append(f"{peer} {value} ({t / ours:5.2f}x)")
    print(f"{name:<28s} " + "   ".join(cells))


def workloads(n_big: int, matmul_sizes: tuple[int, ...], found: dict) -> list[tuple]:
    """(name, unit, amount per run, {peer: setup -> fn})"""
    rng = np.random.default_rng(0)
    out = []
    for n in matmul_sizes:
        a, b = rng.standard_normal((n, n), np.float32), rng.standard_normal((n, n), np.float32)
        out.append((f"matmul {n}x{n} f32", "GFLOP/s", 2 * n**3 * 1e-9, a, b, lambda x, y: x @ y))
    x = rng.standard_normal(n_big, np.float32)
    out.append(
        (
            f"5-op chain {n_big / 2**20:.1f}M",
            "GB/s",
            8 * n_big * 1e-9,
            x,
            None,
            lambda x, _: (
                ((x * 2.0 + 1.0) * x - 0.5).relu()
                if not isinstance(x, np.ndarray)
                else np.maximum((x * 2.0 + 1.0) * x - 0.5, 0)
            ),
        )
    )
    out.append(
        (f"sum {n_big / 2**20:.1f}M f32", "GB/s", 4 * n_big * 1e-9, x, None, lambda x, _: x.sum())
    )
    half = x.astype(np.float16)  # read and written as 16 bits, computed in float32
    out.append(
        (
            f"f16 x*2+1 {n_big / 2**20:.1f}M",
            "GB/s",
            4 * n_big * 1e-9,
            half,
            None,
            lambda x, _: x * 2 + 1,
        )
    )
    out.append(
        (
            f"sin {n_big / 2**20:.1f}M f32",
            "GB/s",
            8 * n_big * 1e-9,
            x,
            None,
            lambda x, _: np.sin(x) if isinstance(x, np.ndarray) else x.sin(),
        )
    )
    c = x[: n_big // 16]  # (a running sum: the masked sum of n*n took 34 s for 2**20)
    out.append(
        (
            f"cumsum {c.size / 2**20:.1f}M f32",
            "GB/s",
            8 * c.size * 1e-9,
            c,
            None,
            lambda x, _: np.cumsum(x) if isinstance(x, np.ndarray) else x.cumsum(0),
        )
    )
    s = rng.standard_normal((4096, 4096) if n_big > 1 << 20 else (512, 512), np.float32)
    out.append((f"softmax {s.shape[0]}x{s.shape[1]}", "GB/s", 8 * s.size * 1e-9, s, None, _softmax))
    q, k = (rng.standard_normal((4, 4, 128, 64), np.float32) for _ in range(2))
    flops = 2 * 4 * 4 * 128 * 128 * 64 * 1e-9
    out.append(("attention q@k^T 4x4x128x64", "GFLOP/s", flops, q, k, _scores))
    # a ResNet's last stage on one image: 7x7 positions (a tile of 7 rows since this session)
    image = rng.standard_normal((1, 512, 7, 7), np.float32)
    weight = (rng.standard_normal((512, 512, 3, 3)) * 0.05).astype(np.float32)
    flops = 2 * 512 * 49 * 512 * 9 * 1e-9
    out.append(("conv 3x3 512ch 7x7, batch 1", "GFLOP/s", flops, image, weight, _conv))
    # an embedding's gradient over GPT-2's vocabulary: 512 rows added into a 50,257 x 768 table
    ids = rng.integers(0, 50257, 512).astype(np.int32)
    rows = rng.standard_normal((512, 768), np.float32)
    out.append(("index_add 512 into 50257x768", "ms", 0, ids, rows, _index_add))
    return out


def _conv(x, w):
    """conv2d, padding 1; numpy's as windows contracted with the weight (an im2col product)."""
    if not isinstance(x, np.ndarray):
        return x.conv2d(w, padding=1) if hasattr(x, "conv2d") else _torch_conv(x, w)
    windows = np.lib.stride_tricks.sliding_window_view(
        np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3)
    )  # (N, C, H, W, 3, 3)
    return np.einsum("nchwij,ocij->nohw", windows, w, optimize=True)


def _torch_conv(x, w):
    import torch

    return torch.nn.functional.conv2d(x, w, padding=1)


def _index_add(ids, rows):
    """Rows added into a zero table at ``ids`` (repeats add up), as each library spells it."""
    if isinstance(ids, np.ndarray):
        table = np.zeros((50257, rows.shape[1]), np.float32)
        np.add.at(table, ids, rows)
        return table
    if hasattr(ids, "index_add_"):  # torch
        return rows.new_zeros(50257, rows.shape[1]).index_add_(0, ids.long(), rows)
    return type(rows).zeros(50257, rows.shape[1]).index_add(0, ids, rows)


def _scores(q, k):
    """Attention's scores ``q @ k^T`` (4, 4, 128, 64) @ (4, 4, 64, 128), as each library spells
    the transpose."""
    return q @ (np.swapaxes(k, -1, -2) if isinstance(k, np.ndarray) else k.transpose(-1, -2))


def _softmax(x, _):
    if isinstance(x, np.ndarray):
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    return x.softmax(-1) if hasattr(x, "softmax") else x


def run_workload(name, unit, amount, a, b, fn, found, repeats) -> None:
    ta, tb = Tensor(a), Tensor(b) if b is not None else None

    def ours() -> object:
        # (a copy of an unchanged operand, a weight's panels, is made at every call, as the
        # peers make theirs: an eager run otherwise keeps it; KEEP_COPIES in helpers.Context)
        with context(KEEP_COPIES=0):
            return fn(ta, tb).realize()

    contenders: dict[str, Callable[[], object]] = {"fusegrad": ours, "numpy": lambda: fn(a, b)}
    if (torch := found.get("torch")) is not None:
        xa, xb = torch.from_numpy(a), torch.from_numpy(b) if b is not None else None
        contenders["torch"] = lambda: fn(xa, xb)
    if (tg := found.get("tinygrad")) is not None:
        ga, gb = tg.Tensor(a).realize(), tg.Tensor(b).realize() if b is not None else None
        try:
            fn(ga, gb).realize()
            contenders["tinygrad"] = lambda: fn(ga, gb).realize()
        except Exception:  # (an op it lacks: index_add)
            pass
    # (a call of the scores takes ~0.2 ms: each timed run is 20 of them, as for a tiny op)
    inner = 20 if fn is _scores else 1
    report(name, unit, amount, medians(contenders, repeats, inner))
    if name.startswith("matmul"):  # the ratio that moves most between runs, measured paired
        ratios = paired_ratios(contenders["fusegrad"], contenders["numpy"], PAIRED_ROUNDS)
        low, mid, high = statistics.quantiles(ratios, n=4)
        spread = f"quartiles {low:.2f}-{high:.2f}, {len(ratios)} rounds"
        print(f"  paired with numpy          {mid:5.2f}x ({spread})")
    if fn is _conv:  # inference on a model's weight: its copy into panels kept between calls
        kept = {"fusegrad": lambda: fn(ta, tb).realize()}
        if "torch" in contenders:
            kept["torch"] = contenders["torch"]
        report("  the same, weight copy kept", unit, amount, medians(kept, repeats, inner))
    if fn is _scores:  # also replayed by TinyJit (as a model's step runs it), against torch eager
        jit = TinyJit(lambda x, y: fn(x, y).realize())
        replayed = {"fusegrad": lambda: jit(ta, tb)}
        if "torch" in contenders:
            replayed["torch"] = contenders["torch"]
        report("  the same, TinyJit", unit, amount, medians(replayed, repeats, inner))


def eager_and_jit(found: dict, repeats: int) -> None:
    a, b = Tensor([1.0, 2.0, 3.0, 4.0]), Tensor([4.0, 3.0, 2.0, 1.0])
    times = {"fusegrad": median(lambda: (a + b).realize(), repeats, 500)}
    an, bn = a.numpy(), b.numpy()
    times["numpy"] = median(lambda: an + bn, repeats, 500)
    if (torch := found.get("torch")) is not None:
        ta, tb = torch.from_numpy(an), torch.from_numpy(bn)
        times["torch"] = median(lambda: ta + tb, repeats, 500)
    if (tg := found.get("tinygrad")) is not None:
        ga, gb = tg.Tensor(an).realize(), tg.Tensor(bn).realize()
        times["tinygrad"] = median(lambda: (ga + gb).realize(), repeats, 20)
    report("eager tiny op (4-elem add)", "us", 0, times)
    jit = TinyJit(lambda x, y: ((x + y) * 2 - 1).realize())
    times = {"fusegrad": median(lambda: jit(a, b), repeats, 500)}
    if (tg := found.get("tinygrad")) is not None:
        gjit = tg.TinyJit(lambda x, y: ((x + y) * 2 - 1).realize())
        times["tinygrad"] = median(lambda: gjit(ga, gb), repeats, 100)
    report("TinyJit replay, 3 ops", "us", 0, times)


def machine_figures(n_big: int) -> float | None:
    """Copy bandwidth (numpy) and an FMA peak measured with a fusegrad kernel on every core."""
    x = np.random.default_rng(0).standard_normal(n_big, np.float32)
    y = np.empty_like(x)  # preallocated: a fresh array would time page faults too
    copy = median(lambda: np.copyto(y, x), 5)
    print(f"machine: copy bandwidth {8 * n_big / copy * 1e-9:.1f} GB/s (numpy, read + write)")
    peak = _fma_peak()
    if peak:
        print(f"machine: FMA peak {peak:.1f} GFLOP/s (float32, all cores, measured)")
    return peak


FMA_SOURCE = """
typedef float vec __attribute__((vector_size(%(bytes)d)));
void fma_peak(float* out, int reps) {
  #pragma omp parallel for
  for (int t = 0; t < 64; t++) {
    vec a[%(chains)d]; vec m = {0}; vec c = {0};
    for (int k = 0; k < %(width)d; k++) { m[k] = 1.0f + 1e-7f * k; c[k] = 1e-7f; }
    for (int i = 0; i < %(chains)d; i++) a[i] = m + (float)i;
    for (int r = 0; r < reps; r++)
      for (int i = 0; i < %(chains)d; i++) a[i] = a[i] * m + c;
    float s = 0; for (int i = 0; i < %(chains)d; i++) for (int k = 0; k < %(width)d; k++) s +=
    a[i][k];
    out[t] = s;
  }
}
"""


def _fma_peak() -> float | None:
    """Built with its own flags (-O3, contraction on): the machine's peak, whatever our own
    compiler flags are."""
    import ctypes
    import shutil
    import subprocess
    import tempfile

    cc = shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        return None
    # independent chains of the host's widest vectors, as many as its registers hold with room
    # to spare (AVX2: 12 of 8 floats; a 64-byte vector there is two registers, and spills)
    renderer = Device["CPU"].renderer
    width, chains = renderer.vector_bytes // 4, min(12, renderer.vector_registers - 4)
    with tempfile.TemporaryDirectory() as folder:
        with open(f"{folder}/fma.c", "w") as f:
            f.write(FMA_SOURCE % {"bytes": 4 * width, "width": width, "chains": chains})
        flags = ["-O3", "-march=native", "-ffp-contract=fast", "-fopenmp", "-fPIC", "-shared"]
        if subprocess.run([cc, *flags, "-o", f"{folder}/fma.so", f"{folder}/fma.c"]).returncode:
            return None
        fn = ctypes.CDLL(f"{folder}/fma.so").fma_peak
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int]
    out = np.zeros(64, np.float32)
    reps = 4000  # about 0.2 s a run
    # a peak is the fastest run seen: the first runs on a quiet core were up to 6x slower here
    # (frequency ramp, the virtual machine's scheduling), and a whole second of runs may get
    # half the machine (240 instead of 470 GFLOP/s); many short runs, spread out, catch it whole
    seconds = min(median(lambda: fn(out.ctypes.data, reps), 1) for _ in range(15))
    return 64 * reps * chains * width * 2 / seconds * 1e-9


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument(
        "--kernels-only",
        action="store_true",
        help="only the single-op workloads (matmul, chain, sum, softmax, attention scores): no "
        "model steps, no grid devices (e.g. to compare CPU targets with FUSEGRAD_CPU_ARCH)",
    )
    parser.add_argument(
        "--avx2",
        action="store_true",
        help="every contender on AVX2 code (fusegrad for x86-64-v3, numpy and torch limited to "
        "AVX2), as on a machine without AVX-512",
    )
    parser.add_argument(
        "--beam",
        type=int,
        default=0,
        metavar="N",
        help="also time each matmul with BEAM=N (the search takes minutes)",
    )
    args = parser.parse_args()
    n_big = 1 << 20 if args.quick else 1 << 24
    sizes = (256,) if args.quick else (1024, 2048)
    repeats = 3 if args.quick else 5
    # the machine first: a peer's runtime, once loaded, may keep threads that take a core
    # (the FMA peak read 240 instead of 470 GFLOP/s after tinygrad's first realize)
    peak = machine_figures(n_big)
    found = peers()
    print(
        f"\nfusegrad on {Device.DEFAULT}; peers: numpy {np.__version__}"
        + "".join(f", {k} {v.__version__}" for k, v in found.items() if hasattr(v, "__version__"))
    )
    print("ratios in brackets: peer time / fusegrad time (> 1: fusegrad faster)\n")
    for work in workloads(n_big, sizes, found):
        run_workload(*work, found, repeats)
    if args.beam:
        beam_matmuls(sizes, args.beam, peak, repeats)
    if args.kernels_only:
        return
    eager_and_jit(found, repeats)
    mnist_step(repeats)
    resnet_step(repeats)
    gpt_step(args.quick)
    grid_matmuls(512 if args.quick else 1024, repeats)


def beam_matmuls(sizes: tuple[int, ...], beam: int, peak: float | None, repeats: int) -> None:
    """Each matmul with its kernel found by BEAM search (searched once, untimed), as a
    fraction of the FMA peak (issue #7: at least 0.6)."""
    from fusegrad import context

    rng = np.random.default_rng(0)
    for n in sizes:
        a, b = (Tensor(rng.standard_normal((n, n), np.float32)) for _ in range(2))
        with context(BEAM=beam):
            (a @ b).realize()  # the search, then the winner is compiled and cached
            seconds = median(lambda a=a, b=b: (a @ b).realize(), repeats)
        flops = 2 * n**3 / seconds * 1e-9
        share = f" = {flops / peak:.2f} of the FMA peak" if peak else ""
        print(f"{f'matmul {n}x{n} f32 BEAM={beam}':<28s} fusegrad {flops:9.2f} GFLOP/s{share}")


def gpt_step(quick: bool) -> None:
    """examples/gpt.py's training step, eager and TinyJit, against torch's and tinygrad's
    (bench/bench_gpt.py): ms/step, kernels/step and MB moved against the least a step needs
    (bench/gpt_minimum.py), and the first step with an empty cache."""
    from bench_gpt import cold_first_step, gpt, measure, minimum_lines

    figures = measure(gpt.Config(), 3, 4 if quick else 8)
    times = {name: statistics.median(t) for name, t in figures.times.items()}
    report("GPT train step (2x256, T=128)", "ms", 0, times)
    counts = (f"{n} {c} ({mb:.0f} MB)" for n, (c, mb) in figures.kernels.items())
    print(f"{'  kernels/step (MB moved)':<28s} " + "   ".join(counts))
    for line in minimum_lines(gpt.Config(), figures.kernels):
        print("  " + line)
    cold = {name: cold_first_step(f"{name}_step") for name in ("fusegrad", "tinygrad")}
    print(
        f"{'  first step, empty cache':<28s} "
        + "   ".join(f"{name} {s:.2f} s" for name, s in cold.items() if s is not None)
    )


def grid_matmuls(n: int, repeats: int) -> None:
    """An n x n float32 matmul on each grid device that runs here (OpenCL on PoCL, WebGPU on
    llvmpipe: both on this machine's cores), against the CPU backend on the same cores."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), np.float32) for _ in range(2))
    fns = {}
    for device in ("CPU", "OPENCL", "WEBGPU"):
        spec = Device.specs().get(device)
        if spec is None or spec.unavailable() is not None:
            continue
        try:
            ta, tb = Tensor(a, device=device), Tensor(b, device=device)
            fn = fns[device] = lambda ta=ta, tb=tb: (ta @ tb).numpy()  # (waits for the result)
            fn()  # (compiles, or fails here)
        except Exception as e:  # noqa: BLE001 - a device that cannot open here is left out
            print(f"  {device} left out: {type(e).__name__}: {e}"[:200])
            fns.pop(device, None)
    # in turns, each after a pause: the CPU backend's OpenMP workers spin on after its calls,
    # and on 2 cores PoCL's threads timed right after them ran at half speed (0.28x the CPU
    # backend's speed in one run, 0.79x alone)
    times = medians(fns, repeats)
    flops = 2 * n**3 * 1e-9
    cells = [
        f"{dev} {flops / t:8.2f} GFLOP/s ({t / times['CPU']:5.2f}x CPU's time)"
        for dev, t in times.items()
    ]
    print(f"{f'matmul {n}x{n} f32 by device':<28s} " + "   ".join(cells))


def resnet_step(repeats: int) -> None:
    """A small ResNet's training step (bench/bench_resnet.py), eager and TinyJit, against
    torch's from the same weights; and fusegrad's kernels per step."""
    from bench_resnet import measure

    try:
        times, kernels, _ = measure(repeats, 32)
    except ImportError:  # (it trains torch's twin too)
        return
    times["TinyJit"] = times.pop("fusegrad TinyJit")
    report("ResNet train step (b=32)", "ms", 0, times)
    print(f"  kernels/step               fusegrad {kernels}")


def mnist_step(repeats: int) -> None:
    """The examples/mnist.py CNN's training step, eager and TinyJit, against torch's."""
    from bench_mnist import step_medians

    times = step_medians(repeats)[0]
    times["TinyJit"] = times.pop("fusegrad TinyJit")
    report("MNIST train step (b=128)", "ms", 0, times)


if __name__ == "__main__":
    main()
