"""Tests of ``fusegrad_cpu/__init__.py``: the entry point, the hooks, the probe."""

from __future__ import annotations

import subprocess
import sys
import warnings
from importlib import metadata

import numpy as np
import pytest

import fusegrad_cpu
from fusegrad.device import Device
from fusegrad.plugin import hookspecs, manager
from fusegrad_cpu.compiler import CCompiler
from fusegrad_cpu.device import CPUAllocator, CPUProgram


def test_entry_point_and_api_version():
    (entry,) = [e for e in metadata.entry_points(group="fusegrad") if e.name == "cpu"]
    assert entry.value == "fusegrad_cpu"
    assert fusegrad_cpu.FUSEGRAD_BACKEND_API == hookspecs.BACKEND_API_VERSION
    keywords = metadata.metadata("fusegrad-cpu")["Keywords"]
    assert f"fusegrad-backend-api-{hookspecs.BACKEND_API_VERSION}" in keywords


def test_importing_the_plugin_loads_nothing_heavy():
    code = "import sys, fusegrad_cpu; print(sorted(m for m in sys.modules if 'fusegrad_cpu.' in m))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("device", ["CPU", "cpu", "CPU:0"])
def test_hooks_answer_for_cpu(device):
    assert isinstance(fusegrad_cpu.fusegrad_allocator(device=device), CPUAllocator)
    assert isinstance(fusegrad_cpu.fusegrad_compiler(device=device), CCompiler)
    assert fusegrad_cpu.fusegrad_program(device=device) is CPUProgram
    assert fusegrad_cpu.fusegrad_renderer(device=device).device == device


@pytest.mark.parametrize("device", ["PYTHON", "OPENCL:1", "CPUX"])
def test_hooks_decline_other_devices(device):
    hooks = ("allocator", "compiler", "program", "renderer")
    assert [getattr(fusegrad_cpu, f"fusegrad_{h}")(device=device) for h in hooks] == [None] * 4


def test_probe_says_why_and_how(monkeypatch, tmp_path):
    assert fusegrad_cpu.probe() is None
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert "apt-get install clang" in fusegrad_cpu.probe()


def test_device_registry_opens_cpu_and_runs_a_kernel():
    manager.reset()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # another installed plugin may be broken
            spec = Device.specs()["CPU"]
            runtime = Device["cpu"]
        assert (spec.priority, spec.probe()) == (fusegrad_cpu.PRIORITY, None)
        source = "void twice(int* data0, const int* data1) { data0[0] = 2 * data1[0]; }"
        program = runtime.program("twice", runtime.compiler.compile(source))
        out, x = runtime.allocator.alloc(4), runtime.allocator.alloc(4)
        runtime.allocator.copyin(x, memoryview(np.array([21], np.int32)).cast("B"))
        program(out, x)
        assert out.view(np.int32)[0] == 42
    finally:
        manager.reset()
