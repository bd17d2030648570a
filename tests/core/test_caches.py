"""caches.py: every in-memory cache has one owner, and ``fusegrad.reset_caches()`` empties all;
a realize afterwards plans and compiles again and gives the same values."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad
from fusegrad import GlobalCounters, Tensor, caches
from fusegrad.device import Device
from fusegrad.engine import realize
from fusegrad.tensor import nn_ops as tensor_nn
from fusegrad.uop import ops


@pytest.fixture
def restored():
    """Put the caches back afterwards, so that later tests keep their compiled kernels."""
    saved = [(d, dict(d)) for d in (realize._plans, realize._runners, Device._open, ops._SCALARS)]
    yield
    for d, contents in saved:
        d.clear()
        d.update(contents)


def test_reset_caches_is_the_one_reset():
    assert fusegrad.reset_caches is caches.reset
    assert {"plans", "kernel runners", "open devices", "broadcast scalars", "pool moves"} <= set(
        caches.names()
    )


def test_after_a_reset_a_realize_plans_and_compiles_again(device, restored):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    first = (Tensor(x, device=device) * 3 + 1).sum(1).numpy()
    Tensor(x, device=device).reshape(1, 1, 2, 3).max_pool2d((1, 2)).realize()
    assert realize._plans and realize._runners and Device._open and tensor_nn._POOL_MOVES
    fusegrad.reset_caches()
    assert not realize._plans and not realize._runners and not Device._open
    assert not ops._SCALARS and not tensor_nn._POOL_MOVES
    GlobalCounters.reset()
    again = (Tensor(x, device=device) * 3 + 1).sum(1).numpy()
    np.testing.assert_array_equal(again, first)
    np.testing.assert_array_equal(first, (x * 3 + 1).sum(1))
    assert GlobalCounters.compiles >= 1 and realize._plans and realize._runners


def test_register_replaces_a_name():
    cleared = []
    caches.register("test cache", lambda: cleared.append(1))
    caches.register("test cache", lambda: cleared.append(2))
    try:
        caches._CLEARS["test cache"]()
        assert cleared == [2]
    finally:
        del caches._CLEARS["test cache"]
