"""The ``fusegrad devices`` command (``fusegrad/__main__.py``), in text and JSON."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from fusegrad.__main__ import main
from fusegrad.device import Device

from .conftest import FakePlugins, devices_plugin, good_plugin

#: Swaps the PYTHON device's compiler for its own, like plugins/cpu-compiler-override for CPU.
COMPILER_SWAP = """
from fusegrad.plugin import BACKEND_API_VERSION, hookimpl
from fusegrad.runtime.python import PythonCompiler

FUSEGRAD_BACKEND_API = BACKEND_API_VERSION
FUSEGRAD_OVERRIDES = {"PYTHON": ["compiler"]}


class SwappedCompiler(PythonCompiler):
    identity = "swapped"


@hookimpl(tryfirst=True)
def fusegrad_compiler(device):
    return SwappedCompiler() if device.partition(":")[0] == "PYTHON" else None
"""
NOPE = 'DeviceSpec("NOPE", 1000, lambda: "libnope.so not found; install nope-runtime")'


@pytest.fixture
def installed(fake_plugins: FakePlugins) -> FakePlugins:
    """A good plugin with two FAKE devices, one whose device cannot be used, and a broken one."""
    fake_plugins.install("fake_good", good_plugin(count=2), dist="fake-good", version="2.5")
    fake_plugins.install("fake_nope", devices_plugin(f"[{NOPE}]"), dist="fake-nope")
    fake_plugins.install(
        "fake_broken", 'raise ImportError("libfake.so missing")\n', dist="fake-broken"
    )
    fake_plugins.install("fake_future", devices_plugin("[]", "999"), dist="fake-future")
    return fake_plugins


def run(capsys: pytest.CaptureFixture, *argv: str) -> str:
    assert main(list(argv)) == 0
    out, err = capsys.readouterr()
    assert err == ""  # plugin errors are part of the report, not Python warnings
    return out


def test_devices_lists_plugins_devices_and_errors(installed, capsys):
    out = run(capsys, "devices")
    lines = out.splitlines()
    assert lines[0] == "fusegrad 0.1.0 (backend API version 2)"
    assert (
        "  python: fusegrad 0.1.0, module fusegrad.runtime.python_plugin, "
        "built for backend API version 2"
    ) in lines
    assert "  fake_good: fake-good 2.5, module fake_good, built for backend API version 2" in lines
    fake = next(line for line in lines if line.strip().startswith("FAKE "))
    assert fake.split() == [
        "FAKE",
        "priority",
        "50",
        "available",
        "DEV=FAKE",
        "DEV=FAKE:1",
        "(default)",
    ]
    parts = lines[lines.index(fake) + 1]
    assert parts == "          parts: allocator, renderer, compiler, program from fake_good"
    assert "overrides" not in out and "WARNING" not in out
    nope = lines.index(next(line for line in lines if line.strip().startswith("NOPE ")))
    assert lines[nope].split()[3:] == ["unavailable", "DEV=NOPE"]
    assert lines[nope + 1].strip() == "why: libnope.so not found; install nope-runtime"
    assert not lines[nope + 2].strip().startswith("parts:")  # not asked: it cannot be used
    assert "      error: ImportError: libfake.so missing" in lines
    future = lines[
        lines.index(next(line for line in lines if line.startswith("  fake_future:"))) + 1
    ]
    assert "backend API version 999" in future and "speaks version 2" in future
    assert "built for backend API version 999" in out
    assert lines[-1] == (
        "default device: FAKE (the available device of highest priority; "
        "set DEV=NAME to choose another)"
    )
    assert sum("(default)" in line for line in lines) == 1


def test_devices_shows_the_default_chosen_by_dev(installed, capsys, monkeypatch):
    monkeypatch.setenv("DEV", "PYTHON")
    lines = run(capsys, "devices").splitlines()
    assert lines[-1] == "default device: PYTHON (chosen by DEV)"
    assert "(default)" in next(line for line in lines if line.strip().startswith("PYTHON "))


def test_devices_explains_a_bad_dev(installed, capsys, monkeypatch):
    monkeypatch.setenv("DEV", "FAKE:7")
    last = run(capsys, "devices").splitlines()[-1]
    assert last.startswith("default device: none (DEV=FAKE:7: no device 'FAKE:7'")


def test_devices_json(installed, capsys):
    report = json.loads(run(capsys, "devices", "--json"))
    assert report["backend_api_version"] == 2 and report["default"] == "FAKE"
    plugins = {p["name"]: p for p in report["plugins"]}
    assert plugins["fake_good"] == {
        "name": "fake_good",
        "distribution": "fake-good",
        "version": "2.5",
        "module": "fake_good",
        "api_version": 2,
        "error": None,
        "hook_errors": {},
        "devices": ["FAKE"],
    }
    assert plugins["fake_broken"]["error"] == "ImportError: libfake.so missing"
    assert plugins["fake_future"]["api_version"] == 999
    devices = {d["name"]: d for d in report["devices"]}
    assert devices["FAKE"]["dev"] == ["DEV=FAKE", "DEV=FAKE:1"] and devices["FAKE"]["count"] == 2
    assert devices["NOPE"]["available"] is False and "libnope.so" in devices["NOPE"]["reason"]
    assert devices["PYTHON"] == {
        "name": "PYTHON",
        "plugin": "python",
        "priority": 0,
        "count": 1,
        "available": True,
        "reason": None,
        "hardware": None,
        "dev": ["DEV=PYTHON"],
        "open_error": None,
        "parts": dict.fromkeys(["allocator", "renderer", "compiler", "program"], "python"),
        "overrides": [],
        "parts_error": None,
    }
    assert devices["NOPE"]["parts"] is None


def test_devices_says_loudly_which_plugin_overrides_a_part(installed, capsys):
    installed.install("fake_swap", COMPILER_SWAP, dist="fake-swap")
    out = run(capsys, "devices")
    lines = out.splitlines()
    python = next(line for line in lines if line.strip().startswith("PYTHON "))
    parts = lines[lines.index(python) + 1].strip()
    assert parts == (
        "parts: allocator, renderer, program from python; compiler from fake_swap (OVERRIDE)"
    )
    assert "      (offers no devices; OVERRIDES the compiler of PYTHON)" in lines
    assert (
        "  WARNING: plugin 'fake_swap' replaces the compiler of PYTHON (offered by 'python'); "
        "uninstall it to use the compiler of 'python'"
    ) in lines
    # and it is the part used
    assert type(Device["PYTHON"].compiler).__name__ == "SwappedCompiler"
    assert Device["PYTHON"].suppliers["compiler"] == "fake_swap"
    report = json.loads(run(capsys, "devices", "--json"))
    python = next(d for d in report["devices"] if d["name"] == "PYTHON")
    swap = {"part": "compiler", "plugin": "fake_swap", "replaces": "python"}
    assert python["overrides"] == [swap]


def test_python_dash_m_fusegrad_devices(installed):
    done = subprocess.run(
        [sys.executable, "-m", "fusegrad", "devices"],
        env=installed.subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for text in (
        "fake_good: fake-good 2.5",
        "DEV=FAKE:1",
        "DEV=PYTHON",
        "why: libnope.so",
        "error: ImportError: libfake.so missing",
        "default device: FAKE",
    ):
        assert text in done.stdout
    assert done.stderr == ""


@pytest.mark.skipif(shutil.which("fusegrad") is None, reason="the console script is not on PATH")
def test_console_script_help():
    env = {k: v for k, v in os.environ.items() if k != "DEV"}
    done = subprocess.run(
        ["fusegrad", "--help"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "devices" in done.stdout and "usage: fusegrad" in done.stdout


def test_devices_help(capsys):
    with pytest.raises(SystemExit) as e:
        main(["devices", "--help"])
    assert e.value.code == 0 and "--json" in capsys.readouterr().out


def test_no_command_prints_usage(capsys):
    assert main([]) == 2
    assert "devices" in capsys.readouterr().out
