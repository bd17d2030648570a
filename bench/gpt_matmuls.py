"""Every matmul of the GPT training step (examples/gpt.py), alone, fusegrad against torch.

    python bench/gpt_matmuls.py [--avx2] [--threads N] [--rounds N] [--back-to-back | --blocks]

The step's model (``gpt.Config()``): batch 4, context 128 (512 rows), width 256, 4 heads of
64, an MLP of 1024, a vocabulary of 1024. Each linear layer ``x @ w`` runs three products a
step: the forward, the input's gradient ``dy @ w.T`` and the weight's ``x.T @ dy`` (the output
layer reuses the token embedding transposed, ``x @ wte.T``, so its three read the other way
round). Attention runs six batched ones over (4, 4) heads: ``q @ k.T`` and ``p @ v`` forward,
``dout @ v.T``, ``p.T @ dout``, ``ds @ k`` and ``ds.T @ q`` backward. Each product here is
written as a user (or the autograd) writes it, with the transposed operand a view of a
contiguous tensor, and timed to a realized result: fusegrad's figure includes any layout copy
its plan makes.

Each line is a paired ratio (``run.paired_ratios``: both timed in each round, who goes first
alternating): torch's time / fusegrad's, > 1 when fusegrad is faster, with GFLOP/s from each
side's best call. ``--avx2`` runs every contender on AVX2 code, as bench/run.py's does.

``--back-to-back`` times the two in turns instead, one call of each and the next at once, with
no pause (``alternated``): the ratio of their first quartiles. After a pause each side's first
calls run slower on a VM (docs/performance-notes.md, "After an idle spell"); taken in turns, both
run in the same state of the machine, and a slow spell of minutes shows in both. But each
library's worker threads keep spinning for a while after its call (libgomp's, both sides'), and
on 2 cores the other's next call shares a core with them: in turns a (512, 256) @ (256, 256)
took fusegrad 423 us on AVX2 code against 298 us of kernel and ~26 us of Python alone.

``--blocks`` times each side in blocks of calls of its own (``spread_blocks``): a pause for the
other's threads to go idle, ``WARM_SECONDS`` of untimed calls, then ``BLOCK_CALLS`` timed ones.
Each of ``--rounds`` rounds gives every product one block of each side, so a product's blocks
are spread over the whole run; each side's figure is its best block's first quartile (a slow
spell of the machine, seconds of everything at part speed on this VM, misses some block of
each side). A user's training loop calls one library, so this is the steady state each would
run at.

``--threads N`` runs both on N threads (fusegrad's ``CPU_THREADS``, torch's
``set_num_threads``). On one thread the ratio is the kernels' own, without either library's
way of sharing work between threads, and it holds stiller on this VM, whose second core comes
and goes (two busy processes took 1.0-3x one's time, minute to minute).
"""

from __future__ import annotations  # noqa: I001 - run.py loads before numpy (see below)

import argparse
import os
import statistics
import sys
import time

# run.py sets the AVX2 environment as it loads when --avx2 is among the arguments (bench/ is on
# the path when a script there runs)
from run import SETTLE_SECONDS, _seconds, paired_ratios  # noqa: I001, E402

import numpy as np  # noqa: E402
from bench_gpt import gpt  # noqa: E402  (examples/gpt.py, put on the path by bench_gpt)

from fusegrad import Tensor  # noqa: E402
from fusegrad.helpers import Context  # noqa: E402

Product = tuple[str, tuple[int, ...], tuple[int, ...], bool, bool]
#: calls of each side ``--back-to-back`` times (in turns)
BACK_TO_BACK_CALLS = 40
#: timed calls in each of ``--blocks``' blocks
BLOCK_CALLS = 16
#: seconds of untimed calls before a block's timed ones: after an idle pause this VM runs the
#: next 10-20 ms of work at about one core's speed (a (512, 256) @ (256, 768) in bursts of ten
#: calls 0.2 s apart: 98-143 GFLOP/s; run on without pauses: 170-210)
WARM_SECONDS = 0.05


