"""``mpirun -n 2 python examples/mnist.py --distributed`` as a user runs it, for a few steps: it
ends well and prints a test accuracy. Skipped without MPI, mpi4py or the MNIST files."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from fusegrad.nn.datasets import mnist_folder

from .mpi_launch import mpi_environment, require_mpirun

REPOSITORY = Path(__file__).resolve().parents[2]
EXAMPLE = REPOSITORY / "examples" / "mnist.py"
MPIRUN = require_mpirun()


def mnist_data() -> Path | None:
    """A folder holding the MNIST files: ``$FUSEGRAD_DATA`` or the download cache, else the
    ``shared/data/mnist`` beside the repository (as ``scripts/mnist.sh`` looks); None if none."""
    for folder in (mnist_folder(None)[0], REPOSITORY.parent / "shared" / "data" / "mnist"):
        names = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte")
        if all((folder / f"{n}.gz").is_file() or (folder / n).is_file() for n in names):
            return folder
    return None


def test_mnist_example_trains_data_parallel_over_two_ranks(tmp_path: Path):
    if (data := mnist_data()) is None:
        pytest.skip("no MNIST files (set FUSEGRAD_DATA to a folder holding them)")
    environment = mpi_environment(CPU_THREADS="1")  # two ranks share the cores
    command = [
        *(MPIRUN, "-n", "2", "--oversubscribe", "--allow-run-as-root"),
        *(sys.executable, str(EXAMPLE), "--distributed", "--steps", "3", "--batch", "32"),
        *("--data", str(data), "--save", str(tmp_path / "mnist.safetensors")),
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=180
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "data-parallel over 2 MPI ranks" in done.stdout
    found = re.search(r"test accuracy (\d+\.\d+)%", done.stdout)
    assert found is not None, done.stdout[-3000:]
    assert 0 <= float(found.group(1)) <= 100
    assert (tmp_path / "mnist.safetensors").is_file()  # rank 0 saved the weights
