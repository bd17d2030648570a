"""Fixtures shared by every test: the devices core's tests run on."""

from __future__ import annotations

import pytest

#: The devices core's op tests compare: the interpreter (the oracle) and compiled C.
DEVICES = ["PYTHON", "CPU"]


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    """Each device the core tests run on."""
    return request.param
