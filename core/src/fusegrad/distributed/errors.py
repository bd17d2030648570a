"""What a multi-process run can get wrong: no MPI here, a rank that stopped, ranks that disagree."""

from __future__ import annotations

from fusegrad.errors import FusegradError, ShapeError

#: what to install, said by every error that finds MPI missing
INSTALL = (
    "install an MPI library and mpi4py: apt-get install openmpi-bin libopenmpi-dev "
    "(or your cluster's MPI module), then pip install 'fusegrad[mpi]'"
)


class DistributedError(FusegradError, RuntimeError):
    """Base class of the errors of ``fusegrad.distributed``."""


class MPIUnavailable(DistributedError, ImportError):
    """mpi4py, or the MPI library it was built against, cannot be loaded."""


class CollectiveTimeout(DistributedError, TimeoutError):
    """A collective did not finish in ``FUSEGRAD_MPI_TIMEOUT`` seconds: a rank probably died or
    stopped calling collectives. The job is aborted when this process exits."""


class CollectiveMismatch(DistributedError, ShapeError):
    """The ranks called a collective with different shapes, dtypes or arguments (or called
    different collectives); every rank raises it, nothing was exchanged."""