def products(cfg: gpt.Config) -> list[Product]:
    """The matmuls of one training step of ``cfg``'s GPT (each layer's are the same): (name,
    left operand's shape, right operand's shape, transpose left?, transpose right?). A
    transposed operand is stored with its last two axes swapped and read as ``.T``'s view."""
    rows, width, vocab = cfg.batch * cfg.context, cfg.width, cfg.vocab
    out: list[Product] = []
    for layer, k, n in (("qkv", width, 3 * width), ("proj", width, width),
                        ("fc", width, 4 * width), ("out", 4 * width, width)):  # fmt: skip
        out += [
            (f"{layer} x @ w", (rows, k), (k, n), False, False),
            (f"{layer} dy @ w.T", (rows, n), (n, k), False, True),
            (f"{layer} x.T @ dy", (k, rows), (rows, n), True, False),
        ]
    out += [
        ("head x @ wte.T", (rows, width), (width, vocab), False, True),
        ("head dy @ wte", (rows, vocab), (vocab, width), False, False),
        ("head dy.T @ x", (vocab, rows), (rows, width), True, False),
    ]
    heads, t, d = (cfg.batch, cfg.heads), cfg.context, cfg.width // cfg.heads
    out += [
        ("attn q @ k.T", (*heads, t, d), (*heads, d, t), False, True),
        ("attn p @ v", (*heads, t, t), (*heads, t, d), False, False),
        ("attn dout @ v.T", (*heads, t, d), (*heads, d, t), False, True),
        ("attn p.T @ dout", (*heads, t, t), (*heads, t, d), True, False),
        ("attn ds @ k", (*heads, t, t), (*heads, t, d), False, False),
        ("attn ds.T @ q", (*heads, t, t), (*heads, t, d), True, False),
    ]
    return out


def stored(rng: np.random.Generator, shape: tuple[int, ...], transposed: bool) -> np.ndarray:
    """The float32 array behind an operand of ``shape``: its last two axes swapped when the
    product reads it ``transposed``."""
    return rng.standard_normal((*shape[:-2], *shape[-2:][:: -1 if transposed else 1]), np.float32)


