"""Out-of-range indices raise IndexError at the next read (tensor/bounds.py), naming the op, the
index and the valid range; in-range indices cost no read of their own; CHECK_BOUNDS=0 skips."""

from __future__ import annotations

import pytest

from fusegrad import Tensor, TinyJit, nn
from fusegrad.engine.realize import GlobalCounters
from fusegrad.helpers import context
from fusegrad.tensor import bounds

X = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]

#: (name, the program with a bad index, the same program with good ones, message pattern)
CASES = [
    (
        "gather",
        lambda: Tensor(X).gather(1, Tensor([[5], [0]])),
        lambda: Tensor(X).gather(1, Tensor([[2], [0]])),
        r"gather: index 5 is out of bounds for dim 1 \(size 3\): valid indices are 0\.\.2",
    ),
    (
        "gather-negative",
        lambda: Tensor(X).gather(0, Tensor([[-1, 0, 0]])),
        lambda: Tensor(X).gather(0, Tensor([[1, 0, 0]])),
        r"gather: index -1 is out of bounds",
    ),
    (
        "scatter",
        lambda: Tensor.zeros(3).scatter(0, Tensor([0, 4]), Tensor([1.0, 2.0])),
        lambda: Tensor.zeros(3).scatter(0, Tensor([0, 2]), Tensor([1.0, 2.0])),
        r"scatter: index 4 is out of bounds for dim 0 \(size 3\)",
    ),
    (
        "scatter_reduce",
        lambda: Tensor.zeros(3).scatter_reduce(0, Tensor([7]), Tensor([1.0]), "sum"),
        lambda: Tensor.zeros(3).scatter_reduce(0, Tensor([2]), Tensor([1.0]), "sum"),
        r"scatter: index 7",
    ),
    (
        "advanced-indexing",
        lambda: Tensor(X)[Tensor([0, 2])],
        lambda: Tensor(X)[Tensor([0, -2])],
        r"indexing: index 2 is out of bounds for dim 0 \(size 2\): valid indices are -2\.\.1",
    ),
    (
        "advanced-indexing-negative",
        lambda: Tensor(X)[:, Tensor([-4])],
        lambda: Tensor(X)[:, Tensor([-3])],
        r"indexing: index -4 is out of bounds for dim 1 \(size 3\)",
    ),
    (
        "index_select",
        lambda: Tensor(X).index_select(1, Tensor([3])),
        lambda: Tensor(X).index_select(1, Tensor([1])),
        r"index 3 is out of bounds",
    ),
    (
        "embedding",
        lambda: Tensor([0, 3]).embedding(Tensor.ones(3, 2)),
        lambda: Tensor([0, 2]).embedding(Tensor.ones(3, 2)),
        r"embedding: index 3 is out of bounds for the 3 rows of the weight",
    ),
    (
        "nn.Embedding",
        lambda: nn.Embedding(4, 2)(Tensor([5])),
        lambda: nn.Embedding(4, 2)(Tensor([3])),
        r"Embedding: index 5 is out of bounds for the 4 rows of the embedding",
    ),
    (
        "one_hot",
        lambda: Tensor([1, 7]).one_hot(3),
        lambda: Tensor([1, 2]).one_hot(3),
        r"one_hot: index 7 is out of bounds for 3 classes",
    ),
    (
        "one_hot-negative",
        lambda: Tensor([-1, 0]).one_hot(3),
        lambda: Tensor([1, 0]).one_hot(3),
        r"one_hot: index -1",
    ),
    (
        "cross_entropy",
        lambda: Tensor(X).cross_entropy(Tensor([0, 3])),
        lambda: Tensor(X).cross_entropy(Tensor([0, -100])),  # ignore_index is no class
        r"cross_entropy: index 3 is out of bounds for the 3 classes \(or ignore_index=-100\)",
    ),
    (
        "sparse_categorical_crossentropy",
        lambda: Tensor(X).sparse_categorical_crossentropy(Tensor([1, 3])),
        lambda: Tensor(X).sparse_categorical_crossentropy(Tensor([1, -1])),  # -1: ignored
        r"sparse_categorical_crossentropy: index 3 is out of bounds for the 3 classes",
    ),
    (
        "nll_loss",
        lambda: Tensor(X).log_softmax(1).nll_loss(Tensor([-5, 0])),
        lambda: Tensor(X).log_softmax(1).nll_loss(Tensor([2, 0])),
        r"nll_loss: index -5",
    ),
    (
        "index_add",
        lambda: Tensor.zeros(3).index_add(0, Tensor([5]), Tensor([1.0])),
        lambda: Tensor.zeros(3).index_add(0, Tensor([2]), Tensor([1.0])),
        r"index_add: index 5 is out of bounds for dim 0 \(size 3\)",
    ),
    (
        "index_fill",
        lambda: Tensor.zeros(3).index_fill(0, Tensor([3]), 1.0),
        lambda: Tensor.zeros(3).index_fill(0, Tensor([1]), 1.0),
        r"index_fill: index 3",
    ),
    (
        "max_unpool",
        lambda: Tensor([[5.0, 2.0]]).max_unpool1d(Tensor([[1, 9]]), 2),
        lambda: Tensor([[5.0, 2.0]]).max_unpool1d(Tensor([[1, 2]]), 2),
        r"scatter: index 9 is out of bounds",
    ),
]
IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("name, bad, good, message", CASES, ids=IDS)
def test_an_index_out_of_range_raises_index_error_at_the_read(name, bad, good, message):
    out = bad()  # building the graph reads nothing, so nothing is raised yet
    with pytest.raises(IndexError, match=message) as raised:
        out.numpy()
    assert "CHECK_BOUNDS=0" in str(raised.value)  # the message says how to skip the check
    good().numpy()  # good indices pass, and the failed check is not raised twice


