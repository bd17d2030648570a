"""Layers, losses and optimizers together: small models must memorise a small batch on CPU."""

from __future__ import annotations

import numpy as np

from fusegrad import Tensor, nn
from fusegrad.nn.optim import SGD, Adam
from fusegrad.nn.state import get_parameters


class MLP:
    def __init__(self):
        self.l1, self.l2 = nn.Linear(8, 32), nn.Linear(32, 3)

    def __call__(self, x: Tensor) -> Tensor:
        return self.l2(self.l1(x).relu())


class CNN:
    def __init__(self):
        self.conv, self.bn, self.fc = (
            nn.Conv2d(1, 4, 3, padding=1),
            nn.BatchNorm2d(4),
            nn.Linear(4 * 4 * 4, 2),
        )

    def __call__(self, x: Tensor) -> Tensor:
        return self.fc(self.bn(self.conv(x)).relu().max_pool2d(2).flatten(1))


def _fit(model, opt, x: Tensor, y: Tensor, steps: int) -> list[float]:
    """Train on one batch; the loss after each step (read once at the end)."""
    losses = []
    with Tensor.train():
        for _ in range(steps):
            opt.zero_grad()
            loss = model(x).cross_entropy(y)
            loss.backward()
            opt.step()
            losses.append(loss)
    return [loss.item() for loss in losses]


def test_mlp_memorises_a_batch():
    Tensor.manual_seed(0)
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((16, 8)).astype(np.float32))
    y = Tensor(rng.integers(0, 3, 16).astype(np.int32))  # (int32: WebGPU on OpenGL has no int64)
    model = MLP()
    losses = _fit(model, Adam(get_parameters(model), lr=0.02), x, y, steps=60)
    assert losses[0] > 0.7 and losses[-1] < 0.05, losses[::10]
    assert (model(x).argmax(1).numpy() == y.numpy()).all()


def test_cnn_with_batchnorm_memorises_a_batch():
    Tensor.manual_seed(0)
    rng = np.random.default_rng(1)
    x, y = (
        Tensor(rng.standard_normal((8, 1, 8, 8)).astype(np.float32)),
        Tensor(rng.integers(0, 2, 8).astype(np.int32)),
    )
    model = CNN()
    opt = SGD(get_parameters(model), lr=0.1, momentum=0.9)
    losses = _fit(model, opt, x, y, steps=30)
    assert losses[0] > 0.4 and losses[-1] < 0.05, losses[::5]
    assert model.bn.num_batches_tracked.item() == 30  # the running statistics moved each step
    assert np.abs(model.bn.running_mean.numpy()).max() > 0


def test_reading_the_loss_before_backward_keeps_its_graph():
    """``loss.item()`` realizes the loss; ``backward`` must still see what it was computed from."""
    w = Tensor([1.0, 2.0], requires_grad=True)
    loss = (w * w).sum()
    assert loss.item() == 5.0
    loss.backward()
    assert w.grad.tolist() == [2.0, 4.0]
