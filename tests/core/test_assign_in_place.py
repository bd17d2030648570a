"""``Tensor.assign`` into a view of the first elements of a realized tensor writes in place:
the base tensor sees the values, no other buffer is made, and TinyJit replays the write with
a ``Variable`` length (a KV cache's rows)."""

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.errors import FusegradError
from fusegrad.jit import TinyJit
from fusegrad.uop.ops import Variable


def realized(values) -> Tensor:
    return Tensor(np.asarray(values, np.float32)).contiguous().realize()


def test_an_assign_into_the_first_rows_writes_the_base_tensors_buffer():
    cache = realized(np.zeros((4, 2)))
    buffer = cache._buffer()
    view = cache[:2].assign(Tensor([[1.0, 2.0], [3.0, 4.0]])).realize()
    assert view._buffer() is buffer and cache._buffer() is buffer
    assert cache.tolist() == [[1, 2], [3, 4], [0, 0], [0, 0]]
    assert view.tolist() == [[1, 2], [3, 4]]


def test_the_value_may_read_the_view_it_replaces():
    cache = realized(np.arange(8).reshape(4, 2))
    view = cache[:3]
    view.assign(view * 2 + 1).realize()
    assert cache.tolist() == [[1, 3], [5, 7], [9, 11], [6, 7]]


def test_a_leading_axis_of_one_keeps_the_view_a_prefix():
    cache = realized(np.zeros((1, 3, 2)))
    cache[:, :2].assign(Tensor.ones(1, 2, 2)).realize()
    assert cache.numpy()[0].tolist() == [[1, 1], [1, 1], [0, 0]]


def test_a_value_reading_the_view_out_of_order_is_refused_with_the_fix():
    cache = realized(np.arange(6).reshape(3, 2))
    view = cache[:2]
    with pytest.raises(FusegradError, match="contiguous"):
        view.assign(view.flip(0)).realize()
    assert cache.tolist() == [[0, 1], [2, 3], [4, 5]]  # nothing was written


def test_a_later_read_of_the_old_values_in_the_same_realize_is_refused():
    cache = realized(np.zeros((3, 2)))
    old_sum = cache.sum() + 0  # reads the whole old buffer
    view = cache[:2]
    view.assign(Tensor.ones(2, 2))
    with pytest.raises(FusegradError, match="realize that part first"):
        view.realize(old_sum)


def test_tinyjit_replays_the_write_at_a_variable_length_without_copies():
    cache = realized(np.zeros((8, 3)))
    length = Variable("length", 1, 8)

    def step(new: Tensor, last: Tensor) -> Tensor:
        n = last.shape[0]
        view = cache.shrink(((0, n), None))
        view.assign(last.reshape(n, 1).where(new.reshape(1, 3).expand(n, 3), view))
        return view.sum().realize(view)

    jitted = TinyJit(step)
    expected = np.zeros((8, 3), np.float32)
    for i in range(6):
        last = np.zeros(i + 1, np.float32)
        last[i] = 1
        out = jitted(
            Tensor(np.full(3, i + 1.0, np.float32)), Tensor(last).reshape(length.bind(i + 1))
        )
        expected[i] = i + 1
        assert out.item() == expected.sum()
        np.testing.assert_array_equal(cache.numpy(), expected)
    assert jitted.calls == 2 and jitted.assigned == []  # replayed, and nothing to copy back


def test_debug_4_prints_an_in_place_write(capsys, monkeypatch):
    """DEBUG=4's schedule names the slot an in-place write goes to (an input's buffer)."""
    from fusegrad.helpers import Context

    cache = realized(np.zeros((8, 4)))
    monkeypatch.setattr(Context, "DEBUG", 4)
    cache[:3].assign(Tensor.ones(3, 4)).realize()
    assert "(in place)" in capsys.readouterr().out
