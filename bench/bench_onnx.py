"""Real ONNX models from pip packages: fusegrad CPU against onnxruntime on 1 and 2 threads.

    python bench/bench_onnx.py [--repeats 20] [--models det,rec,cls,silero_vad] [--det-size 640]
                               [--gap-ms 0]
                               [--fusegrad-threads N]

Models: PP-OCRv4 detection (1x3x640x640 by default), recognition (1x3x48x320) and the angle
classifier (1x3x48x192) from rapidocr-onnxruntime, and the silero-vad exports from silero-vad
(one 576-sample chunk at 16 kHz). For each it prints the median time per call of fusegrad
(under TinyJit when the model allows it, else the plain runner), onnxruntime with
``intra_op_num_threads`` 1 and 2, and the ratios ort / fusegrad (> 1: fusegrad is faster).
Every contender runs once before timing (fusegrad's compile and capture are excluded; its first
call is printed separately). Each contender runs in a process of its own, twice, the processes
taking turns (fusegrad, ort1, ort2, then again), and its calls of both processes give the
median: in one process, each library's idle threads spin on the cores after its call and stall
the next library's (fusegrad's cls 2.0 ms alone, 4.2-5.2 ms after onnxruntime's calls).
``--same-process`` times them in one process instead, taking turns in each round. The fastest
call of each is printed too, with its ratios: on a machine with busy neighbours the medians
carry them.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fusegrad import Tensor, TinyJit
from fusegrad.nn.onnx import OnnxRunner

OCR = {
    "det": "ch_PP-OCRv4_det_infer.onnx",
    "rec": "ch_PP-OCRv4_rec_infer.onnx",
    "cls": "ch_ppocr_mobile_v2.0_cls_infer.onnx",
}
SILERO = [
    "silero_vad",
    "silero_vad_16k_op15",
    "silero_vad_half",
    "silero_vad_op18_ifless",
    "silero_vad_openvino_16k",
    "silero_vad_16k_sequence",
]


def model_path(name: str) -> Path | None:
    """The .onnx file of ``name`` inside its package, or None when the package is missing."""
    package, relative = (
        ("rapidocr_onnxruntime", f"models/{OCR[name]}")
        if name in OCR
        else ("silero_vad", f"data/{name}.onnx")
    )
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        return None
    path = Path(spec.origin).parent / relative
    return path if path.exists() else None


def feeds_for(name: str, path: Path, det_size: int) -> dict[str, np.ndarray]:
    """Fixed random inputs of realistic shape for ``name``."""
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    if name in OCR:
        shape = {"det": (1, 3, det_size, det_size), "rec": (1, 3, 48, 320), "cls": (1, 3, 48, 192)}[
            name
        ]
        return {"x": rng.standard_normal(shape).astype(np.float32)}
    feeds = {}
    for spec in ort.InferenceSession(str(path)).get_inputs():
        if spec.name == "sr":
            feeds["sr"] = np.array(16000, dtype=np.int64)
        elif spec.name == "input":
            feeds["input"] = (rng.standard_normal((1, 576)) * 0.1).astype(np.float32)
        else:
            dims = [d if isinstance(d, int) else 1 for d in spec.shape]
            feeds[spec.name] = (rng.standard_normal(dims) * 0.1).astype(np.float32)
    return feeds


def fusegrad_call(path: Path, feeds: dict[str, np.ndarray]) -> tuple[Callable[[], object], str]:
    """A call of the model in fusegrad that realizes its outputs, and how it runs ("jit" or
    "plain"). The TinyJit version is tried first and kept when it gives the plain results."""
    runner = OnnxRunner(path)
    tensors = {k: Tensor(v) for k, v in feeds.items()}

    def plain() -> list[np.ndarray]:
        return [v.numpy() for v in runner(tensors).values()]

    want = plain()
    names = list(tensors)
    jitted = TinyJit(lambda *xs: [v.realize() for v in runner(dict(zip(names, xs))).values()])
    try:
        for _ in range(3):
            got = [v.numpy() for v in jitted(*[Tensor(feeds[n]) for n in names])]
        if all(np.allclose(g, w, atol=1e-5) for g, w in zip(got, want, strict=True)):
            args = [Tensor(feeds[n]) for n in names]
            return lambda: [v.numpy() for v in jitted(*args)], "jit"
    except Exception as e:  # a model whose graph depends on read-back values
        print(f"    (TinyJit failed: {type(e).__name__}: {str(e)[:80]}; timing the plain runner)")
    return plain, "plain"


def ort_call(path: Path, feeds: dict[str, np.ndarray], threads: int) -> Callable[[], object]:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda: session.run(None, feeds)


def medians(
    contenders: dict[str, Callable[[], object]], repeats: int, gap: float = 0.0
) -> dict[str, tuple[float, float]]:
    """Median and fastest seconds per call of each contender, taking turns in each round (on a
    machine with busy neighbours the medians carry their noise; the fastest calls less so)."""
    for fn in contenders.values():
        fn()
    return {k: (statistics.median(v), min(v)) for k, v in timed(contenders, repeats, gap).items()}


def timed(
    contenders: dict[str, Callable[[], object]], repeats: int, gap: float
) -> dict[str, list[float]]:
    """Seconds of each call of each contender, ``repeats`` rounds taking turns."""
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(repeats):
        for key, fn in contenders.items():
            if gap:
                time.sleep(gap)  # the last contender's threads stop spinning on the cores
            start = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - start)
    return times


CONTENDERS = ("fusegrad", "ort1", "ort2")


def one_contender(name: str, contender: str, repeats: int, det_size: int, gap: float) -> dict:
    """Seconds of each of ``repeats`` calls of one contender on model ``name``, after a first
    call (fusegrad: its compile and capture, whose seconds are kept as "first")."""
    path = model_path(name)
    assert path is not None
    feeds = feeds_for(name, path, det_size)
    start = time.perf_counter()
    if contender == "fusegrad":
        fn, how = fusegrad_call(path, feeds)
    else:
        fn, how = ort_call(path, feeds, int(contender[-1])), ""
    fn()
    first = time.perf_counter() - start
    return {"times": timed({contender: fn}, repeats, gap)[contender], "first": first, "how": how}


def apart(name: str, repeats: int, det_size: int, gap: float) -> tuple[dict, float, str]:
    """``medians``' figures, each contender timed in processes of its own (two each, in turns;
    ``repeats`` calls split between them)."""
    times: dict[str, list[float]] = {k: [] for k in CONTENDERS}
    first, how = 0.0, ""
    for _ in range(2):
        for contender in CONTENDERS:
            command = [sys.executable, __file__, "--one", f"{name}:{contender}"]
            command += ["--repeats", str(max(1, repeats // 2)), "--det-size", str(det_size)]
            command += ["--gap-ms", str(gap * 1000)]
            done = subprocess.run(command, capture_output=True, text=True, check=True)
            got = json.loads(done.stdout.strip().splitlines()[-1])
            times[contender] += got["times"]
            if contender == "fusegrad":
                first, how = got["first"], got["how"]
    result = {k: (statistics.median(v), min(v)) for k, v in times.items()}
    return result, first, how


def bench(
    name: str, repeats: int, det_size: int, gap: float = 0.0, same_process: bool = False
) -> None:
    path = model_path(name)
    if path is None:
        pip = "rapidocr-onnxruntime" if name in OCR else "silero-vad"
        print(f"{name}: skipped (pip install {pip})")
        return
    feeds = feeds_for(name, path, det_size)
    if same_process:
        start = time.perf_counter()
        fusegrad, how = fusegrad_call(path, feeds)
        first = time.perf_counter() - start
        contenders = {"fusegrad": fusegrad, "ort1": ort_call(path, feeds, 1)}
        result = medians(contenders | {"ort2": ort_call(path, feeds, 2)}, repeats, gap)
    else:
        result, first, how = apart(name, repeats, det_size, gap)
    fg, o1, o2 = (result[k][0] * 1e3 for k in CONTENDERS)
    bf, b1, b2 = (result[k][1] * 1e3 for k in CONTENDERS)
    shape = "x".join(map(str, next(iter(feeds.values())).shape))
    print(
        f"{name:24s} {shape:>12s}  fusegrad({how}) {fg:8.2f} ms (first calls {first:.1f} s)"
        f"  ort1 {o1:8.2f} ms  ort2 {o2:8.2f} ms  ratio ort1/fg {o1 / fg:5.2f}"
        f"  ort2/fg {o2 / fg:5.2f}  | fastest calls: {bf:.2f} / {b1:.2f} / {b2:.2f} ms,"
        f" ratios {b1 / bf:5.2f} {b2 / bf:5.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=20, help="timed rounds (default 20)")
    parser.add_argument(
        "--models",
        default=",".join([*OCR, *SILERO]),
        help="comma-separated: det, rec, cls and the silero_vad* exports",
    )
    parser.add_argument("--det-size", type=int, default=640, help="detection input side")
    parser.add_argument(
        "--gap-ms",
        type=float,
        default=0.0,
        help="pause before each timed call, so that no library's idle threads still spin on the "
        "cores (a voice detector is called once per 32 ms chunk); default 0: back to back",
    )
    parser.add_argument(
        "--fusegrad-threads",
        type=int,
        default=0,
        help="OpenMP threads of fusegrad's CPU kernels (default: OpenMP's own choice); on a "
        "machine shared with other work use 1, as OpenMP's barriers stall when cores are busy",
    )
    parser.add_argument(
        "--same-process",
        action="store_true",
        help="time the contenders in one process, in turns (each library's idle threads then "
        "stall the next one's)",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)  # MODEL:CONTENDER, in a child process
    args = parser.parse_args()
    if args.one:
        name, contender = args.one.split(":")
        print(
            json.dumps(
                one_contender(name, contender, args.repeats, args.det_size, args.gap_ms / 1000)
            )
        )
        return
    if args.fusegrad_threads:  # read by OpenMP when the first kernel library loads, i.e. later
        os.environ["OMP_NUM_THREADS"] = str(args.fusegrad_threads)
    print(f"fusegrad CPU threads (OMP_NUM_THREADS): {os.environ.get('OMP_NUM_THREADS', 'default')}")
    for name in args.models.split(","):
        try:
            gap = args.gap_ms / 1000
            bench(name.strip(), args.repeats, args.det_size, gap, args.same_process)
        except Exception as e:  # one model failing must not hide the others' figures
            print(f"{name.strip()}: FAILED {type(e).__name__}: {str(e)[:200]}")


if __name__ == "__main__":
    main()
