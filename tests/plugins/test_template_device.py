"""The template device plugin (plugins/template-device) works as a third party would use it:
built into a fresh virtual environment with core, it passes the conformance suite, and once
uninstalled it leaves ``fusegrad devices`` clean."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: What the fresh environment needs besides core and the plugin; hatchling builds them there
#: (``--no-build-isolation``), so nothing is fetched per build.
TOOLS = ["hatchling", "numpy>=1.24", "pluggy>=1.3", "pytest>=8"]


def run(command: list, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, f"{command} failed:\n{done.stdout[-5000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.mark.slow
def test_template_in_a_fresh_venv(tmp_path: Path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "DEV", "PYTEST_ADDOPTS")
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], tmp_path, env)
    python, fusegrad = venv / "bin" / "python", venv / "bin" / "fusegrad"
    pip = [python, "-m", "pip", "install", "-q"]
    run([*pip, *TOOLS], tmp_path, env)
    plugin = ROOT / "plugins" / "template-device"
    run([*pip, "--no-build-isolation", "--no-deps", ROOT / "core", plugin], tmp_path, env)
    run([python, "-m", "pip", "check"], tmp_path, env)

    keywords = run(
        [
            python,
            "-c",
            "from importlib.metadata import metadata; "
            "print(metadata('fusegrad-template-device')['Keywords'])",
        ],
        tmp_path,
        env,
    )
    assert "fusegrad-backend-api-2" in keywords.stdout
    listed = run([fusegrad, "devices"], tmp_path, env).stdout
    assert re.search(r"template: fusegrad-template-device 0\.1\.0, .*backend API version 2", listed)
    assert "TEMPLATE" in listed and "CPU" not in listed  # core and this plugin only

    suite = run(
        [
            python,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--pyargs",
            "fusegrad.testing",
            "--fusegrad-device=TEMPLATE",
        ],
        tmp_path,
        env,
    ).stdout
    found = re.search(
        r"fusegrad conformance: TEMPLATE =+\n(\d+) passed, 0 failed, (\d+) skipped", suite
    )
    assert found and int(found[1]) >= 300, suite[-3000:]
    assert "the device cannot hold float64" in suite  # its declared capabilities, listed

    run([python, "-m", "pip", "uninstall", "-y", "-q", "fusegrad-template-device"], tmp_path, env)
    done = run([fusegrad, "devices"], tmp_path, env)
    assert "TEMPLATE" not in done.stdout and "template" not in done.stdout
    assert "error" not in done.stdout.lower() and done.stderr == "", done.stdout + done.stderr
    assert "default device: PYTHON" in done.stdout
