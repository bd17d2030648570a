"""The small GPT's training step (examples/gpt.py) against PyTorch's and tinygrad's twins.

    python bench/bench_gpt.py              # ms/step, kernels/step, first step cold, losses
    python bench/bench_gpt.py --quick      # fewer steps

Every twin starts from the same weights (``initial_weights``) and trains on the same batches
with AdamW (lr 3e-4, weight decay 0.1), so the losses are printed side by side: they agree to
float32 rounding. Steps are timed in turns (one step of each contender, then the next), after
warm-up steps; the median is reported. "first" is the first step of a fresh process with an
empty kernel cache (compiles included), measured in a subprocess for fusegrad and tinygrad.
Kernels and MB moved per step are counted on a third step (a TinyJit's first replay) and
printed against the least a step needs, with fusegrad's kernels by kind (bench/gpt_minimum.py).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))

import gpt  # noqa: E402  (examples/gpt.py)
import gpt_minimum  # noqa: E402
from bench_core import tinygrad_on_cpu  # noqa: E402  (bench/ is on the path)

Step = Callable[[np.ndarray], float]


def counted(run: Step, cfg: gpt.Config, counters: Any) -> tuple[int, float]:
    """Kernels the third step of ``run`` launches, and MB their buffers hold (read or written),
    as the library's ``GlobalCounters`` (fusegrad's or tinygrad's: the same fields) count them.
    The third: a TinyJit (either library's) runs its first call, captures its second and
    replays from then on, skipping the launches that compute the same at every call."""
    batches = gpt.token_stream(cfg, 3, seed=7)
    for batch in batches[:2]:
        run(batch)
    counters.reset()
    run(batches[2])
    return counters.kernel_count, counters.global_mem / 1e6


def fusegrad_step(cfg: gpt.Config, jit: bool) -> tuple[Step, Callable[[], tuple[int, float]]]:
    from fusegrad import GlobalCounters, Tensor

    step = gpt.make_step(gpt.GPT(cfg), jit=jit)

    def run(batch: np.ndarray) -> float:
        return step(Tensor(batch)).item()

    return run, lambda: counted(run, cfg, GlobalCounters)


def torch_model(cfg: gpt.Config) -> tuple[dict[str, Any], Callable[[np.ndarray], Any]]:
    """PyTorch's twin: its weights (leaves that want gradients) and ``loss(batch)``, the
    cross-entropy of a (B, T + 1) token batch, its graph kept for backward."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - PyTorch's own spelling

    w = {k: torch.tensor(v, requires_grad=True) for k, v in gpt.initial_weights(cfg).items()}
    c, heads = cfg.width, cfg.heads

    def norm(x, p):
        return F.layer_norm(x, (c,), w[p + ".w"], w[p + ".b"], 1e-5)

    def forward(tokens):
        b, t = tokens.shape
        x = w["wte"][tokens] + w["wpe"][:t]
        for i in range(cfg.layers):
            p = f"h{i}."
            qkv = norm(x, p + "ln1") @ w[p + "attn.w"] + w[p + "attn.b"]
            q, k, v = (
                s.reshape(b, t, heads, c // heads).transpose(1, 2) for s in qkv.split(c, dim=2)
            )
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + y.transpose(1, 2).reshape(b, t, c) @ w[p + "proj.w"] + w[p + "proj.b"]
            h = F.gelu(norm(x, p + "ln2") @ w[p + "fc.w"] + w[p + "fc.b"], approximate="tanh")
            x = x + h @ w[p + "out.w"] + w[p + "out.b"]
        return norm(x, "lnf") @ w["wte"].T

    def loss(batch: np.ndarray):
        tokens = torch.from_numpy(batch).long()
        logits = forward(tokens[:, :-1]).reshape(-1, cfg.vocab)
        return F.cross_entropy(logits, tokens[:, 1:].reshape(-1))

    return w, loss


def torch_step(cfg: gpt.Config) -> Step:
    import torch

    w, loss_of = torch_model(cfg)
    opt = torch.optim.AdamW(list(w.values()), lr=3e-4, weight_decay=0.1)

    def run(batch: np.ndarray) -> float:
        loss = loss_of(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return run


def tinygrad_step(cfg: gpt.Config, jit: bool) -> tuple[Step, Callable[[], tuple[int, float]]]:
    from tinygrad import Context, GlobalCounters, Tensor, TinyJit
    from tinygrad.nn.optim import AdamW

    w = {k: Tensor(v) for k, v in gpt.initial_weights(cfg).items()}
    opt = AdamW(list(w.values()), lr=3e-4, weight_decay=0.1)
    c, heads = cfg.width, cfg.heads

    def norm(x, p):
        return x.layernorm(eps=1e-5) * w[p + ".w"] + w[p + ".b"]

    def step(tokens: Tensor) -> Tensor:
        with Context(TRAINING=1):  # tinygrad refuses optimizer steps without it
            inputs, targets = tokens[:, :-1], tokens[:, 1:]
            b, t = inputs.shape
            x = inputs.one_hot(cfg.vocab).float() @ w["wte"] + w["wpe"][:t]
            for i in range(cfg.layers):
                p = f"h{i}."
                qkv = norm(x, p + "ln1") @ w[p + "attn.w"] + w[p + "attn.b"]
                q, k, v = (
                    s.reshape(b, t, heads, c // heads).transpose(1, 2) for s in qkv.chunk(3, dim=2)
                )
                y = q.scaled_dot_product_attention(k, v, is_causal=True)
                x = x + y.transpose(1, 2).reshape(b, t, c) @ w[p + "proj.w"] + w[p + "proj.b"]
                h = (norm(x, p + "ln2") @ w[p + "fc.w"] + w[p + "fc.b"]).gelu()
                x = x + h @ w[p + "out.w"] + w[p + "out.b"]
            logits = norm(x, "lnf") @ w["wte"].T
            loss = logits.reshape(-1, cfg.vocab).sparse_categorical_crossentropy(
                targets.reshape(-1)
            )
            opt.zero_grad()
            loss.backward()
            # realized first: tinygrad's step writes the weights in place, and a loss realized
            # after it would be computed from the new weights
            loss.realize()
            opt.step()
            return loss

    stepper = TinyJit(step) if jit else step

    def run(batch: np.ndarray) -> float:
        return stepper(Tensor(batch)).item()

    return run, lambda: counted(run, cfg, GlobalCounters)


def torch_minimum_bytes(cfg: gpt.Config) -> gpt_minimum.MinimumBytes | None:
    """The least traffic of a step (bench/gpt_minimum.py), its activations measured on
    PyTorch's twin; None without torch."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    weights, loss_of = torch_model(cfg)
    batch = gpt.token_stream(cfg, 1, seed=7)[0]
    saved = gpt_minimum.saved_activation_bytes(lambda: loss_of(batch), weights.values())
    return gpt_minimum.minimum_bytes(cfg, saved)


def fusegrad_kernels(cfg: gpt.Config) -> gpt_minimum.StepKernels:
    """fusegrad's kernels of an eager step (the one ``counted`` counts) by kind
    (bench/gpt_minimum.py)."""
    from fusegrad import Tensor

    step = gpt.make_step(gpt.GPT(cfg))
    batches = gpt.token_stream(cfg, 3, seed=7)
    for batch in batches[:2]:
        step(Tensor(batch)).item()
    return gpt_minimum.kernels_of_step(lambda: step(Tensor(batches[2])).item())


def minimum_lines(cfg: gpt.Config, kernels: dict[str, tuple[int, float]]) -> list[str]:
    """The contenders' ``kernels`` (name -> kernels, MB per step) against the least a step
    needs, with fusegrad's kernels by kind: the lines bench_gpt and bench/run.py print."""
    return gpt_minimum.summary(cfg, fusegrad_kernels(cfg), kernels, torch_minimum_bytes(cfg))


COLD = """
import sys, time
sys.path.insert(0, {bench!r})
import bench_core, bench_gpt, gpt
bench_core.tinygrad_on_cpu()
cfg = gpt.Config()
batch = gpt.token_stream(cfg, 1)[0]
start = time.perf_counter()
run = bench_gpt.{maker}(cfg, False)[0]
run(batch)
print(time.perf_counter() - start)
"""


def cold_first_step(maker: str) -> float | None:
    """Seconds of the first step (model built, step run) in a new process with an empty
    kernel cache; None where that process fails."""
    with tempfile.TemporaryDirectory() as cache:
        env = {
            **os.environ,
            "FUSEGRAD_CACHE": cache,
            "CACHEDB": os.path.join(cache, "tinygrad.db"),  # tinygrad's compile cache
        }
        code = COLD.format(bench=str(Path(__file__).parent), maker=maker)
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"  ({maker} cold run failed: {done.stderr.strip().splitlines()[-1:]})")
        return None
    return float(done.stdout.strip().splitlines()[-1])


@dataclass
class Figures:
    """Each contender's step times (after warm-up), losses and, where counted, kernels/step."""

    times: dict[str, list[float]] = field(default_factory=dict)
    losses: dict[str, list[float]] = field(default_factory=dict)
    kernels: dict[str, tuple[int, float]] = field(default_factory=dict)


def contenders(cfg: gpt.Config, kernels: dict[str, tuple[int, float]]) -> dict[str, Step]:
    """A fresh step of each contender installed, all from the same weights; ``kernels`` gets
    each one's kernels per step (counted on a step of its own, before)."""
    makers: dict[str, Callable[[], Step]] = {
        "fusegrad": lambda: fusegrad_step(cfg, False)[0],
        "fusegrad jit": lambda: fusegrad_step(cfg, True)[0],
    }
    counters = {
        name: lambda jit=jit: fusegrad_step(cfg, jit)[1]()
        for name, jit in (("fusegrad", False), ("fusegrad jit", True))
    }
    try:
        import torch  # noqa: F401

        makers["torch"] = lambda: torch_step(cfg)
    except ImportError:
        pass
    try:
        tinygrad_on_cpu()
        import tinygrad  # noqa: F401

        for name, jit in (("tinygrad", False), ("tinygrad jit", True)):
            makers[name] = lambda jit=jit: tinygrad_step(cfg, jit)[0]
            counters[name] = lambda jit=jit: tinygrad_step(cfg, jit)[1]()
    except ImportError:
        pass
    kernels.update({name: count() for name, count in counters.items()})
    return {name: make() for name, make in makers.items()}


#: seconds before each step: the previous contender's worker threads busy-wait after its step
#: (OpenMP's spin), and on a 2-core machine they took a core from the next one's threads
SETTLE_SECONDS = 0.3


def measure(cfg: gpt.Config, warmup: int, timed: int) -> Figures:
    """Steps of every contender in turns, one step each, on the same batches."""
    figures = Figures()
    steps = contenders(cfg, figures.kernels)
    figures.times = {name: [] for name in steps}
    figures.losses = {name: [] for name in steps}
    for i, batch in enumerate(gpt.token_stream(cfg, warmup + timed)):
        for name, run in steps.items():
            time.sleep(SETTLE_SECONDS)
            start = time.perf_counter()
            figures.losses[name].append(run(batch))
            if i >= warmup:
                figures.times[name].append(time.perf_counter() - start)
    assert all(math.isfinite(v) for ls in figures.losses.values() for v in ls)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer timed steps")
    parser.add_argument("--no-cold", action="store_true", help="skip the cold first steps")
    args = parser.parse_args()
    cfg = gpt.Config()
    warmup, timed = (3, 4) if args.quick else (3, 10)
    figures = measure(cfg, warmup, timed)
    times, losses, kernels = figures.times, figures.losses, figures.kernels
    print(f"GPT train step: {cfg}, AdamW; median of {timed} steps after {warmup}")
    ours = statistics.median(times["fusegrad"])
    for name in times:
        t = statistics.median(times[name])
        count = (
            f"{kernels[name][0]:4d} kernels {kernels[name][1]:6.1f} MB/step"
            if name in kernels
            else " " * 27
        )
        ratio = t / ours
        print(
            f"  {name:<13s} {t * 1000:8.1f} ms/step  {count}  this / fusegrad eager: {ratio:5.2f}x"
        )
    first = {name: losses[name][:3] for name in losses}
    print(
        "  losses of steps 0-2: "
        + "; ".join(f"{n} {' '.join(f'{v:.4f}' for v in ls)}" for n, ls in first.items())
    )
    if "torch" in losses:
        worst = max(abs(a - b) for a, b in zip(losses["fusegrad"], losses["torch"]))
        print(
            f"  largest |fusegrad - torch| loss difference over {warmup + timed} steps: {worst:.2e}"
        )
    for line in minimum_lines(cfg, kernels):
        print("  " + line)
    if not args.no_cold:
        for name, maker in (("fusegrad", "fusegrad_step"), ("tinygrad", "tinygrad_step")):
            if name in losses:
                seconds = cold_first_step(maker)
                if seconds is not None:
                    print(f"  {name:<13s} first step, empty kernel cache: {seconds:6.2f} s")


if __name__ == "__main__":
    main()
