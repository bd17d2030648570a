"""TinyJit replays CPU launches through one C call (``CPUBatch``): the same results as launching
each kernel, with new inputs, variables' values, and constant launches re-run when their
sources change."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor, TinyJit, Variable
from fusegrad_cpu.device import BATCH_ARGUMENTS, CPUBatch, CPUProgram, batch_supported

pytestmark = pytest.mark.skipif(not batch_supported(), reason="batches call kernels on Linux only")


def test_a_replay_runs_every_launch_in_one_batch_with_the_new_inputs():
    w = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device="CPU").realize()

    @TinyJit
    def f(x: Tensor) -> Tensor:
        return ((x @ w.T).relu() + 1).sum(1).realize()

    for i in range(5):
        x = np.random.default_rng(i).standard_normal((2, 4)).astype(np.float32)
        got = f(Tensor(x, device="CPU")).numpy()
        np.testing.assert_allclose(got, (np.maximum(x @ w.numpy().T, 0) + 1).sum(1), rtol=1e-5)
    assert isinstance(f._captured.batch.batch, CPUBatch)
    assert f._captured.batch.batch.n == len(f._captured.launches)


def test_a_batch_passes_variables_values_and_reruns_constant_launches_after_a_write():
    w = Tensor(np.ones((8, 8), np.float32), device="CPU").realize()
    n = Variable("n", 1, 8)

    @TinyJit
    def f(x: Tensor) -> Tensor:
        # w.T.contiguous() reads only the weight: a constant launch, skipped on replay
        return (x @ w.T.contiguous()).realize()

    for size in (3, 5, 2, 7, 4):
        x = np.full((size, 8), float(size), np.float32)
        got = f(Tensor(x, device="CPU").reshape(n.bind(size), 8)).numpy()
        np.testing.assert_allclose(got[:size], x @ w.numpy().T)
    assert f._captured.batch.symbolic and f._captured.batch.constant
    w._buffer().copyin(np.full(64, 2.0, np.float32))  # what loading weights does
    x = np.ones((3, 8), np.float32)
    np.testing.assert_allclose(f(Tensor(x, device="CPU").reshape(n.bind(3), 8)).numpy()[:3], 16.0)


def test_a_kernel_of_too_many_arguments_is_not_batched():
    class Fake(CPUProgram):
        def __init__(self) -> None:  # (no library)
            pass

    assert CPUBatch.fits(Fake(), BATCH_ARGUMENTS, 0)
    assert not CPUBatch.fits(Fake(), BATCH_ARGUMENTS - 1, 2)
    assert CPUProgram.batch([(Fake(), [np.empty(1)] * (BATCH_ARGUMENTS + 1), ())]) is None


def test_a_replay_sets_again_only_the_inputs_and_values_that_changed(monkeypatch):
    """Each input's buffer is written into the batch's arguments once, and again only when a
    call passes another buffer; the variables' values likewise: a decode step of SmolLM2 passes
    the same few inputs to hundreds of kernels. Results follow every change."""
    w = Tensor(np.arange(32, dtype=np.float32).reshape(4, 8), device="CPU").realize()
    n = Variable("n", 1, 8)

    @TinyJit
    def f(x: Tensor, y: Tensor) -> Tensor:
        return ((x @ w.T) * y.sum() + (x * 2).sum(1, keepdim=True)).realize()

    def call(size: int, x: Tensor, y: Tensor) -> np.ndarray:
        return f(x.reshape(n.bind(size), 8), y).numpy()[:size]

    xs = {s: Tensor(np.full((s, 8), float(s), np.float32), device="CPU") for s in (2, 3)}
    y = Tensor(np.ones(5, np.float32), device="CPU")
    for _ in range(3):
        call(2, xs[2], y)
    batch = f._captured.batch.batch
    set_buffer, set_vals = [], []
    monkeypatch.setattr(batch, "set_buffer", lambda *a: set_buffer.append(a[:2]))
    monkeypatch.setattr(batch, "set_vals", lambda *a: set_vals.append(a))
    want = lambda s, yv: np.full((s, 8), float(s)) @ w.numpy().T * yv + 16.0 * s  # noqa: E731
    np.testing.assert_allclose(call(2, xs[2], y), want(2, 5.0))
    assert set_buffer == [] and set_vals == []  # the same buffers and values: nothing to set
    monkeypatch.undo()
    y2 = Tensor(np.full(5, 2.0, np.float32), device="CPU")
    np.testing.assert_allclose(call(2, xs[2], y2), want(2, 10.0))  # another y: its places only
    np.testing.assert_allclose(call(3, xs[3], y2), want(3, 10.0))  # another size and x
    np.testing.assert_allclose(call(2, xs[2], y), want(2, 5.0))


# ---- eager plans: a plan's launches in one batch (engine/realize.py ``PlanBatch``) ----------


def _two_kernels(x: Tensor, w: Tensor) -> Tensor:
    """A product, then a softmax over its rows: two kernels or more."""
    return (x @ w).softmax(-1)


def _want(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    y = x @ w
    e = np.exp(y - y.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _launches_one_by_one(monkeypatch) -> list[str]:
    calls: list[str] = []
    launch = CPUProgram.__call__

    def spy(self, *args, **kwargs):
        calls.append(self.name)
        return launch(self, *args, **kwargs)

    monkeypatch.setattr(CPUProgram, "__call__", spy)
    return calls


def test_an_eager_plan_of_several_kernels_runs_as_one_batch_built_once(monkeypatch):
    """Realizing the same structure again with new inputs launches no kernel through ctypes:
    the plan's batch, built at the first run, gets the new buffers and runs them all; the
    results and the kernel count are those of the launches one by one."""
    from fusegrad import GlobalCounters
    from fusegrad.engine import realize

    built = []
    make = realize.PlanBatch.of
    monkeypatch.setattr(realize.PlanBatch, "of", lambda *a: built.append(1) or make(*a))
    one_by_one = _launches_one_by_one(monkeypatch)
    rng = np.random.default_rng(0)
    for i in range(4):
        x, w = rng.standard_normal((16, 8), np.float32), rng.standard_normal((8, 24), np.float32)
        GlobalCounters.reset()
        got = _two_kernels(Tensor(x, device="CPU"), Tensor(w, device="CPU")).numpy()
        np.testing.assert_allclose(got, _want(x, w), rtol=1e-5, atol=1e-6)
        if i == 0:
            kernels = GlobalCounters.kernel_count
            assert kernels >= 2
        assert GlobalCounters.kernel_count == kernels
    assert len(built) == 1
    assert one_by_one == []


def test_a_batched_plan_takes_each_runs_variables(monkeypatch):
    from fusegrad import Variable

    n = Variable("n", 1, 16)
    w = Tensor(np.arange(24, dtype=np.float32).reshape(8, 3) / 10, device="CPU").realize()
    one_by_one = _launches_one_by_one(monkeypatch)
    for size in (3, 7, 2, 16, 5):
        x = np.random.default_rng(size).standard_normal((size, 8)).astype(np.float32)
        t = Tensor(x, device="CPU").reshape(n.bind(size), 8)
        got = _two_kernels(t, w).numpy()[:size]
        np.testing.assert_allclose(got, _want(x, w.numpy()), rtol=1e-5, atol=1e-6)
    assert len(one_by_one) <= 2  # (the first run's kernels, before the batch exists)


def test_profiling_and_timing_still_launch_and_time_each_kernel():
    from fusegrad.helpers import context
    from fusegrad.profiler import profile

    x, w = np.ones((16, 8), np.float32), np.ones((8, 24), np.float32)
    for _ in range(2):  # (the plan's batch exists from here on)
        _two_kernels(Tensor(x, device="CPU"), Tensor(w, device="CPU")).numpy()
    with profile() as p:
        _two_kernels(Tensor(x, device="CPU"), Tensor(w, device="CPU")).numpy()
    kernels = [e for e in p.trace()["traceEvents"] if e.get("cat") == "kernel"]
    assert len(kernels) >= 2
    with context(DEBUG=2):
        got = _two_kernels(Tensor(x, device="CPU"), Tensor(w, device="CPU")).numpy()
    np.testing.assert_allclose(got, _want(x, w), rtol=1e-6)


def test_a_plan_its_programs_cannot_batch_launches_each_kernel(monkeypatch):
    """A program type whose ``batch`` gives None (a kernel of too many arguments): the plan
    is marked unbatchable and its kernels launched one by one, run after run."""
    from fusegrad.engine import realize

    monkeypatch.setattr(CPUProgram, "batch", staticmethod(lambda calls: None))
    built = []
    make = realize.PlanBatch.of
    monkeypatch.setattr(realize.PlanBatch, "of", lambda *a: built.append(1) or make(*a))
    one_by_one = _launches_one_by_one(monkeypatch)
    x, w = np.full((4, 8), 0.5, np.float32), np.eye(8, 24, dtype=np.float32)
    for _ in range(3):
        got = _two_kernels(Tensor(x, device="CPU") * 3, Tensor(w, device="CPU")).numpy()
        np.testing.assert_allclose(got, _want(x * 3, w), rtol=1e-6)
    assert len(built) == 1 and len(one_by_one) >= 6


def test_threads_running_one_plan_at_once_each_get_their_own_results():
    """Two threads realizing the same structure at once: a batch in use is taken off the plan,
    so the other builds its own, and neither runs on the other's buffers."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(1)
    cases = [
        (rng.standard_normal((32, 16), np.float32), rng.standard_normal((16, 48), np.float32))
        for _ in range(8)
    ]

    def work(offset: int) -> None:
        for r in range(30):
            x, w = cases[(r + offset) % len(cases)]
            got = _two_kernels(Tensor(x, device="CPU"), Tensor(w, device="CPU")).numpy()
            np.testing.assert_allclose(got, _want(x, w), rtol=1e-5, atol=1e-6)

    with ThreadPoolExecutor(2) as pool:
        for job in [pool.submit(work, k) for k in range(2)]:
            job.result()  # (raises a thread's failure here)
