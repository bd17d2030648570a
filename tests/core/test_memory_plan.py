"""The memory planner: dead intermediate buffers are reused within a plan."""

from __future__ import annotations

import numpy as np

from fusegrad import Tensor
from fusegrad.engine.realize import plan_for


def test_dead_intermediates_share_memory(device):
    x = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4), device=device)
    y = x
    for _ in range(4):  # each step: a reduce (own buffer) broadcast back: a chain of kernels
        y = (y - y.max(0, keepdim=True)).contiguous()
    plan = plan_for([y.uop], [device])
    assert len(plan.steps) == 8
    assert len(set(plan.memory)) < len(plan.memory)  # some slots share memory
    expected = x.numpy()
    for _ in range(4):
        expected = expected - expected.max(0, keepdims=True)
    np.testing.assert_allclose(y.numpy(), expected)


def test_a_step_never_writes_what_it_reads():
    x = Tensor(np.ones((8, 8), np.float32))
    y = x
    for _ in range(3):
        y = (y * 2).contiguous().sum(0, keepdim=True).expand(8, 8).contiguous()
    plan = plan_for([y.uop], ["CPU"])
    for step in plan.steps:
        written = plan.memory[step.slots[0] - plan.n_inputs]
        read = {plan.memory[s - plan.n_inputs] for s in step.slots[1:] if s >= plan.n_inputs}
        assert written not in read
    assert y.numpy()[0, 0] == 2 * 8 * 2 * 8 * 2 * 8
