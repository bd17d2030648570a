"""Optimizers against PyTorch's (LAMB against a numpy transcription of the paper) over a few
steps of least squares from the same start, and the cost of a step in schedules and kernels."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad.engine.realize as engine
from fusegrad import GlobalCounters, Tensor, nn
from fusegrad.errors import FusegradError
from fusegrad.nn.optim import LAMB, SGD, Adam, AdamW
from fusegrad.nn.state import get_parameters

RNG = np.random.default_rng(0)
W0, B0 = RNG.standard_normal((3, 4)).astype(np.float32), RNG.standard_normal(3).astype(np.float32)
X, Y = (
    RNG.standard_normal((8, 4)).astype(np.float32),
    RNG.standard_normal((8, 3)).astype(np.float32),
)
STEPS = 4


def _train(make_opt, steps: int = STEPS) -> list[list[np.ndarray]]:
    """Least squares from (W0, B0); the parameters after each step."""
    w, b = Tensor(W0, requires_grad=True), Tensor(B0, requires_grad=True)
    opt = make_opt([w, b])
    history = []
    for _ in range(steps):
        opt.zero_grad()
        d = Tensor(X) @ w.T + b - Tensor(Y)
        (d * d).mean().backward()
        opt.step()
        history.append([w.numpy(), b.numpy()])
    return history


def _train_torch(make_opt, steps: int = STEPS) -> list[list[np.ndarray]]:
    torch = pytest.importorskip("torch")
    w, b = torch.tensor(W0, requires_grad=True), torch.tensor(B0, requires_grad=True)
    opt = make_opt([w, b])
    history = []
    for _ in range(steps):
        opt.zero_grad()
        d = torch.from_numpy(X) @ w.T + b - torch.from_numpy(Y)
        (d * d).mean().backward()
        opt.step()
        history.append([w.detach().numpy().copy(), b.detach().numpy().copy()])
    return history


def _torch_opt(name: str, **kwargs):
    def make(params):
        import torch

        return getattr(torch.optim, name)(params, **kwargs)

    return make


#: (ours, torch's) with the same hyperparameters
PAIRS = {
    "sgd": (lambda p: SGD(p, lr=0.1), _torch_opt("SGD", lr=0.1)),
    "sgd_momentum": (
        lambda p: SGD(p, lr=0.1, momentum=0.9),
        _torch_opt("SGD", lr=0.1, momentum=0.9),
    ),
    "sgd_nesterov_wd": (
        lambda p: SGD(p, lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1),
        _torch_opt("SGD", lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1),
    ),
    "sgd_wd": (
        lambda p: SGD(p, lr=0.1, weight_decay=0.5),
        _torch_opt("SGD", lr=0.1, weight_decay=0.5),
    ),
    "adam": (lambda p: Adam(p, lr=0.1), _torch_opt("Adam", lr=0.1)),
    "adam_betas": (
        lambda p: Adam(p, lr=0.05, b1=0.5, b2=0.9, eps=1e-3),
        _torch_opt("Adam", lr=0.05, betas=(0.5, 0.9), eps=1e-3),
    ),
    "adamw": (
        lambda p: AdamW(p, lr=0.1, weight_decay=0.3),
        _torch_opt("AdamW", lr=0.1, weight_decay=0.3),
    ),
}


@pytest.mark.parametrize("name", PAIRS)
def test_optimizer_matches_torch(name):
    ours, theirs = PAIRS[name]
    for step, (mine, ref) in enumerate(zip(_train(ours), _train_torch(theirs), strict=True)):
        for a, b in zip(mine, ref, strict=True):
            # Adam divides by sqrt(v): float32 rounding of tiny gradients shows at 1e-5
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"step {step}")


def _lamb_reference(lr=0.1, b1=0.9, b2=0.999, eps=1e-6, wd=0.01) -> list[list[np.ndarray]]:
    """LAMB (You et al. 2019, algorithm 2, identity scaling function) in float64 numpy."""
    params = [W0.astype(np.float64), B0.astype(np.float64)]
    m, v = [np.zeros_like(p) for p in params], [np.zeros_like(p) for p in params]
    history = []
    for t in range(1, STEPS + 1):
        d = X @ params[0].T + params[1] - Y
        grads = [2 * d.T @ X / d.size, 2 * d.sum(0) / d.size]
        for i, g in enumerate(grads):
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            r = (m[i] / (1 - b1**t)) / (np.sqrt(v[i] / (1 - b2**t)) + eps) + wd * params[i]
            trust = np.linalg.norm(params[i]) / np.linalg.norm(r)
            params[i] = params[i] - lr * trust * r
        history.append([p.copy() for p in params])
    return history


def test_lamb_matches_reference():
    mine = _train(lambda p: LAMB(p, lr=0.1, weight_decay=0.01))
    for step, (got, want) in enumerate(zip(mine, _lamb_reference(), strict=True)):
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5, err_msg=f"step {step}")


def test_lamb_trust_ratio_is_one_for_a_zero_weight():
    w = Tensor([0.0, 0.0], requires_grad=True)
    opt = LAMB([w], lr=0.5)
    (w * Tensor([1.0, -2.0])).sum().backward()
    opt.step()
    np.testing.assert_allclose(
        w.numpy(), [-0.5, 0.5], rtol=1e-5
    )  # Adam's first step: -lr * sign(g)


def test_step_is_one_schedule(monkeypatch):
    calls = []
    real = engine.realize_uops
    monkeypatch.setattr(
        engine,
        "realize_uops",
        lambda roots, devs, ready=None: calls.append(len(roots)) or real(roots, devs, ready),
    )
    _train(lambda p: Adam(p, lr=0.1), steps=1)
    # one realize for all 2 parameters, 2 first moments, 2 second moments and b1**t, b2**t
    assert calls == [8]  # reading w and b afterwards needs no kernel: they are buffers


@pytest.mark.parametrize(
    "make, bound",
    [
        (lambda p: SGD(p, lr=0.1), 3),
        (lambda p: SGD(p, lr=0.1, momentum=0.9), 5),
        (lambda p: Adam(p, lr=0.1), 11),
    ],
)
def test_step_kernel_count(make, bound):
    """Kernels one steady-state step runs, the backward pass included (the gradients are lazy,
    so their arithmetic runs inside the step). Today each updated tensor is one kernel, plus one
    for the residual the two gradients share, plus, where a gradient feeds two updates (Adam's
    two moments), one kernel per gradient so it is reduced once: SGD 2+1, momentum 4+1,
    Adam 8+1+2."""
    w, b = Tensor(W0, requires_grad=True), Tensor(B0, requires_grad=True)
    opt = make([w, b])
    counts = []
    for _ in range(3):
        opt.zero_grad()
        d = Tensor(X) @ w.T + b - Tensor(Y)
        (d * d).mean().backward()
        GlobalCounters.reset()
        opt.step()
        counts.append((GlobalCounters.kernel_count, GlobalCounters.compiles))
    assert counts[-1][0] <= bound
    assert counts[1][1] == counts[2][1] == 0  # later steps reuse the compiled kernels


def test_changing_lr_does_not_recompile():
    w = Tensor(W0, requires_grad=True)
    opt = Adam([w], lr=0.1)
    for lr in (0.1, 0.05, 0.01):
        opt.lr.assign(Tensor([lr]))
        opt.zero_grad()
        (w * w).sum().backward()
        GlobalCounters.reset()
        opt.step()
    assert GlobalCounters.compiles == 0
    assert opt.lr.item() == pytest.approx(0.01)


def test_lr_may_be_a_tensor_the_caller_owns():
    lr = Tensor([0.5])
    w = Tensor([2.0], requires_grad=True)
    opt = SGD([w], lr=lr)
    (w * w).sum().backward()
    opt.step()
    assert opt.lr is lr and w.tolist() == [0.0]


def test_grads_stay_until_zero_grad():
    w = Tensor([1.0, 2.0], requires_grad=True)
    opt = SGD([w], lr=0.1)
    (w * w).sum().backward()
    opt.step()
    assert w.grad.tolist() == [2.0, 4.0]  # the gradient at the old values
    opt.zero_grad()
    assert w.grad is None


def test_step_without_grad_says_what_to_do():
    opt = SGD([Tensor([1.0], requires_grad=True)])
    with pytest.raises(FusegradError, match=r"have no \.grad; call loss.backward\(\)"):
        opt.step()


def test_step_inside_no_grad_mode_is_refused():
    w = Tensor([1.0], requires_grad=True)
    opt = SGD([w])
    (w * w).sum().backward()
    with Tensor.no_grad_mode(), pytest.raises(FusegradError, match="no_grad_mode"):
        opt.step()


def test_optimizer_needs_a_trainable_tensor():
    with pytest.raises(FusegradError, match="no tensor with requires_grad=True"):
        Adam([Tensor([1.0], requires_grad=False)])


def test_requires_grad_none_becomes_true_and_buffers_are_realized_with_the_step():
    bn = nn.BatchNorm1d(2)
    w = Tensor([[1.0, -1.0]])
    opt = SGD([w, *get_parameters(bn)], lr=0.1)
    assert w.requires_grad is True and bn.running_mean in opt.buffers
    with Tensor.train():
        bn(Tensor([[1.0, 2.0], [3.0, 5.0]]) * w).sum().backward()
        opt.step()
    for t in (bn.running_mean, bn.running_var, bn.num_batches_tracked):
        assert t.uop.op.name in ("BUFFER", "RESHAPE")  # computed by the step, not left lazy
    np.testing.assert_allclose(bn.running_mean.numpy(), [0.2, -0.35], rtol=1e-6)


@pytest.mark.parametrize("named", [True, False])
def test_step_realizes_the_loss_with_the_update_without_running_the_forward_again(named):
    """``optimizer.step(loss)``, or ``step()`` after ``loss.backward()`` (PyTorch's order: the
    tensor backward was called on is realized with the step): one realize computes the forward
    once, the update and the loss (from the weights before the update); reading the loss then
    runs no kernel. A small ResNet read its loss after ``step()``: 380 -> 307 kernels a step."""
    from fusegrad import GlobalCounters, Tensor, nn
    from fusegrad.nn.state import get_parameters

    Tensor.manual_seed(0)
    model = nn.Linear(8, 4)
    opt = nn.optim.SGD(get_parameters(model), lr=0.1)
    x, y = Tensor.rand(16, 8).realize(), Tensor.randint(16, high=4).realize()
    w_before = model.weight.numpy()
    loss = model(x).sparse_categorical_crossentropy(y)
    loss.backward()
    opt.step(loss) if named else opt.step()
    GlobalCounters.reset()
    value = loss.item()
    assert GlobalCounters.kernel_count <= 1  # the labels' bounds check (tensor/bounds.py) only
    logits = x.numpy() @ w_before.T + (model.bias.numpy() + 0.1 * model.bias.grad.numpy())
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    want = -logp[np.arange(16), y.numpy()].mean()
    np.testing.assert_allclose(value, want, rtol=1e-5)


@pytest.mark.parametrize(
    "make",
    [
        lambda ps: AdamW(ps, lr=0.01, weight_decay=0.1),
        lambda ps: Adam(ps, lr=0.01),
        lambda ps: LAMB(ps, lr=0.01, weight_decay=0.05),
    ],
)
def test_an_update_rebuilt_from_its_first_build_has_the_nodes_of_building_it_anew(make):
    """LAMB's family builds each parameter's update once per kind of parameter and rebuilds it
    from the parameter's own nodes (``optim.Rebuilt``): the very nodes (hash-consed) that
    calling its arithmetic on them makes, across shapes, a half parameter and lr changes."""
    rng = np.random.default_rng(0)
    shapes = [(4, 3), (4, 3), (7,), (2, 3, 5)]
    ps = [Tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True) for s in shapes]
    ps.append(Tensor(rng.standard_normal((3, 2)).astype(np.float16), requires_grad=True))
    opt = make(ps)
    for _ in range(3):
        for p in ps:
            p.grad = Tensor(rng.standard_normal(p.shape).astype(np.float32)).cast(p.dtype)
        c1, c2 = (1.0 - opt.b1_t * opt.b1).reciprocal(), (1.0 - opt.b2_t * opt.b2).reciprocal()
        hyper = (opt.b1, opt.b2, opt.eps, opt.weight_decay, opt.adam)
        for t, m, v in zip(ps, opt.m, opt.v):
            g = t.grad.detach()
            inputs = (t.detach(), g, m, v, c1, c2, opt.lr)
            rebuilt = opt._rebuilt(hyper, inputs)
            direct = opt._values(*inputs)
            assert [r.uop for r in rebuilt] == [d.uop for d in direct]
            assert all(r.uop is d.uop for r, d in zip(rebuilt, direct))
        opt.step()
        opt.lr.assign(opt.lr * 0.5).realize()
    assert len(opt._rebuilt.built) == 4  # (4, 3) twice, (7,), (2, 3, 5), the half one


def test_a_function_that_reads_beneath_its_inputs_node_is_called_each_time():
    """A function that looks beneath an input's node (here at the buffer under a reshape)
    cannot be rebuilt from stand-ins: their buffer would stay in the nodes. ``Rebuilt`` calls
    it instead, so each call reads its own input."""
    from fusegrad.nn.optim import Rebuilt
    from fusegrad.uop.ops import Ops

    def beneath(x: Tensor) -> list[Tensor]:
        u = x.uop.src[0] if x.uop.op is Ops.RESHAPE else x.uop
        return [Tensor._wrap(u, x.device) + 1]  # (its elements, flat)

    rebuilt = Rebuilt(beneath)
    for value in (1.0, 5.0):
        x = Tensor(np.full((2, 3), value, np.float32)).realize()
        (got,) = rebuilt((), (x,))
        np.testing.assert_array_equal(got.numpy(), np.full(6, value + 1))
    assert list(rebuilt.built.values()) == [None]
