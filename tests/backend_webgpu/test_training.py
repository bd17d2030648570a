"""The core training suite (tests/core/nn/test_training.py) with WEBGPU as the default device."""

from __future__ import annotations

import pytest
from core.nn.test_training import *  # noqa: F403 - the same tests, run on Device.DEFAULT

from fusegrad import Device, dtypes


@pytest.fixture(autouse=True)
def _webgpu_by_default():
    previous = Device._default
    Device.DEFAULT = "WEBGPU"
    yield
    Device._default = previous


@pytest.fixture(autouse=True)
def _batchnorm_needs_int64(request):
    """BatchNorm keeps ``num_batches_tracked`` in int64, as PyTorch's state dicts do: an adapter
    without shader-int64 (OpenGL) refuses it with a clear error (UnsupportedOp)."""
    if (
        "batchnorm" in request.node.name
        and dtypes.int64 not in Device["WEBGPU"].renderer.supported_dtypes
    ):
        pytest.skip("this adapter has no shader-int64, which BatchNorm's counter needs")
