"""The core suite tests/core/test_fusion.py on WEBGPU, with the CPU's tolerances."""

from __future__ import annotations

from core.test_fusion import *  # noqa: F403 - the same tests, with this folder's ``device``
