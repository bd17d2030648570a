"""mypy passes on core (the package and the hook specifications a backend implements), with the
settings of pyproject.toml. The development set-up (scripts/setup.sh) installs mypy."""

import subprocess
import sys
import tomllib
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


def test_no_module_is_excused():
    """No pyproject override switches mypy's errors off for a module: all of core is checked."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    excused = [o["module"] for o in config.get("overrides", []) if o.get("ignore_errors")]
    assert not excused, f"mypy errors ignored in {excused}"


def test_no_type_ignore_in_the_tensor_mixins():
    mixins = sorted((ROOT / "core/src/fusegrad/tensor").glob("*.py"))
    found = [
        f"{path.name}:{n}"
        for path in mixins
        if path.name not in ("base.py", "tensor.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "type: ignore" in line
    ]
    assert not found, f"# type: ignore in the mixins: {found}"
