"""codegen/linearize.py: a kernel whose two reductions both run inside the upcast loops gives
each its own copies of them (the second used the first's, closed loop: 'uidx5' undeclared;
found by the differential fuzzer, python -m fusegrad.testing.fuzz); lanes combine pairwise."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Device, Tensor
from fusegrad.codegen.kernel import generate
from fusegrad.codegen.opt import heuristic_opts
from fusegrad.uop.ops import Ops


@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
@pytest.mark.parametrize("reduce", ["mean", "sum", "max"])
def test_two_reductions_sharing_the_upcast_loops(device, reduce):
    x = np.arange(16, dtype=np.float32).reshape(4, 2, 2)
    v = getattr(Tensor(x, device=device), reduce)(axis=2)
    want = getattr(x, reduce)(axis=2)
    np.testing.assert_allclose((v.flip((0,)) + v).numpy(), want[::-1] + want)
    np.testing.assert_allclose((v.flip((0,)) * v.flip((1,))).numpy(), want[::-1] * want[:, ::-1])


@pytest.mark.parametrize("rows, width", [(512, 128), (8, 96)])
def test_lanes_combine_pairwise(rows, width):
    """A reduction's vector lanes are combined as a tree (lanes 0+1, 2+3, ... then their sums):
    a chain of log2(lanes) adds after each row, not lanes - 1 of them one after the other
    (silero-vad's 512x128 LSTM matvec spent most of its time on that chain: 30.6 -> 24.3 us)."""
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((rows, width), np.float32), rng.standard_normal(width, np.float32)
    out = (Tensor(w, device="CPU") * Tensor(x, device="CPU")).sum(1)
    (step,) = out.schedule()
    rt = Device["CPU"]
    opts = heuristic_opts(step.ast, rt.renderer)
    assert opts is not None and opts.lanes is not None
    program = generate(step.ast, rt.renderer, rt.rules, opts).program
    depth: dict = {}
    for u in program:  # adds in a row, each reading the one before (an accumulator load resets)
        depth[u] = 1 + max((depth.get(s, 0) for s in u.src), default=0) if u.op is Ops.ADD else 0
    lanes = opts.lanes[1]
    assert max(depth.values()) <= lanes.bit_length(), (max(depth.values()), lanes)
    np.testing.assert_allclose(out.numpy(), w @ x, rtol=1e-4, atol=1e-4)
