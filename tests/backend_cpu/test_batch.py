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