def flops(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    return 2 * int(np.prod(a)) * b[-1]


def view(x, transposed: bool):
    """An operand stored transposed, given back as the ``.T`` view a user writes."""
    if not transposed:
        return x
    return np.swapaxes(x, -1, -2) if isinstance(x, np.ndarray) else x.transpose(-1, -2)


def alternated(ours, theirs, calls: int) -> tuple[float, float]:
    """The first quartile of ``calls`` timed calls of each of ``ours`` and ``theirs``, made in
    turns (``ours``, ``theirs``, ``ours``...) after one untimed call of each."""
    ours(), theirs()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(calls):
        for side, fn in zip(times, (ours, theirs)):
            side.append(_seconds(fn))
    low = [statistics.quantiles(side, n=4)[0] for side in times]
    return low[0], low[1]


def block(fn, calls: int = BLOCK_CALLS) -> float:
    """The first quartile of one block of ``fn``'s calls: after a pause (``SETTLE_SECONDS``),
    untimed calls for ``WARM_SECONDS`` (two at least), then ``calls`` timed ones."""
    time.sleep(SETTLE_SECONDS)
    start = time.perf_counter()
    fn(), fn()
    while time.perf_counter() - start < WARM_SECONDS:
        fn()
    return statistics.quantiles([_seconds(fn) for _ in range(calls)], n=4)[0]


def spread_blocks(pairs, rounds: int, calls: int = BLOCK_CALLS) -> list[tuple[float, float]]:
    """For each (ours, theirs) of ``pairs``, each side's best first quartile over ``rounds``
    blocks of ``calls`` timed calls (``block``). A round gives every pair one block of each side,
    who goes first alternating, so one pair's blocks are spread over the whole run: a slow spell
    of seconds (one core's speed, on this VM) meets a block or two of each pair, not every
    block of one."""
    best = [[float("inf"), float("inf")] for _ in pairs]
    for r in range(rounds):
        for pair, low in zip(pairs, best):
            for side in (0, 1)[:: 1 if r % 2 == 0 else -1]:
                low[side] = min(low[side], block(pair[side], calls))
    return [(ours, theirs) for ours, theirs in best]


def use_threads(threads: int, torch) -> None:
    """Both sides on ``threads`` threads: fusegrad's ``CPU_THREADS`` (read when its CPU device
    opens, at the first tensor) and torch's ``set_num_threads``."""
    os.environ["CPU_THREADS"] = str(threads)
    torch.set_num_threads(threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--avx2", action="store_true", help="every contender on AVX2 code")
    parser.add_argument("--rounds", type=int, default=8, help="paired rounds per product")
    parser.add_argument("--threads", type=int, help="threads of each side (default: every core)")
    parser.add_argument(
        "--back-to-back", action="store_true", help="time the two in turns, without pauses"
    )
    parser.add_argument(
        "--blocks", action="store_true", help="time each in blocks of its own calls, in turns"
    )
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("torch is the peer here: pip install torch==2.13.0")
    if args.threads is not None:
        if args.threads < 1:
            parser.error(f"--threads {args.threads}: expected a positive number of threads")
        use_threads(args.threads, torch)
    # a layout copy fusegrad's plan makes is made at every call, as in training (whose weights
    # change every step) and as torch makes its own: an eager run would keep it (KEEP_COPIES)
    Context.KEEP_COPIES = 0
    rng = np.random.default_rng(0)
    rows = []
    for name, sa, sb, ta, tb in products(gpt.Config()):
        a, b = stored(rng, sa, ta), stored(rng, sb, tb)
        # each side holds the operands as stored, and takes the transposed view in each call
        fa, fb = Tensor(a).realize(), Tensor(b).realize()
        xa, xb = torch.from_numpy(a), torch.from_numpy(b)
        ours = lambda fa=fa, fb=fb, ta=ta, tb=tb: (view(fa, ta) @ view(fb, tb)).realize()  # noqa: E731
        theirs = lambda xa=xa, xb=xb, ta=ta, tb=tb: view(xa, ta) @ view(xb, tb)  # noqa: E731
        got, want = ours().numpy(), theirs().numpy()
        if not np.allclose(got, want, rtol=1e-3, atol=1e-3):
            sys.exit(f"{name}: fusegrad's product differs from torch's")
        shapes = f"{'x'.join(map(str, sa))} @ {'x'.join(map(str, sb))}"
        rows.append((name, shapes, flops(sa, sb) * 1e-9, ours, theirs))
    if args.blocks:
        found = spread_blocks([(ours, theirs) for *_, ours, theirs in rows], args.rounds)
    print(f"{'product':<18s} {'shapes':<28s} {'fusegrad':>9s} {'torch':>9s}  torch/fusegrad")
    ratios = []
    for i, (name, shapes, amount, ours, theirs) in enumerate(rows):
        if args.back_to_back or args.blocks:
            if args.blocks:
                mine, torch_s = found[i]
                how = f"best of {args.rounds} blocks' first quartiles"
            else:
                mine, torch_s = alternated(ours, theirs, BACK_TO_BACK_CALLS)
                how = f"first quartiles of {BACK_TO_BACK_CALLS} calls in turns"
            ratio = torch_s / mine
            ratios.append(ratio)
            print(
                f"{name:<18s} {shapes:<28s} {amount / mine:7.1f}   {amount / torch_s:7.1f}"
                f"    {ratio:5.2f}x ({how})"
            )
            continue
        per = paired_ratios(ours, theirs, args.rounds)
        best = {k: min(_seconds(f) for _ in range(5)) for k, f in (("f", ours), ("t", theirs))}
        ratio = statistics.median(per)
        ratios.append(ratio)
        print(
            f"{name:<18s} {shapes:<28s} {amount / best['f']:7.1f}   {amount / best['t']:7.1f}"
            f"    {ratio:5.2f}x (range {min(per):.2f}-{max(per):.2f})"
        )
    below = sum(r < 1 for r in ratios)
    print(f"\n{len(ratios)} products (GFLOP/s); fusegrad slower than torch on {below}")


if __name__ == "__main__":
    main()
