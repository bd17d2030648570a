"""bench/gpt_matmuls.py: the GPT step's matmuls, built as the autograd reads their operands."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import gpt_matmuls  # noqa: E402
from bench_gpt import gpt  # noqa: E402

from fusegrad import Tensor  # noqa: E402

TINY = gpt.Config(layers=1, width=32, heads=2, context=8, vocab=64, batch=2)


def test_a_step_has_three_products_per_linear_layer_and_six_for_attention():
    """4 linear layers and the output layer, forward and both gradients, and attention's two
    forward and four backward products: 21, each a valid matmul of the step's sizes."""
    found = gpt_matmuls.products(gpt.Config())
    assert len(found) == 21 and len({name for name, *_ in found}) == 21
    for name, a, b, _, _ in found:
        assert a[-1] == b[-2] and a[:-2] == b[:-2], name
    shapes = {name: (a, b) for name, a, b, _, _ in found}
    assert shapes["fc dy @ w.T"] == ((512, 1024), (1024, 256))
    assert shapes["attn ds.T @ q"] == ((4, 4, 128, 128), (4, 4, 128, 64))


@pytest.mark.parametrize("product", gpt_matmuls.products(TINY), ids=lambda p: p[0])
def test_each_product_reads_its_transposed_operand_as_a_view(product):
    """The operand stored the other way round and read through ``.T``'s view (not a copy) gives
    the product of the logical shapes: fusegrad's equals numpy's."""
    _, sa, sb, ta, tb = product
    rng = np.random.default_rng(0)
    a, b = gpt_matmuls.stored(rng, sa, ta), gpt_matmuls.stored(rng, sb, tb)
    if ta:
        assert a.shape[-2:] == sa[-2:][::-1]
    left, right = gpt_matmuls.view(a, ta), gpt_matmuls.view(b, tb)
    assert left.shape == sa and right.shape == sb
    ours = gpt_matmuls.view(Tensor(a), ta) @ gpt_matmuls.view(Tensor(b), tb)
    np.testing.assert_allclose(ours.numpy(), left @ right, rtol=1e-4, atol=1e-4)


def test_back_to_back_times_the_two_in_turns_and_gives_each_a_first_quartile():
    """``alternated`` calls the two in turns (ours first, then theirs, with no pause), once each
    untimed, then ``calls`` timed calls each; each side's figure is its own first quartile."""
    order: list[str] = []
    quick = lambda: order.append("ours")  # noqa: E731
    slow = lambda: (order.append("theirs"), sum(range(20000)))  # noqa: E731
    ours, theirs = gpt_matmuls.alternated(quick, slow, 8)
    assert order == ["ours", "theirs"] * 9
    assert 0 < ours < theirs


def test_blocks_time_each_side_in_blocks_of_its_own_calls_and_keep_its_best(monkeypatch):
    """``spread_blocks`` gives each side of a pair blocks of its own calls (two untimed at
    least, then ``calls`` timed), the sides taking turns, who goes first alternating; each
    side's figure is its best block's first quartile."""
    monkeypatch.setattr(gpt_matmuls, "SETTLE_SECONDS", 0.0)
    monkeypatch.setattr(gpt_matmuls, "WARM_SECONDS", 0.0)
    order: list[str] = []
    quick = lambda: order.append("ours")  # noqa: E731
    slow = lambda: (order.append("theirs"), sum(range(20000)))  # noqa: E731
    ((ours, theirs),) = gpt_matmuls.spread_blocks([(quick, slow)], rounds=3, calls=4)
    ours_block, theirs_block = ["ours"] * 6, ["theirs"] * 6
    assert (
        order == ours_block + theirs_block + theirs_block + ours_block + ours_block + theirs_block
    )
    assert 0 < ours < theirs


def test_spread_blocks_give_every_pair_a_block_of_each_side_in_each_round(monkeypatch):
    """A round times one block of each side of every pair before the next round starts (who goes
    first alternating by round), so each pair's blocks are spread over the whole run; each side's
    figure is its own best block."""
    monkeypatch.setattr(gpt_matmuls, "SETTLE_SECONDS", 0.0)
    monkeypatch.setattr(gpt_matmuls, "WARM_SECONDS", 0.0)
    order: list[str] = []

    def side(name: str, work: int):
        return lambda: (order.append(name), sum(range(work)))

    pairs = [
        (side("a-ours", 10), side("a-theirs", 20000)),
        (side("b-ours", 20000), side("b-theirs", 10)),
    ]
    found = gpt_matmuls.spread_blocks(pairs, rounds=2, calls=2)
    blocks = [order[i] for i in range(0, len(order), 4)]  # a block: two untimed calls, two timed
    assert len(order) == 4 * 8 and all(order[i : i + 4] == [order[i]] * 4 for i in range(0, 32, 4))
    assert blocks == [
        "a-ours",
        "a-theirs",
        "b-ours",
        "b-theirs",
        "a-theirs",
        "a-ours",
        "b-theirs",
        "b-ours",
    ]
    (a_ours, a_theirs), (b_ours, b_theirs) = found
    assert a_ours < a_theirs and b_theirs < b_ours


def test_threads_must_be_positive_and_reach_both_sides():
    """``--threads 0`` is refused before anything is timed; ``--threads N`` becomes fusegrad's
    ``CPU_THREADS`` (``use_threads``, before the first tensor opens its CPU device)."""
    pytest.importorskip("torch")
    script = Path(gpt_matmuls.__file__)
    done = subprocess.run(
        [sys.executable, str(script), "--threads", "0"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2 and "expected a positive number of threads" in done.stderr
    probe = (
        f"import sys; sys.path.insert(0, {str(script.parent)!r}); sys.argv = ['gpt_matmuls.py']; "
        "import os, torch, gpt_matmuls; gpt_matmuls.use_threads(3, torch); "
        "print(os.environ['CPU_THREADS'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3"]
