"""bench/bench_resnet.py: fusegrad's ResNet and torch's, from the same weights, train alike."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_resnet  # noqa: E402

pytest.importorskip("torch")


@pytest.mark.parametrize("jit", [False, True])
def test_both_sides_take_the_same_steps(jit):
    x, y = bench_resnet.batch(4)
    theirs = bench_resnet.torch_model()
    ours = bench_resnet.fusegrad_step(theirs, x, y, jit=jit)
    reference = bench_resnet.torch_step(theirs, x, y)
    for _ in range(3):  # (TinyJit: two captures, then a replay)
        assert ours() == pytest.approx(reference(), rel=1e-4)
