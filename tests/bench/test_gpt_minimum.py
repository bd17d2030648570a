"""bench/gpt_minimum.py: the GPT step's kernels by kind, and the least traffic a step needs."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_gpt  # noqa: E402
import gpt  # noqa: E402  (examples/gpt.py, put on the path by gpt_minimum)
import gpt_minimum  # noqa: E402

from fusegrad import GlobalCounters, Tensor  # noqa: E402
from fusegrad.engine import capture  # noqa: E402

TINY = gpt.Config(layers=1, width=32, heads=2, context=8, vocab=64, batch=2)


def kinds_of(fn) -> list[str]:
    """The kind of each kernel ``fn`` launches."""
    with capture.capturing() as recorded:
        fn()
    return [gpt_minimum.kernel_kind(runner.kernel.ast) for runner, _ in recorded.launches]


def rand(*shape: int) -> Tensor:
    return Tensor(np.random.default_rng(0).standard_normal(shape).astype(np.float32)).realize()


@pytest.mark.parametrize(
    "make, kind",
    [
        (lambda: rand(8, 16) @ rand(16, 4), "matmul-shaped"),
        (lambda: rand(16, 8).T @ rand(16, 4), "matmul-shaped"),  # a weight gradient's layout
        (lambda: rand(2, 3, 8, 16) @ rand(2, 3, 16, 8), "matmul-shaped"),  # attention's
        (lambda: rand(8, 16).sum(axis=1), "other reductions"),
        (lambda: (rand(8, 16) * rand(8, 16)).sum(axis=1), "other reductions"),  # row dot products
        (lambda: rand(8, 16).exp() + 1, "elementwise"),
    ],
)
def test_kernel_kind(make, kind: str) -> None:
    assert kinds_of(lambda: make().realize()) == [kind]


def test_a_layout_copy_is_a_copy() -> None:
    assert kinds_of(lambda: rand(8, 16).T.contiguous().realize()) == ["copies"]


def test_the_kinds_of_a_step_add_up_to_its_kernels() -> None:
    step = gpt.make_step(gpt.GPT(TINY))
    batch = gpt.token_stream(TINY, 1)[0]
    GlobalCounters.reset()
    kernels = gpt_minimum.kernels_of_step(lambda: step(Tensor(batch)).item())
    assert kernels.total == GlobalCounters.kernel_count > 0
    assert set(kernels.kinds) <= set(gpt_minimum.KINDS)
    assert kernels.kinds["other reductions"] > 0
    assert kernels.products >= kernels.kinds["matmul-shaped"] > 0


def test_a_fused_attention_kernel_holds_two_products() -> None:
    q, k, v = (rand(1, 2, 16, 8) for _ in range(3))
    with capture.capturing() as recorded:
        q.scaled_dot_product_attention(k, v, is_causal=True).realize()
    asts = [runner.kernel.ast for runner, _ in recorded.launches]
    assert sum(map(gpt_minimum.matmul_products, asts)) == 2


def test_minimum_matmuls_counts_the_products_of_forward_and_backward() -> None:
    counts = gpt_minimum.minimum_matmuls(gpt.Config())  # 2 layers
    assert counts == {"linear layers": 24, "attention": 12, "head": 3, "embedding gradient": 1}


def test_minimum_bytes_is_positive_and_below_fusegrads() -> None:
    pytest.importorskip("torch")
    minimum = bench_gpt.torch_minimum_bytes(TINY)
    parameters = sum(a.size for a in gpt.initial_weights(TINY).values())
    assert minimum.state == 24 * parameters
    # at least the residual stream, saved once per layernorm: (B, T, C) floats three times
    assert minimum.activations >= 3 * TINY.batch * TINY.context * TINY.width * 4
    kernels, mb = bench_gpt.fusegrad_step(TINY, jit=False)[1]()
    assert 0 < minimum.total < mb * 1e6
    ours = gpt_minimum.StepKernels(Counter(copies=kernels), 0)
    lines = gpt_minimum.summary(TINY, ours, {"fusegrad": (kernels, mb)}, minimum)
    assert f"MB moved per step: fusegrad {mb:.1f}, minimum {minimum.total / 1e6:.1f}" in lines[2]
