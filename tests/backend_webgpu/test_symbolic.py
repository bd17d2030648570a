"""Symbolic sizes (tests/core/test_symbolic_shapes.py) on WEBGPU: variables in a uniform."""

from __future__ import annotations

from core.test_symbolic_shapes import *  # noqa: F403 - the same tests, with this folder's ``device``
