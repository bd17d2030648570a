"""Index-set splitting (codegen/split.py): an elementwise kernel's innermost loop, tested against
constants (a pad's borders, a concatenation's seams), runs as one loop per stretch, in which
the tests and the clamped source index simplify away."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Device, Tensor
from fusegrad.codegen.kernel import generate
from fusegrad.uop.loops import AxisKind
from fusegrad.uop.ops import Ops, UOp


def _kernel(t: Tensor):
    (step,) = t.schedule()
    rt = Device["CPU"]
    return generate(step.ast, rt.renderer, rt.rules)


def _loops(program: list[UOp]) -> list[tuple[int, list[UOp]]]:
    """Each innermost loop's trips and the ops inside it."""
    out, stack = [], []
    for u in program:
        if u.op is Ops.RANGE:
            stack.append((u, []))
        elif u.op is Ops.END:
            loop, body = stack.pop()
            if not any(b.op is Ops.RANGE for b in body):
                out.append((loop.src[0].arg, body))
            if stack:
                stack[-1][1].extend([loop, *body])
        elif stack:
            stack[-1][1].append(u)
    return out


def test_a_padded_copy_runs_its_borders_and_its_inside_as_three_loops():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 2, 96)).astype(np.float32)
    out = (Tensor(x) * 2 + 1).relu().pad(((0, 0), (2, 2), (2, 3)))
    kernel = _kernel(out)
    inner = _loops(list(kernel.program))
    assert [trips for trips, _ in inner] == [2, 96, 3]
    middle = inner[1][1]
    # inside: the source read at the loop's counter (no clamp, no test of the column)
    assert not any(u.op is Ops.MAX for u in middle), kernel.source
    assert not any(u.op is Ops.LOAD for u in inner[0][1] + inner[2][1])  # borders: zeros
    np.testing.assert_array_equal(
        out.numpy(), np.pad(np.maximum(x * 2 + 1, 0), ((0, 0), (2, 2), (2, 3)))
    )


def test_a_concatenation_along_the_innermost_axis_runs_a_loop_per_part():
    rng = np.random.default_rng(1)
    parts = [rng.standard_normal((8, n)).astype(np.float32) for n in (64, 40, 24)]
    a, b, c = (Tensor(p) for p in parts)
    out = (a.exp()).cat(b * 2, c + 1, dim=1)
    kernel = _kernel(out)
    assert sorted(trips for trips, _ in _loops(list(kernel.program))) == [24, 40, 64]
    want = np.concatenate([np.exp(parts[0]), parts[1] * 2, parts[2] + 1], axis=1)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize(
    "pads", [((1, 1),), ((0, 5),), ((7, 0),), ((3, 4),), ((1, 2), (30, 1)), ((-2, 3),)]
)
def test_padded_values_match_numpy(device, pads):
    """Left or right border alone, both, wider than the inside, a crop on one side."""
    x = np.arange(1, 25, dtype=np.float32).reshape((4, 6) if len(pads) == 2 else (24,))
    got = (Tensor(x, device=device) + 0.5).pad(pads).numpy()
    lo = [(max(a, 0), max(b, 0)) for a, b in pads]
    crop = tuple(slice(max(-a, 0), s - max(-b, 0)) for (a, b), s in zip(pads, x.shape))
    np.testing.assert_array_equal(got, np.pad(x[crop] + 0.5, lo))


def test_short_loops_stay_whole():
    """Stretches all shorter than ``MIN_STRETCH``: one loop, as before."""
    x = Tensor(np.ones((4, 5), np.float32))
    kernel = _kernel((x * 3).pad(((0, 0), (1, 1))))
    loops = [u for u in kernel.program if u.op is Ops.RANGE]
    assert all(u.arg.kind in (AxisKind.GLOBAL, AxisKind.PARALLEL) for u in loops)
    assert len(_loops(list(kernel.program))) == 1


def test_a_concatenation_of_transposed_parts_gives_each_stretch_its_own_tile():
    """GPT's q, k and v gradients joined along the channels, read transposed: the kernel has a
    tile loop (rows of a transposed read, ``opt._transpose_tile``); each stretch gets a copy of
    it (in the GPT step, where one part is not transposed, that stretch runs its tile outside,
    as a vector copy: the kernel ran 2.2x faster)."""
    rng = np.random.default_rng(2)
    parts = [rng.standard_normal((256, 512)).astype(np.float32) for _ in range(3)]
    a, b, c = (Tensor(p) for p in parts)
    out = a.T.cat(b.T, c.T, dim=1)
    kernel = _kernel(out)
    stretches = [u for u in kernel.program if u.op is Ops.RANGE and u.src[0].arg == 256]
    tiles = [u for u in kernel.program if u.op is Ops.RANGE and u.arg.kind is AxisKind.UPCAST]
    assert len(stretches) == len(tiles) == len(_loops(list(kernel.program))) == 3
    np.testing.assert_array_equal(out.numpy(), np.concatenate([p.T for p in parts], axis=1))


def test_a_kernel_of_tile_loops_only_is_left_alone():
    """(The fuzzer's graph 214, seed 13: a gather whose loops are all a tile's; the pass once
    looked for an outer loop that was not there.)"""
    x = Tensor(np.array([[0.0]], np.float32), requires_grad=True)
    out = x[Tensor(np.array([0, 0], np.int32))].gather(0, Tensor(np.array([[0]], np.int32)))
    assert out.numpy().tolist() == [[0.0]]
    out.sum().backward()
    assert x.grad.numpy().tolist() == [[1.0]]
