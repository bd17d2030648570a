"""The core op suite (tests/core/test_tensor_ops.py) on WEBGPU, with the CPU's tolerances."""

from __future__ import annotations

from core.test_tensor_ops import *  # noqa: F403 - the same tests, with this folder's ``device``
