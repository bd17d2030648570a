"""Tests of ``fusegrad_cuda/__init__.py``: the probe says what is missing; runtime tests need a
GPU."""

from __future__ import annotations

import pytest
from kernel_corpus import check_add_and_matmul

import fusegrad_cuda
from fusegrad import Device
from fusegrad_cuda import driver
from fusegrad_cuda.driver import CUDAError


@pytest.fixture
def fresh_survey():
    fusegrad_cuda.survey.cache_clear()
    yield
    fusegrad_cuda.survey.cache_clear()


def test_probe_names_a_missing_driver(fresh_survey, monkeypatch):
    monkeypatch.setattr(fusegrad_cuda, "find_driver", lambda: None)
    (spec,) = fusegrad_cuda.fusegrad_devices()
    assert spec.unavailable() == "no CUDA driver (libcuda.so not found: install the NVIDIA driver)"


def test_a_driver_that_fails_to_start_says_so(fresh_survey, monkeypatch):
    def no_gpu():
        raise CUDAError("the CUDA driver's cuInit failed: no CUDA-capable device (error 100)", 100)

    monkeypatch.setattr(fusegrad_cuda, "find_driver", lambda: "libcuda.so.1")
    monkeypatch.setattr(fusegrad_cuda, "device_count", no_gpu)
    assert fusegrad_cuda.survey() == (
        1,
        "the CUDA driver failed to start: the CUDA driver's cuInit failed: "
        "no CUDA-capable device (error 100)",
    )


def test_the_driver_is_looked_for_beside_the_loader_cache(monkeypatch, tmp_path):
    (tmp_path / "libcuda.so.1").write_bytes(b"")
    monkeypatch.setattr(driver.ctypes.util, "find_library", lambda name: None)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(tmp_path))
    assert driver.find_driver() == str(tmp_path / "libcuda.so.1")


def test_no_driver_is_loaded_when_none_is_found(fresh_survey, monkeypatch):
    monkeypatch.setattr(fusegrad_cuda, "find_driver", lambda: None)
    monkeypatch.setattr(fusegrad_cuda, "device_count", lambda: pytest.fail("driver loaded"))
    assert fusegrad_cuda.survey()[0] == 1


@pytest.fixture
def cuda_device():
    why = Device.specs()["CUDA"].unavailable()
    if why is not None:
        pytest.skip(f"CUDA unavailable: {why}")
    return "CUDA"


def test_add_and_matmul_on_the_gpu(cuda_device):
    check_add_and_matmul(cuda_device)