@pytest.mark.parametrize("name, bad, good, message", CASES[:4], ids=IDS[:4])
def test_check_bounds_0_skips_the_checks(name, bad, good, message):
    with context(CHECK_BOUNDS=0):
        bad().numpy()  # (out-of-range indices then pick nothing, as before)


def test_the_check_fires_at_the_next_read_of_any_tensor():
    Tensor(X).gather(1, Tensor([[5], [0]]))  # never read itself
    with pytest.raises(IndexError, match="gather: index 5"):
        Tensor([1, 2]).sum().item()
    assert Tensor([1, 2]).sum().item() == 3


def test_bad_indices_on_both_sides_are_both_named():
    with pytest.raises(IndexError, match=r"index 5 is out of bounds .* \(and -9 too\)"):
        Tensor([1.0, 2.0, 3.0])[Tensor([0, 4, 5, -9])].numpy()


def test_building_a_checked_op_runs_nothing():
    """The check waits for the read: building a cross-entropy no longer reads its labels back
    (it ran two reductions and a host read per call before)."""
    GlobalCounters.reset()
    loss = Tensor(X).cross_entropy(Tensor([0, 2]))
    assert GlobalCounters.kernel_count == 0
    assert abs(loss.item() - 1.4076059) < 1e-5


def test_a_tinyjit_replay_checks_the_indices_too():
    """TinyJit records the checks of the call it captures with its kernels; each replay queues
    them again, so a bad index in a replayed call still raises at the next read."""
    pick = TinyJit(lambda x, i: x.gather(1, i).realize())
    x = Tensor(X)
    for _ in range(3):  # run, capture, replay
        assert pick(x, Tensor([[2], [0]])).tolist() == [[3.0], [4.0]]
    out = pick(x, Tensor([[7], [0]]))  # a replay
    with pytest.raises(IndexError, match="gather: index 7 is out of bounds"):
        out.numpy()
    assert pick(x, Tensor([[1], [1]])).tolist() == [[2.0], [5.0]]


def test_replays_without_a_read_keep_one_check_waiting():
    """Each replay queues the recorded check again; it waits once, however many replays come
    before the next read (the list grew by one per replay)."""
    pick = TinyJit(lambda x, i: x.gather(1, i).realize())
    x, i = Tensor(X), Tensor([[2], [0]])
    for _ in range(3):
        pick(x, i).numpy()
    for _ in range(50):
        pick(x, i)
    assert len(bounds.waiting()) == 1
    assert pick(x, i).tolist() == [[3.0], [4.0]]
