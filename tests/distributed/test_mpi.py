"""Two ranks under ``mpirun -n 2 --oversubscribe`` (loopback): collectives against numpy,
data-parallel training against one process, a rank that dies, a rank that hangs, mismatched
shapes. Each case is a process group of its own (``mpi_worker.py``); skipped without MPI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from .mpi_launch import mpi_environment, require_mpirun

WORKER = Path(__file__).with_name("mpi_worker.py")
MPIRUN = require_mpirun()


def run(scenario: str, ranks: int | None = 2, timeout: float = 60, **env: str):
    """``scenario`` of the worker on ``ranks`` ranks (None: plain python, a world of one)."""
    environment = mpi_environment(**env)
    command = [sys.executable, str(WORKER), scenario]
    if ranks is not None:
        command = [MPIRUN, "-n", str(ranks), "--oversubscribe", *command]
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=timeout)
    return done, time.monotonic() - started


@pytest.mark.parametrize("deadline", ["30", "0"])  # polled non-blocking calls; blocking calls
def test_collectives_match_numpy_for_every_dtype_and_odd_sizes(deadline):
    done, _ = run("collectives", FUSEGRAD_MPI_TIMEOUT=deadline)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "checked 140 collectives on 2 ranks" in done.stdout


@pytest.mark.parametrize("scenario", ["train", "train_jit"])
def test_data_parallel_losses_equal_one_process_at_the_same_global_batch(scenario):
    """Eager, and as one TinyJit step (forward, backward, exchange, update) replayed: the
    losses of 2 ranks equal one process's on the whole batch, and the all-reduces start while
    backward kernels are still to run (each gradient is a bucket of its own here)."""
    two, _ = run(scenario)
    one, _ = run("train", ranks=None)
    assert two.returncode == 0 and one.returncode == 0, two.stderr[-3000:] + one.stderr[-3000:]
    found_two, found_one = json.loads(two.stdout), json.loads(one.stdout)
    losses_two, losses_one = found_two["losses"], found_one["losses"]
    assert len(losses_two) == 10
    np.testing.assert_allclose(losses_two, losses_one, rtol=0, atol=1e-5)
    assert losses_two[0] != losses_two[-1]  # it trained
    assert found_two["overlap"]["sends"] == 4  # two weights, two biases
    assert found_two["overlap"]["kernels_after_first_send"] >= 2


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_a_rank_that_dies_ends_the_run_with_an_error(how):
    done, seconds = run("die", FUSEGRAD_MPI_TIMEOUT="10", DIE_BY=how)
    assert done.returncode != 0
    assert seconds < 60
    assert "not noticed" not in done.stdout
    assert "process" in done.stderr and ("exited" in done.stderr or "signal" in done.stderr)


def test_a_rank_that_hangs_times_out_with_a_clear_error():
    done, seconds = run("hang", FUSEGRAD_MPI_TIMEOUT="2")
    assert done.returncode != 0
    assert seconds < 30  # 2 s, then MPI_Abort ends both ranks
    assert "CollectiveTimeout: all_reduce" in done.stderr
    assert "did not finish within 2 s (FUSEGRAD_MPI_TIMEOUT)" in done.stderr
    assert "another rank probably died" in done.stderr


def test_mismatched_shapes_are_reported_on_every_rank_naming_each():
    done, _ = run("mismatch")
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        assert f"rank {rank}: the ranks disagree: rank 0 called all_reduce: float32 (2, 3)" in (
            done.stdout
        )
    assert "rank 1 called all_reduce: float32 (3, 3)" in done.stdout
    assert (
        "rank 0 called sync_gradients: op=mean [float32 (3,)]; rank 1 called sync_gradients: "
        "op=mean [float32 (3,), float32 (3,)]"
    ) in done.stdout
