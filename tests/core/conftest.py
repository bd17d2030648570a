"""Markers of core's tests."""

from __future__ import annotations


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "empty_read: the case reads a size-0 buffer in a kernel")
