"""Tests of ``fusegrad_opencl/__init__.py``: the devices announced, the probe's reasons, and whole
programs (training included) on OPENCL with the CPU's tolerances."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad_opencl
from fusegrad import Device, Tensor, dtypes
from fusegrad.errors import UnsupportedOp


@pytest.fixture
def fresh_survey():
    fusegrad_opencl.survey.cache_clear()
    yield
    fusegrad_opencl.survey.cache_clear()


def test_probe_says_pyopencl_is_missing(fresh_survey, monkeypatch):
    monkeypatch.setattr(fusegrad_opencl.importlib.util, "find_spec", lambda name: None)
    (spec,) = fusegrad_opencl.fusegrad_devices()
    assert spec.unavailable() == "pyopencl not installed (pip install fusegrad-opencl)"


def test_probe_says_there_is_no_platform(fresh_survey, monkeypatch):
    import pyopencl as cl

    from fusegrad_opencl import device

    def no_platform():
        raise cl.LogicError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")

    monkeypatch.setattr(device, "find_devices", no_platform)
    (spec,) = fusegrad_opencl.fusegrad_devices()
    assert spec.unavailable().startswith("no OpenCL platform (clGetPlatformIDs failed")


def test_one_instance_per_device(cl_device):
    from fusegrad_opencl.device import find_devices

    spec = Device.specs()["OPENCL"]
    assert spec.instances() == len(find_devices()) >= 1
    assert Device["OPENCL:0"] is Device["OPENCL"]
    with pytest.raises(Exception, match=f"OPENCL has {spec.instances()} device"):
        Device[f"OPENCL:{spec.instances()}"]


def test_ranks_below_the_cpu_backend_and_discovery_imports_no_pyopencl():
    code = (
        "import sys, fusegrad; from fusegrad import Device; specs = Device.specs(); "
        "assert 'pyopencl' not in sys.modules, 'discovery imported pyopencl'; "
        "assert specs['OPENCL'].priority < specs['CPU'].priority; "
        "Device.DEFAULT; assert 'pyopencl' not in sys.modules, 'DEFAULT imported pyopencl'"
    )
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_float16_is_refused_without_cl_khr_fp16(cl_device):
    if "cl_khr_fp16" in cl_device.extensions:
        pytest.skip("this device has cl_khr_fp16")
    with pytest.raises(UnsupportedOp, match="device OPENCL cannot hold float16"):
        Tensor([1.0, 2.0], device="OPENCL").cast(dtypes.float16).numpy()


def test_matmul_softmax_chain_matches_cpu(cl_device):
    rng = np.random.default_rng(0)
    a, b = (
        rng.standard_normal((33, 17)).astype(np.float32),
        rng.standard_normal((17, 9)).astype(np.float32),
    )
    got = [
        ((Tensor(a, device=d) @ Tensor(b, device=d)).relu().softmax(-1) * 2 - 1).numpy()
        for d in ("CPU", "OPENCL")
    ]
    np.testing.assert_allclose(got[1], got[0], rtol=1e-5, atol=1e-6)


@pytest.fixture
def opencl_default(cl_device):
    before = Device.DEFAULT
    Device.DEFAULT = "OPENCL"
    yield
    Device.DEFAULT = before


def test_training_runs_on_opencl(opencl_default):
    """The core training tests, with OPENCL as the default device."""
    from core.nn import test_training

    assert Tensor([1.0]).device == "OPENCL"
    test_training.test_mlp_memorises_a_batch()
    test_training.test_cnn_with_batchnorm_memorises_a_batch()
    test_training.test_reading_the_loss_before_backward_keeps_its_graph()
