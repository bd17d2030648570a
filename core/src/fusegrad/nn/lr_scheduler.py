"""Learning-rate schedules with PyTorch's formulas: StepLR, MultiStepLR, CosineAnnealingLR,
OneCycleLR.

A schedule computes each epoch's rate on the host and writes it into the optimizer's
one-element ``lr`` tensor: a new buffer of the same shape, so the next step reuses its
compiled kernels instead of compiling new ones for a new constant.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

import numpy as np

from fusegrad.errors import FusegradError
from fusegrad.nn.optim import Optimizer
from fusegrad.tensor import Tensor


class LRScheduler:
    """Sets ``optimizer.lr`` to ``lr_at(epoch)``; ``step()`` moves to the next epoch.

    As in PyTorch, the rate of epoch 0 is set when the schedule is made, and ``step()`` is
    called after ``optimizer.step()``.
    """

    def __init__(self, optimizer: Optimizer):
        self.optimizer = optimizer
        self.base_lr = float(optimizer.lr.numpy().reshape(-1)[0])
        self.epoch = 0
        self._set(self.lr_at(0))

    def lr_at(self, epoch: int) -> float:
        """The learning rate of ``epoch`` (0 is the first)."""
        raise NotImplementedError

    def step(self) -> None:
        """Advance one epoch (or batch, for OneCycleLR) and set the optimizer's rate."""
        self.epoch += 1
        self._set(self.lr_at(self.epoch))

    def get_last_lr(self) -> list[float]:
        """The rate in use, as a one-element list (PyTorch has one per parameter group)."""
        return [self.last_lr]

    def _set(self, lr: float) -> None:
        self.last_lr = lr
        old = self.optimizer.lr
        old.assign(Tensor(np.full(old.shape, lr, dtype=old.dtype.np), device=old.device))


class StepLR(LRScheduler):
    """Multiply the rate by ``gamma`` every ``step_size`` epochs."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1):
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer)

    def lr_at(self, epoch: int) -> float:
        return self.base_lr * self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    """Multiply the rate by ``gamma`` at each epoch in ``milestones``."""

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1):
        self.milestones, self.gamma = sorted(milestones), gamma
        super().__init__(optimizer)

    def lr_at(self, epoch: int) -> float:
        return self.base_lr * self.gamma ** bisect.bisect_right(self.milestones, epoch)


class CosineAnnealingLR(LRScheduler):
    """Half a cosine from the base rate down to ``eta_min`` over ``T_max`` epochs."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0):  # noqa: N803
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer)

    def lr_at(self, epoch: int) -> float:
        cosine = (1 + math.cos(math.pi * epoch / self.T_max)) / 2
        return self.eta_min + (self.base_lr - self.eta_min) * cosine


class OneCycleLR(LRScheduler):
    """Warm up from ``max_lr / div_factor`` to ``max_lr`` over ``pct_start`` of ``total_steps``,
    then anneal to ``max_lr / div_factor / final_div_factor``; stepped once per batch.

    PyTorch's two-phase schedule without momentum cycling (``cycle_momentum=False``).
    """

    def __init__(
        self,
        optimizer: Optimizer,
        max_lr: float,
        total_steps: int,
        pct_start: float = 0.3,
        anneal_strategy: str = "cos",
        div_factor: float = 25.0,
        final_div_factor: float = 1e4,
    ):
        if anneal_strategy not in ("cos", "linear"):
            raise FusegradError(
                f"anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}"
            )
        self.max_lr, self.total_steps, self.anneal_strategy = max_lr, total_steps, anneal_strategy
        self.initial_lr = max_lr / div_factor
        self.min_lr = self.initial_lr / final_div_factor
        self.warmup_end = float(pct_start * total_steps) - 1
        super().__init__(optimizer)

    def _anneal(self, start: float, end: float, pct: float) -> float:
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2 * (1 + math.cos(math.pi * pct))
        return start + (end - start) * pct

    def lr_at(self, epoch: int) -> float:
        if epoch > self.total_steps:
            raise FusegradError(
                f"OneCycleLR stepped {epoch} times, more than total_steps={self.total_steps}"
            )
        if epoch <= self.warmup_end:
            return self._anneal(self.initial_lr, self.max_lr, epoch / self.warmup_end)
        pct = (epoch - self.warmup_end) / (self.total_steps - 1 - self.warmup_end)
        return self._anneal(self.max_lr, self.min_lr, pct)
