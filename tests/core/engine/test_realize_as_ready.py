"""``realize_as_ready``: results handed over as soon as the kernel completing them has run,
while later kernels of the same plan are still to run (what the MPI gradient exchange starts
its all-reduces from: fusegrad/distributed/data_parallel.py)."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad
from fusegrad import Device, GlobalCounters, Tensor, TinyJit
from fusegrad.engine import capture, realize
from fusegrad.errors import InvalidArgument
from fusegrad.tensor import realize_as_ready


def chain(x: Tensor) -> list[Tensor]:
    """Three results, each needing a kernel after the one before (a reduction each)."""
    a = (x * 2).sum(0)
    b = (x.exp() * a).sum(0)
    c = (x.sqrt() * b).sum(0)
    return [c, b, a]


def test_each_result_is_ready_before_the_kernels_after_it_run():
    x = Tensor(np.arange(1, 13, dtype=np.float32).reshape(3, 4))
    told: list[tuple[int, int, np.ndarray]] = []
    start = GlobalCounters.kernel_count
    outs = chain(x)
    realize_as_ready(
        outs, lambda i, buf: told.append((i, GlobalCounters.kernel_count - start, buf.numpy()))
    )
    total = GlobalCounters.kernel_count - start
    assert sorted(i for i, _, _ in told) == [0, 1, 2]
    when = {i: ran for i, ran, _ in told}
    assert when[2] < when[1] < when[0] == total  # a is computed first, c last
    for i, _, values in told:  # the buffer held the values when it was handed over
        np.testing.assert_allclose(values[: outs[i].numel()], outs[i].numpy(), rtol=1e-6)


def test_a_result_already_in_a_buffer_or_a_view_of_one():
    done = Tensor([1.0, 2.0, 3.0]).realize()
    view = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).realize().T  # not in order
    told: dict[int, np.ndarray] = {}
    realize_as_ready([done, view], lambda i, buf: told.__setitem__(i, buf.numpy()))
    assert told[0].tolist() == [1.0, 2.0, 3.0]
    assert told[1][:6].tolist() == [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]  # copied out in order


def test_roots_no_step_writes_are_ready_at_once():
    """A plan whose root is one of its inputs (``finished_after`` -1)."""
    x = Tensor([1.0, 2.0]).realize()
    plan = realize.plan_for([(x + 1).uop], ["CPU"])
    assert realize.finished_after(plan) == {len(plan.steps) - 1: [0]}


def test_sharded_tensors_are_refused_with_the_fix(monkeypatch):
    monkeypatch.setenv("CPU_DEVICES", "2")
    try:
        t = Tensor([1.0, 2.0, 3.0, 4.0]).shard(["CPU:0", "CPU:1"], axis=0)
        with pytest.raises(InvalidArgument, match="realize it first"):
            realize_as_ready([t * 2], lambda i, buf: None)
    finally:
        monkeypatch.undo()
        fusegrad.reset_caches()  # other tests see one CPU device again


class HostStep:
    """A host step launched like a kernel (as the gradient exchange's are): it reads the
    buffer it is given and records the value, so a replay shows it ran in its place."""

    written: frozenset[int] = frozenset()
    program = None
    mem_bytes = 0

    def __init__(self) -> None:
        self.seen: list[float] = []

    def __call__(self, handles, wait=False, vals=()):
        out = np.empty(1, np.float32)
        self.buffer_device.allocator.copyout(out.data.cast("B"), handles[0])
        self.seen.append(float(out[0]))

    def vals(self, values):
        return ()


def test_host_steps_launched_on_ready_results_replay_under_tinyjit():
    step = HostStep()
    step.buffer_device = Device["CPU"]

    @TinyJit
    def f(x: Tensor) -> Tensor:
        first = (x * 2).sum()
        out = (x * first).sum()

        def ready(i: int, buf) -> None:
            if i == 0:
                step([buf.handle])
                if (recording := capture.active()) is not None:
                    recording.launched(step, [buf])

        realize_as_ready([first, out], ready)
        return out

    for k in range(5):
        got = f(Tensor([1.0, float(k)]))
        assert got.item() == pytest.approx((1 + k) * 2 * (1 + k))
    assert step.seen == [2.0 * (1 + k) for k in range(5)]  # replays ran it with their values
