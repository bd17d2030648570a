"""``import fusegrad`` is light: it discovers no plugin, imports no backend runtime, loads no
shared library and starts no subprocess. Checked in a fresh interpreter, with plugins installed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from .conftest import FakePlugins, good_plugin

#: Run in a child: forbid subprocesses and record shared libraries loaded, then import fusegrad.
CHILD = textwrap.dedent("""
    import ctypes, json, os, subprocess, sys

    started, loaded = [], []

    class NoPopen(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            started.append(repr(args))
            raise AssertionError("import fusegrad started a subprocess")

    subprocess.Popen = NoPopen
    for name in ("system", "posix_spawn", "posix_spawnp", "fork", "execv", "execve"):
        if hasattr(os, name):
            setattr(os, name, lambda *a, _n=name, **k: started.append(_n))
    real_init = ctypes.CDLL.__init__
    ctypes.CDLL.__init__ = lambda self, name, *a, **k: (loaded.append(name), real_init(self, name,
    *a, **k))[1]

    before = set(sys.modules)
    import fusegrad

    with open("/proc/self/maps") as f:
        mapped = [line.split()[-1] for line in f if "fusegrad" in line or "memfd" in line]
    manager = sys.modules.get("fusegrad.plugin.manager")
    print(json.dumps({
        "started": started,
        "loaded": loaded,
        "mapped": mapped,
        "new_modules": sorted(set(sys.modules) - before),
        "discovered": manager is not None and manager._manager is not None,
    }))
""")

#: Modules of backend runtimes, the CPU backend, and the plugin machinery itself.
HEAVY = (
    "fusegrad_cpu",
    "fake_good",
    "pyopencl",
    "wgpu",
    "pycuda",
    "cuda",
    "Metal",
    "pluggy",
    "fusegrad.plugin.manager",
    "fusegrad.runtime.python_plugin",
    "importlib.metadata",
)


def import_in_child(env: dict[str, str] | None = None) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # no warning either: no plugin was even looked at
    return json.loads(done.stdout)


def check_light(report: dict) -> None:
    assert report["started"] == []
    assert report["loaded"] == []
    assert report["mapped"] == []
    assert not report["discovered"]
    heavy = [m for m in report["new_modules"] if m.split(".")[0] in HEAVY or m in HEAVY]
    assert heavy == []
    assert "fusegrad.tensor" in report["new_modules"]  # the import did happen


def test_import_fusegrad_is_light(fake_plugins: FakePlugins):
    check_light(import_in_child(fake_plugins.subprocess_env()))


def test_import_fusegrad_is_light_with_plugins_installed(fake_plugins: FakePlugins):
    fake_plugins.install("fake_good", good_plugin())
    fake_plugins.install("fake_broken", 'raise ImportError("never imported at import time")\n')
    check_light(import_in_child(fake_plugins.subprocess_env()))


def test_the_check_would_see_a_subprocess():
    """The child's guard works: starting a subprocess after the import is caught."""
    child = CHILD.replace(
        "import fusegrad\n",
        "import fusegrad\ntry:\n    subprocess.run(['true'])\nexcept AssertionError:\n    pass\n",
    )
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, timeout=120
    )
    assert json.loads(done.stdout)["started"] != []
