"""Running plans: the new kernels of a plan are compiled together, in batches."""

from __future__ import annotations

import pytest

from fusegrad import GlobalCounters, Tensor
from fusegrad.device import Device
from fusegrad.engine import realize
from fusegrad.errors import CompileError


def exp_sum(scale: float) -> Tensor:
    """Two kernels, new for each ``scale``: an elementwise ``E_3`` into a buffer, then ``r_1_3``."""
    x = Tensor([1.0, 2.0, 3.0], device="PYTHON")
    return ((x * scale).contiguous() * scale).exp().sum()


def test_new_kernels_of_a_plan_are_compiled_in_batches(monkeypatch):
    batches: list[int] = []
    compiler = Device["PYTHON"].compiler
    real = compiler.compile_batch
    monkeypatch.setattr(compiler, "compile_batch", lambda s: batches.append(len(s)) or real(s))
    monkeypatch.setattr(realize, "BATCHES_PER_WORKER", 1)
    monkeypatch.setattr(realize.os, "cpu_count", lambda: 1)
    GlobalCounters.reset()
    assert exp_sum(0.5).item() == pytest.approx(5.0497, rel=1e-4)  # e^.25 + e^.5 + e^.75
    assert batches == [2] and GlobalCounters.compiles == 2


def test_a_kernel_that_fails_to_compile_spares_the_others_of_its_plan(monkeypatch):
    compiler = Device["PYTHON"].compiler
    real = compiler.compile_batch

    def reduce_fails(sources: list[str]) -> list[bytes | CompileError]:
        broken = CompileError("r_1_3 broke")
        return [broken if '"name": "r_' in s else b for s, b in zip(sources, real(sources))]

    monkeypatch.setattr(compiler, "compile_batch", reduce_fails)
    with pytest.raises(CompileError, match="r_1_3 broke"):
        exp_sum(0.25).item()
    monkeypatch.setattr(compiler, "compile_batch", real)
    GlobalCounters.reset()
    assert exp_sum(0.25).item() == pytest.approx(3.4039, rel=1e-4)
    assert GlobalCounters.compiles == 1  # only the kernel that failed is compiled again
