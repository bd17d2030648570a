"""Several processes, on one machine or many, over MPI (``pip install 'fusegrad[mpi]'``).

    mpirun -n 2 python train.py

    from fusegrad import distributed as dist
    dist.init()                                # rank and world size from MPI
    total = dist.all_reduce(t, op="sum")       # also broadcast, all_gather, barrier
    dist.broadcast_parameters(params)          # data-parallel training: equal start,
    dist.sync_gradients(params)                # then averaged gradients before each step

Tensors travel through host buffers with mpi4py's buffer interface (no pickling); results
are Tensors on the input's device and dtype. Every collective checks first that the ranks
agree on what they exchange (``CollectiveMismatch``) and waits at most
``FUSEGRAD_MPI_TIMEOUT`` seconds (``CollectiveTimeout``: a rank died or hangs). Importing
this package starts nothing: MPI starts on the first call, and where mpi4py or MPI is missing
that call raises ``MPIUnavailable`` naming what to install. See docs/distributed.md.
"""

from fusegrad.distributed.buckets import plan_buckets
from fusegrad.distributed.collectives import (
    all_gather,
    all_reduce,
    barrier,
    broadcast,
    rank,
    world_size,
)
from fusegrad.distributed.comm import TIMEOUT_ENV, World
from fusegrad.distributed.comm import init as init
from fusegrad.distributed.data_parallel import DataParallel, broadcast_parameters, sync_gradients
from fusegrad.distributed.errors import (
    CollectiveMismatch,
    CollectiveTimeout,
    DistributedError,
    MPIUnavailable,
)

__all__ = [
    "TIMEOUT_ENV",
    "CollectiveMismatch",
    "CollectiveTimeout",
    "DataParallel",
    "DistributedError",
    "MPIUnavailable",
    "World",
    "all_gather",
    "all_reduce",
    "barrier",
    "broadcast",
    "broadcast_parameters",
    "init",
    "plan_buckets",
    "rank",
    "sync_gradients",
    "world_size",
]
