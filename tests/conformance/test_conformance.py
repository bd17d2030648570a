"""Every first-party device installed here passes the conformance suite that ships in core
(``pytest --pyargs fusegrad.testing --fusegrad-device=NAME``), run as a third party runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from fusegrad.device import Device
from fusegrad.plugin.manager import plugins

#: Always checked: the oracle against itself, and the CPU backend this repository installs.
REQUIRED = ["PYTHON", "CPU"]


def first_party_devices() -> list[str]:
    """PYTHON, CPU, and every other available device of a ``fusegrad-*`` backend distribution."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        infos, specs = plugins().infos, Device.specs()
    found = [
        name
        for info in infos
        if info.distribution.startswith("fusegrad-") and "template" not in info.distribution
        for name in info.devices
        if specs[name].unavailable() is None
    ]
    return REQUIRED + [d for d in found if d not in REQUIRED]


def run_suite(device: str, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """The suite as a third party runs it, in a child Python, outside this repository."""
    env = {k: v for k, v in os.environ.items() if k not in ("DEV", "PYTEST_ADDOPTS")}
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "--pyargs",
        "fusegrad.testing",
        *args,
    ]
    if device:
        command.append(f"--fusegrad-device={device}")
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1500)


def summary(output: str, device: str) -> tuple[int, int, int]:
    """(passed, failed, skipped) from the suite's own summary section."""
    section = output.partition(f"fusegrad conformance: {device}")[2]
    found = re.search(r"(\d+) passed, (\d+) failed, (\d+) skipped", section)
    assert found, f"no conformance summary for {device} in:\n{output[-3000:]}"
    return int(found[1]), int(found[2]), int(found[3])


@pytest.mark.parametrize("device", first_party_devices())
def test_device_passes_the_suite(device: str, tmp_path: Path):
    done = run_suite(device, tmp_path)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    passed, failed, skipped = summary(done.stdout, device)
    assert failed == 0 and passed >= 300, (passed, failed, skipped)
    # grid devices with shared memory run grouped reductions; the others skip, and say why
    renderer = Device[device].renderer
    skipped_locals = "skipped 1: the renderer declares no local memory" in done.stdout
    assert skipped_locals != (renderer.has_local and renderer.grid_dims is not None), done.stdout


def test_suite_is_inert_without_a_device(tmp_path: Path):
    """Installed in every pytest run, the suite only skips unless --fusegrad-device is given."""
    done = run_suite("", tmp_path, "-rs")
    assert done.returncode == 0, done.stdout[-3000:]
    assert re.search(r"^\d+ skipped in ", done.stdout.splitlines()[-1]), done.stdout[-500:]
    assert "give --fusegrad-device=NAME to run it" in done.stdout


def test_unknown_device_is_one_clear_error(tmp_path: Path):
    done = run_suite("NOSUCHDEVICE", tmp_path)
    assert done.returncode != 0
    assert "--fusegrad-device=NOSUCHDEVICE: no installed backend provides 'NOSUCHDEVICE'" in (
        done.stderr + done.stdout
    )
