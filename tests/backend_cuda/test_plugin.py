"""Tests of ``fusegrad_cuda/__init__.py``: the probe says what is missing; runtime tests need a
GPU."""

from __future__ import annotations

import pytest
from kernel_corpus import check_add_and_matmul

import fusegrad_cuda
from fusegrad import Device


@pytest.fixture
def fresh_survey():
    fusegrad_cuda.survey.cache_clear()
    yield
    fusegrad_cuda.survey.cache_clear()


def test_probe_names_each_missing_piece(fresh_survey, monkeypatch):
    monkeypatch.setattr(fusegrad_cuda.ctypes.util, "find_library", lambda name: None)
    monkeypatch.setattr(fusegrad_cuda.importlib.util, "find_spec", lambda name: None)
    (spec,) = fusegrad_cuda.fusegrad_devices()
    assert spec.unavailable() == (
        "no CUDA driver (libcuda.so not found: install the NVIDIA driver); "
        "pycuda not installed (pip install fusegrad-cuda[runtime])"
    )


def test_probe_names_only_what_is_missing(fresh_survey, monkeypatch):
    monkeypatch.setattr(fusegrad_cuda.ctypes.util, "find_library", lambda name: "libcuda.so.1")
    monkeypatch.setattr(fusegrad_cuda.importlib.util, "find_spec", lambda name: None)
    assert fusegrad_cuda.survey()[1] == "pycuda not installed (pip install fusegrad-cuda[runtime])"


def test_no_import_of_pycuda_when_it_cannot_run():
    import sys

    if fusegrad_cuda.survey()[1] is not None:
        assert "pycuda" not in sys.modules


@pytest.fixture
def cuda_device():
    why = Device.specs()["CUDA"].unavailable()
    if why is not None:
        pytest.skip(f"CUDA unavailable: {why}")
    return "CUDA"


def test_add_and_matmul_on_the_gpu(cuda_device):
    check_add_and_matmul(cuda_device)
