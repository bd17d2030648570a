"""The MPI side of ``fusegrad.distributed``: numpy arrays in, numpy arrays out, with a deadline.

Every collective here is non-blocking (``Iallreduce``, ``Ibcast``, ``Iallgatherv``) and waited
for by polling ``Testall`` until ``FUSEGRAD_MPI_TIMEOUT`` seconds have passed: a blocking MPI
call whose peer died, or never comes, waits forever; this wait raises ``CollectiveTimeout``
saying which collective and that a rank probably died. MPI cannot cancel a
started collective, so a process that timed out calls ``MPI_Abort`` when it exits
(``_abort_if_failed``): without it, ``MPI_Finalize`` would wait for the lost rank too, and
``mpirun`` would never return. ``FUSEGRAD_MPI_TIMEOUT=0`` asks for no deadline: then MPI's
blocking calls run, faster on large buffers (bench/distributed.py).

Before moving data, each collective gathers one small header per rank (a digest of what the
rank is calling: collective, dtype, shape, op, root) and compares them: ranks that disagree all
raise ``CollectiveMismatch`` naming what each rank passed, instead of exchanging bytes of
different meanings or waiting on each other forever.

mpi4py is imported by ``init`` (first use), not with this module: importing
``fusegrad.distributed`` starts no MPI, and works where mpi4py is missing.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusegrad.distributed.errors import (
    INSTALL,
    CollectiveMismatch,
    CollectiveTimeout,
    DistributedError,
    MPIUnavailable,
)
from fusegrad.errors import InvalidValue

#: seconds a collective may take before it is declared lost (0: wait forever)
TIMEOUT_ENV = "FUSEGRAD_MPI_TIMEOUT"
DEFAULT_TIMEOUT = 60.0
#: large arrays are reduced in pieces of this many bytes, several in flight at once: MPI's
#: non-blocking reductions run much slower on one huge buffer than on pieces of a few MB
CHUNK_BYTES = 4 << 20
#: after this long waiting, poll every millisecond instead of spinning (a rank far behind)
SPIN_SECONDS = 0.05


@dataclass
class World:
    """The communicator of all ranks, and whether a collective was lost (then: abort at exit)."""

    mpi: Any  # the mpi4py.MPI module
    comm: Any  # MPI.COMM_WORLD
    rank: int
    size: int
    timeout: float
    failed: bool = False
    #: arrays of collectives that timed out: MPI may still write into them, so they stay alive
    abandoned: list[Any] = field(default_factory=list)


_world: World | None = None


def _timeout_from_env() -> float:
    text = os.environ.get(TIMEOUT_ENV, "")
    if not text:
        return DEFAULT_TIMEOUT
    try:
        return float(text)
    except ValueError:
        raise InvalidValue(
            f"{TIMEOUT_ENV}={text!r} is not a number of seconds; set it to e.g. 60, or 0 to "
            "wait forever"
        ) from None


def init() -> World:
    """Start MPI (once) and return the world: this process's rank and the number of ranks.

    Run under a launcher (``mpirun -n 2 python train.py``) for several ranks; a plain
    ``python train.py`` is a world of one rank, where every collective returns its input.
    """
    global _world
    if _world is not None:
        return _world
    timeout = _timeout_from_env()
    try:
        from mpi4py import MPI  # optional dependency (fusegrad[mpi]); importing it starts MPI
    except (ImportError, OSError, RuntimeError) as e:
        raise MPIUnavailable(f"fusegrad.distributed needs MPI ({e}); {INSTALL}") from None
    comm = MPI.COMM_WORLD
    _world = World(MPI, comm, comm.Get_rank(), comm.Get_size(), timeout)
    atexit.register(_abort_if_failed)
    return _world


def _abort_if_failed() -> None:
    """At exit, after a lost collective: end every rank now (``MPI_Finalize`` would hang)."""
    if _world is not None and _world.failed:
        _world.comm.Abort(1)


def wait(requests: list[Any], what: str, keep: Any = None) -> None:
    """Wait for ``requests`` until the deadline; past it, raise ``CollectiveTimeout``.

    ``keep``: the arrays the requests read and write, held alive if they time out.
    """
    world = init()
    started = time.monotonic()
    while not world.mpi.Request.Testall(requests):
        waited = time.monotonic() - started
        if 0 < world.timeout < waited:
            world.failed = True
            world.abandoned.append((requests, keep))
            raise CollectiveTimeout(
                f"{what} on rank {world.rank} of {world.size} did not finish within "
                f"{world.timeout:g} s ({TIMEOUT_ENV}): another rank probably died, hangs, or "
                "called the collectives in another order. This rank cannot continue: the job "
                "is aborted when it exits"
            )
        if waited > SPIN_SECONDS:
            time.sleep(0.001)


def _collective(name: str, *args: Any, **kwargs: Any) -> list[Any]:
    """Start MPI's non-blocking ``I<name>`` and return its request; without a deadline
    (``FUSEGRAD_MPI_TIMEOUT=0``), run the blocking ``<name>`` and return no request: MPI's
    blocking collectives have their own algorithms, faster on large buffers."""
    world = init()
    if world.timeout > 0:
        return [getattr(world.comm, "I" + name.lower())(*args, **kwargs)]
    getattr(world.comm, name)(*args, **kwargs)
    return []


def progress(requests: list[Any]) -> None:
    """Let MPI move the data of ``requests`` a little (it does only inside its calls)."""
    init().mpi.Request.Testall(requests)


def digest(text: str) -> int:
    """A 63-bit digest of ``text``, the same on every rank (Python's ``hash`` is salted)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little") >> 1


def agree(call: str, signature: str, count: int = 0) -> np.ndarray:
    """Check that every rank calls ``call`` with the same ``signature``; return each rank's
    ``count`` (all_gather's rows, which may differ).

    ``signature`` describes the call (dtype, shape, op, root) in words: when the ranks disagree,
    the words of each are gathered (a few bytes, pickled) and every rank raises
    ``CollectiveMismatch`` naming them.
    """
    world = init()
    mine = np.array([digest(f"{call}: {signature}"), count], dtype=np.int64)
    headers = np.empty((world.size, 2), dtype=np.int64)
    wait(_collective("Allgather", mine, headers), f"{call} (checking the ranks agree)", headers)
    if (headers[:, 0] != mine[0]).any():
        described = world.comm.allgather(f"{call}: {signature}")
        listing = "; ".join(f"rank {r} called {d}" for r, d in enumerate(described))
        raise CollectiveMismatch(
            f"the ranks disagree: {listing}. Every rank must call the same collectives in the "
            "same order, with tensors of the same shape and dtype"
        )
    return headers[:, 1]


def _flat_pieces(array: np.ndarray) -> list[np.ndarray]:
    """``array`` (contiguous) as flat views of at most ``CHUNK_BYTES`` each."""
    flat = array.reshape(-1)
    step = max(1, CHUNK_BYTES // max(1, array.itemsize))
    return [flat[i : i + step] for i in range(0, flat.size, step)]


def start_allreduce(array: np.ndarray, op: str) -> list[Any]:
    """Start reducing ``array`` in place over the ranks; returns the requests to wait for."""
    world = init()
    mpi_op = {"sum": world.mpi.SUM, "max": world.mpi.MAX, "min": world.mpi.MIN}[op]
    if world.timeout <= 0:
        return _collective("Allreduce", world.mpi.IN_PLACE, array.reshape(-1), op=mpi_op)
    return [world.comm.Iallreduce(world.mpi.IN_PLACE, p, op=mpi_op) for p in _flat_pieces(array)]


def start_broadcast(array: np.ndarray, root: int) -> list[Any]:
    """Start copying ``array`` of rank ``root`` into ``array`` of every rank (as raw bytes)."""
    world = init()
    raw = array.reshape(-1).view(np.uint8)  # a view: the bytes land in ``array``
    if world.timeout <= 0:
        return _collective("Bcast", raw, root=root)
    return [world.comm.Ibcast(p, root=root) for p in _flat_pieces(raw)]


def allgather_rows(array: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Every rank's ``array`` (rank r's has ``rows[r]`` rows, the rest of its shape the same),
    stacked along the first axis in rank order. Moved as raw bytes."""
    world = init()
    row_bytes = array.itemsize * int(np.prod(array.shape[1:], dtype=np.int64))
    out = np.empty((int(rows.sum()), *array.shape[1:]), dtype=array.dtype)
    counts = [int(r) * row_bytes for r in rows]
    displacements = np.cumsum([0] + counts[:-1]).tolist()
    send = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
    receive = [out.reshape(-1).view(np.uint8), counts, displacements, world.mpi.BYTE]
    wait(_collective("Allgatherv", send, receive), "all_gather", (send, out))
    return out


def barrier() -> None:
    """Wait until every rank has called ``barrier`` (or the deadline passes)."""
    wait(_collective("Barrier"), "barrier")


def check_root(root: int) -> None:
    """A clear error for a root that is no rank."""
    world = init()
    if not isinstance(root, int) or not 0 <= root < world.size:
        raise DistributedError(
            f"broadcast root {root!r} is not a rank of this world of {world.size}; pass "
            f"0..{world.size - 1}"
        )
