"""The core training suite (tests/core/nn/test_training.py) with WEBGPU as the default device."""

from __future__ import annotations

import pytest
from core.nn.test_training import *  # noqa: F403 - the same tests, run on Device.DEFAULT

from fusegrad import Device


@pytest.fixture(autouse=True)
def _webgpu_by_default():
    previous = Device._default
    Device.DEFAULT = "WEBGPU"
    yield
    Device._default = previous
