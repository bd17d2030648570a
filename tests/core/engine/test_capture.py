"""engine/capture.py: TinyJit's recording lives in a context object, not in other modules'
globals; it ends with its call, by an error too, and captures nest."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from fusegrad import Tensor, TinyJit, Variable
from fusegrad.engine import capture
from fusegrad.jit import JitError


def test_a_capture_records_into_every_capture_around_it():
    with capture.capturing() as outer:
        with capture.capturing() as inner:
            assert capture.active() is inner
            inner.launched("runner", ["buffer"])
            inner.assigned("tensor", "graph")
        assert capture.active() is outer
        outer.launched("outer runner", [])
    assert capture.active() is None
    assert inner.launches == [("runner", ["buffer"])] and inner.assigns == [("tensor", "graph")]
    assert outer.launches == [("runner", ["buffer"]), ("outer runner", [])]
    assert outer.assigns == [("tensor", "graph")]


def test_a_capture_ends_when_its_block_raises():
    with pytest.raises(ZeroDivisionError), capture.capturing():
        raise ZeroDivisionError
    assert capture.active() is None


def test_another_thread_sees_no_capture():
    seen = []
    with capture.capturing():
        thread = threading.Thread(target=lambda: seen.append(capture.active()))
        thread.start()
        thread.join()
    assert seen == [None]


def test_a_capture_does_not_record_later_realizes():
    f = TinyJit(lambda a: (a * 3).realize())
    for _ in range(3):
        f(Tensor([1.0, 2.0]))
    launches = len(f.launches)
    assert capture.active() is None
    assert (Tensor([1.0, 2.0]) + 5).tolist() == [6.0, 7.0]
    w = Tensor([1.0]).realize()
    w.assign(w + 1).realize()  # an assign outside a capture is not logged anywhere
    assert len(f.launches) == launches and f(Tensor([2.0, 2.0])).tolist() == [6.0, 6.0]


def test_a_failing_capture_leaves_nothing_behind():
    calls = []

    def fn(a: Tensor) -> Tensor:
        calls.append(1)
        if len(calls) == 2:  # the capturing call
            raise ValueError("boom")
        return (a + 1).realize()

    f = TinyJit(fn)
    f(Tensor([1.0]))
    with pytest.raises(ValueError, match="boom"):
        f(Tensor([1.0]))
    assert capture.active() is None
    assert (Tensor([4.0]) * 2).tolist() == [8.0]


def test_a_refused_capture_leaves_nothing_behind():
    n = Variable("n", 1, 8)
    f = TinyJit(lambda a: (a.reshape(n.bind(2), 2) + 1).realize())
    f(Tensor([1.0] * 4))
    with pytest.raises(JitError, match="bound inside the function"):
        f(Tensor([1.0] * 4))
    assert capture.active() is None and f.calls == 0
    assert (Tensor([1.0]) - 1).tolist() == [0.0]


@pytest.mark.parametrize("warm_inner", [False, True])
def test_a_jitted_function_inside_another_replays_right(warm_inner):
    """The outer capture sees the inner function's kernels, whether the inner one captures
    during it (it records into both) or had captured before (it runs instead of replaying)."""
    inner = TinyJit(lambda x: (x * 2).realize())
    if warm_inner:
        for _ in range(3):
            inner(Tensor([0.0, 0.0]))
    outer = TinyJit(lambda x: (inner(x) + 1).realize())
    for i in range(5):
        x = np.array([float(i), -float(i)], np.float32)
        np.testing.assert_array_equal(outer(Tensor(x)).numpy(), x * 2 + 1)
    assert outer.calls == 2 and len(outer.launches) >= 2
    np.testing.assert_array_equal(inner(Tensor([3.0, 4.0])).numpy(), [6.0, 8.0])
