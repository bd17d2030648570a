"""What the MPI tests share: skip the importing module without ``mpirun`` or mpi4py, and the
environment ``mpirun`` needs in CI containers."""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest


def require_mpirun() -> str:
    """The path of ``mpirun``; skips the calling test module when it or mpi4py is missing."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip(
            "mpirun is missing: apt-get install openmpi-bin libopenmpi-dev", allow_module_level=True
        )
    if importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py is missing: pip install 'fusegrad[mpi]'", allow_module_level=True)
    return mpirun


def mpi_environment(**extra: str) -> dict[str, str]:
    """``os.environ`` plus what Open MPI needs as root in a container, then ``extra``."""
    return {
        **os.environ,
        "OMPI_ALLOW_RUN_AS_ROOT": "1",  # CI runs as root; mpirun refuses root without these
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "OMPI_MCA_btl_vader_single_copy_mechanism": "none",  # containers forbid CMA
        **extra,
    }
