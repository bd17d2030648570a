"""mypy passes on core (the package and the hook specifications a backend implements), with the
settings of pyproject.toml. The development set-up (scripts/setup.sh) installs mypy."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_passes_on_core():
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "core/src/fusegrad"],  # hookspecs.py included
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
