"""The parts of fusegrad.distributed that need no MPI: bucket plans, argument errors, and the
error that names what to install where mpi4py is missing."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from fusegrad import Tensor, dtypes
from fusegrad import distributed as dist
from fusegrad.distributed import buckets, comm
from fusegrad.engine import capture
from fusegrad.errors import InvalidIndex, InvalidType, InvalidValue, JitError, UnknownOption


@pytest.mark.parametrize(
    "sizes, kinds, limit, expected",
    [
        ([4, 4, 4, 4], "ffff", 8, [[0, 1], [2, 3]]),  # two per bucket
        ([4, 4, 4], "fff", 100, [[0, 1, 2]]),  # all fit in one
        ([16, 4, 4], "fff", 8, [[0], [1, 2]]),  # one larger than the limit: alone
        ([4, 16, 4], "fff", 8, [[0], [1], [2]]),  # ... and it closes the bucket before it
        ([4, 4, 4, 4], "fhfh", 8, [[0, 2], [1, 3]]),  # one dtype per bucket, interleaved
        ([], "", 8, []),
    ],
)
def test_plan_buckets(sizes, kinds, limit, expected):
    assert buckets.plan_buckets(sizes, list(kinds), limit) == expected


def test_plan_buckets_keeps_each_array_once_within_the_limit():
    rng = np.random.default_rng(0)
    sizes = rng.integers(1, 50, 200).tolist()
    kinds = rng.choice(["f4", "f2"], 200).tolist()
    plan = buckets.plan_buckets(sizes, kinds, 64)
    assert sorted(i for b in plan for i in b) == list(range(200))
    for b in plan:
        assert len({kinds[i] for i in b}) == 1
        assert len(b) == 1 or sum(sizes[i] for i in b) <= 64
        assert b == sorted(b)


def test_flatten_and_unflatten_are_inverses():
    arrays = [np.arange(6.0).reshape(2, 3), np.arange(1.0), np.zeros((0, 4)), np.ones((2, 2))]
    flat = buckets.flatten(arrays)
    assert flat.shape == (11,)
    back = buckets.unflatten(flat, [a.shape for a in arrays])
    assert all((a == b).all() and a.shape == b.shape for a, b in zip(arrays, back))
    with pytest.raises(InvalidValue, match="does not hold shapes"):
        buckets.unflatten(flat, [(2, 3)])
    with pytest.raises(InvalidValue, match="bucket size must be positive"):
        buckets.plan_buckets([4], ["f"], 0)


def test_without_mpi4py_the_error_names_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py now raises ImportError
    monkeypatch.setattr(comm, "_world", None)
    with pytest.raises(dist.MPIUnavailable) as info:
        dist.init()
    message = str(info.value)
    assert "apt-get install openmpi-bin libopenmpi-dev" in message
    assert "pip install 'fusegrad[mpi]'" in message
    assert isinstance(info.value, ImportError)
    with pytest.raises(dist.MPIUnavailable):
        dist.all_reduce(Tensor([1.0]))


def test_importing_fusegrad_starts_no_mpi():
    code = (
        "import sys, fusegrad, fusegrad.nn, fusegrad.distributed\n"
        "assert 'mpi4py' not in sys.modules, 'mpi4py was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: dist.all_reduce(Tensor([True]), "sum"), InvalidType, "not defined for bool"),
        (lambda: dist.all_reduce(Tensor([1, 2]), "mean"), InvalidType, "op='sum' and divide"),
        (lambda: dist.all_reduce(Tensor([1.0]), "prod"), UnknownOption, "sum, mean, max, min"),
        (lambda: dist.all_gather(Tensor([1.0]), axis=1), InvalidIndex, "axis 1 does not exist"),
        (lambda: dist.all_gather(Tensor(1.0)), InvalidIndex, "reshape a scalar"),
    ],
)
def test_bad_arguments_are_refused_before_any_exchange(call, error, match, monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # proves no MPI call was needed
    monkeypatch.setattr(comm, "_world", None)
    with pytest.raises(error, match=match):
        call()


def test_bad_timeout_setting(monkeypatch):
    monkeypatch.setenv(dist.TIMEOUT_ENV, "soon")
    with pytest.raises(InvalidValue, match="FUSEGRAD_MPI_TIMEOUT='soon' is not a number"):
        comm._timeout_from_env()
    monkeypatch.setenv(dist.TIMEOUT_ENV, "2.5")
    assert comm._timeout_from_env() == 2.5


def test_broadcasting_parameters_inside_tinyjit_is_refused():
    """(sync_gradients records its exchange as launches a replay runs: tests/distributed/
    test_mpi.py; a broadcast happens once, outside any step)"""
    w = Tensor([1.0, 2.0], requires_grad=True)
    with capture.capturing(), pytest.raises(JitError, match="cannot run inside a TinyJit"):
        dist.broadcast_parameters([w])


def test_gradient_sync_names_parameters_without_gradients(monkeypatch):
    monkeypatch.setitem(sys.modules, "mpi4py", None)
    monkeypatch.setattr(comm, "_world", None)
    w, unused = Tensor([1.0], requires_grad=True), Tensor([1.0], requires_grad=True)
    (w * 2).sum().backward()
    with pytest.raises(dist.DistributedError, match=r"parameters \[1\] have no .grad"):
        dist.sync_gradients([w, unused])
    with pytest.raises(UnknownOption, match="op='mean' or op='sum'"):
        dist.sync_gradients([w], op="max")
    assert dtypes.float32 == w.grad.dtype
