"""Realizing the graph realized a moment ago again (the same nodes: the same expression of the
same buffers) reuses its plan without abstracting it (engine/realize.py ``_recent``), within a
bound on what that keeps alive."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from fusegrad import Tensor, caches
from fusegrad.engine import realize
from fusegrad.tensor.movement import buffer_of


@pytest.fixture
def counted(monkeypatch) -> list[int]:
    """How often the plan cache's key is computed (``abstract``), one count per realize."""
    calls = [0]
    original = realize.abstract

    def counting(roots):
        calls[0] += 1
        return original(roots)

    monkeypatch.setattr(realize, "abstract", counting)
    caches.reset()
    return calls


def test_the_same_expression_again_is_not_abstracted_again(counted):
    qn, kn = (np.random.default_rng(s).standard_normal((2, 16, 8), np.float32) for s in (0, 1))
    q, k = Tensor(qn), Tensor(kn)
    for _ in range(3):
        out = (q @ k.transpose(-1, -2)).numpy()
        np.testing.assert_allclose(out, qn @ np.swapaxes(kn, -1, -2), rtol=1e-5, atol=1e-5)
    assert counted[0] == 1
    (q + k).realize()  # another graph of the same buffers: planned
    assert counted[0] == 2


def test_a_reused_plan_reads_the_buffers_values_of_now(counted):
    """The plan is structure; the buffer is read when it runs: written in place in between,
    the next realize sees the new values."""
    x = Tensor(np.arange(6, dtype=np.float32))
    assert (x * 2).tolist() == [0, 2, 4, 6, 8, 10]
    buffer_of(x.uop).copyin(np.ones(6, np.float32))
    assert (x * 2).tolist() == [2] * 6
    x.assign(x + 1).realize()
    assert (x * 2).tolist() == [4] * 6
    assert counted[0] == 3  # x * 2 (the same nodes twice), the assign, x * 2 of x's new node


def test_only_a_few_small_graphs_are_kept(monkeypatch):
    """At most ``RECENT`` graphs, each reading at most ``RECENT_BYTES``: an input nothing else
    holds is freed once that many other graphs were realized after it, or at once when big."""
    monkeypatch.setattr(realize, "RECENT_BYTES", 4096)
    caches.reset()
    small, big = Tensor(np.ones(1024, np.float32)), Tensor(np.ones(1025, np.float32))
    small_buffer, big_buffer = (weakref.ref(buffer_of(t.uop)) for t in (small, big))
    (small * 3).realize()
    (big * 3).realize()
    del small, big
    gc.collect()
    assert big_buffer() is None, "a graph of more than RECENT_BYTES of inputs is not kept"
    assert small_buffer() is not None
    others = [Tensor(np.full(4, float(i), np.float32)) for i in range(realize.RECENT)]
    for other in others:
        (other + 1).realize()
    gc.collect()
    assert len(realize._recent) == realize.RECENT
    assert small_buffer() is None, "pushed out by RECENT other graphs"


def test_resetting_the_caches_forgets_them():
    x = Tensor(np.ones(4, np.float32))
    (x * 5).realize()
    assert realize._recent
    caches.reset()
    assert not realize._recent
