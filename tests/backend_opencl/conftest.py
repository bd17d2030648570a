"""Fixtures for the OpenCL backend's tests: the first OpenCL device, skipped where there is none."""

from __future__ import annotations

import pytest

pytest.importorskip("pyopencl", reason="pyopencl not installed (pip install fusegrad-opencl)")

from fusegrad_opencl import survey  # noqa: E402


@pytest.fixture(scope="session")
def cl_device():
    """The opened ``OPENCL`` device (PoCL's CPU device in CI)."""
    _, _, why = survey()
    if why is not None:
        pytest.skip(f"OPENCL unavailable: {why}")
    from fusegrad_opencl.device import open_device

    return open_device("OPENCL")
