"""Each learning-rate schedule against PyTorch's: the rate before each optimizer step."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import GlobalCounters, Tensor
from fusegrad.errors import FusegradError
from fusegrad.nn.lr_scheduler import CosineAnnealingLR, MultiStepLR, OneCycleLR, StepLR
from fusegrad.nn.optim import SGD

torch = pytest.importorskip("torch")

#: name -> (our schedule, torch's, given the optimizer; epochs to compare)
SCHEDULES = {
    "step": (
        lambda o: StepLR(o, step_size=3, gamma=0.5),
        lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5),
        10,
    ),
    "multistep": (
        lambda o: MultiStepLR(o, milestones=[2, 5, 6], gamma=0.3),
        lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[2, 5, 6], gamma=0.3),
        9,
    ),
    "cosine": (
        lambda o: CosineAnnealingLR(o, T_max=6, eta_min=0.01),
        lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=6, eta_min=0.01),
        7,
    ),
    "onecycle_cos": (
        lambda o: OneCycleLR(o, max_lr=0.8, total_steps=12),
        lambda o: torch.optim.lr_scheduler.OneCycleLR(
            o, max_lr=0.8, total_steps=12, cycle_momentum=False
        ),
        12,
    ),
    "onecycle_linear": (
        lambda o: OneCycleLR(
            o,
            max_lr=0.5,
            total_steps=10,
            pct_start=0.4,
            anneal_strategy="linear",
            div_factor=10,
            final_div_factor=100,
        ),
        lambda o: torch.optim.lr_scheduler.OneCycleLR(
            o,
            max_lr=0.5,
            total_steps=10,
            pct_start=0.4,
            anneal_strategy="linear",
            div_factor=10,
            final_div_factor=100,
            cycle_momentum=False,
        ),
        10,
    ),
}


@pytest.mark.parametrize("name", SCHEDULES)
def test_schedule_matches_torch(name):
    ours_make, theirs_make, epochs = SCHEDULES[name]
    opt = SGD([Tensor([1.0], requires_grad=True)], lr=0.2)
    topt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.2)
    ours, theirs = ours_make(opt), theirs_make(topt)
    mine, ref = [], []
    for _ in range(epochs):
        mine.append(opt.lr.item())
        ref.append(topt.param_groups[0]["lr"])
        assert ours.get_last_lr()[0] == pytest.approx(
            ref[-1], rel=1e-7
        )  # base lr read back from float32
        topt.step()
        ours.step()
        theirs.step()
    np.testing.assert_allclose(mine, ref, rtol=1e-6)


def test_schedule_changes_lr_without_recompiling():
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = SGD([w], lr=0.1, momentum=0.9)
    sched = StepLR(opt, step_size=1, gamma=0.5)
    compiles = []
    for _ in range(3):
        opt.zero_grad()
        (w * w).sum().backward()
        GlobalCounters.reset()
        opt.step()
        sched.step()
        compiles.append(GlobalCounters.compiles)
    assert compiles[1:] == [0, 0] and opt.lr.item() == pytest.approx(0.0125)


def test_onecycle_refuses_to_step_past_total_steps():
    sched = OneCycleLR(SGD([Tensor([1.0], requires_grad=True)]), max_lr=0.1, total_steps=2)
    sched.step()
    sched.step()
    with pytest.raises(FusegradError, match="more than total_steps=2"):
        sched.step()


def test_onecycle_rejects_unknown_anneal_strategy():
    with pytest.raises(FusegradError, match="'cos' or 'linear'"):
        OneCycleLR(
            SGD([Tensor([1.0], requires_grad=True)]),
            max_lr=0.1,
            total_steps=5,
            anneal_strategy="exp",
        )
