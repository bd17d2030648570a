"""The core suite tests/core/test_tensor_nn.py on WEBGPU, with the CPU's tolerances."""

from __future__ import annotations

from core.test_tensor_nn import *  # noqa: F403 - the same tests, with this folder's ``device``
