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
