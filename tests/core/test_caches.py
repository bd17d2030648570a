"""caches.py: every in-memory cache has one owner, and ``fusegrad.reset_caches()`` empties all;
a realize afterwards plans and compiles again and gives the same values."""

from __future__ import annotations

import subprocess
import sys

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
    names = {"plans", "kernel runners", "open devices", "broadcast scalars", "pool moves"}
    assert names | {"causal masks"} <= set(caches.names())


def test_after_a_reset_a_realize_plans_and_compiles_again(device, restored):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    first = (Tensor(x, device=device) * 3 + 1).sum(1).numpy()
    Tensor(x, device=device).reshape(1, 1, 2, 3).max_pool2d((1, 2)).realize()
    q = Tensor(x, device=device).reshape(1, 2, 3)
    q.scaled_dot_product_attention(q, q, is_causal=True).realize()
    assert realize._plans and realize._runners and Device._open and tensor_nn._POOL_MOVES
    assert tensor_nn._CAUSAL_MASKS
    fusegrad.reset_caches()
    assert not realize._plans and not realize._runners and not Device._open
    assert not ops._SCALARS and not tensor_nn._POOL_MOVES and not tensor_nn._CAUSAL_MASKS
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


def test_a_causal_mask_is_built_once_per_size(device):
    """Attention's causal mask is kept per (queries, keys, device): the second call takes the
    same node (no ops run to build it), and each size its own mask, as torch's."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    for rows, cols in ((3, 3), (3, 5), (3, 3)):
        q, k = rng.standard_normal((2, rows, 4), np.float32), rng.standard_normal((2, cols, 4))
        k = k.astype(np.float32)
        got = Tensor(q, device=device).scaled_dot_product_attention(
            Tensor(k, device=device), Tensor(k, device=device), is_causal=True
        )
        want = torch.nn.functional.scaled_dot_product_attention(
            torch.tensor(q), torch.tensor(k), torch.tensor(k), is_causal=True
        )
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6)
    mask = tensor_nn._CAUSAL_MASKS[(3, 5, Tensor(q, device=device).device)]
    again = Tensor(q, device=device)._causal_mask(3, 5)
    assert again.uop is mask and again.dtype == fusegrad.dtypes.bool
    np.testing.assert_array_equal(again.numpy(), np.tril(np.ones((3, 5), bool)))


def test_nodes_held_by_a_module_cache_die_quietly_at_exit():
    """A module's cache of nodes (the causal masks) lets them die at exit after Python has
    emptied uop/ops.py's names: each node's callback once failed there, printing an
    AttributeError per node on stderr."""
    program = (
        "from fusegrad import Tensor\n"
        "q = Tensor.ones(4, 4)\n"
        "scores = q.scaled_dot_product_attention(q, q, is_causal=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert done.returncode == 0 and done.stderr == ""
