"""Tests of ``fusegrad_metal/__init__.py``: the probe says why not; runtime tests need macOS."""

from __future__ import annotations

import sys

import pytest
from kernel_corpus import check_add_and_matmul

import fusegrad_metal
from fusegrad import Device


def test_probe_off_macos_names_the_platform(monkeypatch):
    fusegrad_metal.probe.cache_clear()
    monkeypatch.setattr(fusegrad_metal.sys, "platform", "linux")
    try:
        assert fusegrad_metal.probe() == "Metal needs macOS (this is linux)"
    finally:
        fusegrad_metal.probe.cache_clear()


def test_probe_on_macos_without_pyobjc(monkeypatch):
    fusegrad_metal.probe.cache_clear()
    monkeypatch.setattr(fusegrad_metal.sys, "platform", "darwin")
    monkeypatch.setattr(fusegrad_metal.importlib.util, "find_spec", lambda name: None)
    try:
        assert fusegrad_metal.probe().startswith("pyobjc-framework-Metal not installed")
    finally:
        fusegrad_metal.probe.cache_clear()


@pytest.fixture
def metal_device():
    why = Device.specs()["METAL"].unavailable()
    if why is not None:
        pytest.skip(f"METAL unavailable: {why}")
    return "METAL"


def test_add_and_matmul_on_the_gpu(metal_device):
    check_add_and_matmul(metal_device)


def test_metal_runtime_is_not_imported_off_macos():
    if sys.platform != "darwin":
        assert "Metal" not in sys.modules
