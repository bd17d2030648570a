"""Optimizers: SGD, Adam, AdamW and LAMB, with tinygrad's constructor arguments.

A step is lazy arithmetic like everything else: each parameter (and each piece of optimizer
state) is ``assign``-ed its new value, then all of them are realized together in one
``Tensor.realize`` call, so the whole update, the backward pass it depends on included, is
one schedule of a few kernels. The learning rate lives in a one-element tensor: a schedule
that changes it writes new bytes into a buffer and nothing is recompiled.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np

from fusegrad.errors import FusegradError, InvalidType, InvalidValue
from fusegrad.tensor import Tensor
from fusegrad.tensor.autograd import REALIZED, taken_backward_roots
from fusegrad.uop.ops import Ops, UOp, toposort


def _dedup(tensors: Sequence[Tensor]) -> list[Tensor]:
    seen: set[int] = set()
    return [t for t in tensors if not (id(t) in seen or seen.add(id(t)))]  # type: ignore[func-returns-value]


def _param_list(name: str, params: Any) -> list[Tensor]:
    """``params`` as a list: a generator (``model.parameters()``) is read once, here."""
    if isinstance(params, Tensor):
        raise InvalidType(
            f"{name} takes a list of parameters, got one Tensor; pass [tensor] "
            "(or nn.state.get_parameters(model))"
        )
    return list(params)


def _forget_graphs(tensors: list[Tensor]) -> None:
    """Drop the graphs ``realize`` kept of an update, as if it ran under ``torch.no_grad``.

    While gradients are tracked, realize keeps each tensor's graph for later ``backward`` calls
    (``REALIZED``). An update is never differentiated (its inputs are detached), yet its graph
    reaches the buffers of the step before, whose graph reaches the step before that: kept, the
    chain held every step's buffers and nodes alive (about 10 KB a step for one Linear layer).
    """
    for t in tensors:
        t._graph = None
        REALIZED.pop(t.uop, None)


class Optimizer:
    """The bookkeeping every optimizer shares: parameters, ``lr``, ``zero_grad`` and ``step``.

    Tensors in ``params`` whose ``requires_grad`` is None are switched to True; those with
    ``requires_grad=False`` (BatchNorm's running statistics, say) are not updated, but are
    realized with each step so that their lazy graphs do not grow from step to step.
    """

    def __init__(self, params: Sequence[Tensor], lr: float | Tensor, name: str | None = None):
        self.name = name = name or type(self).__name__
        params = _param_list(name, params)
        if not isinstance(lr, (int, float, np.number, Tensor)):
            raise InvalidType(f"{name}: lr must be a number, got {type(lr).__name__} {lr!r}")
        if not isinstance(lr, Tensor) and not lr >= 0:
            raise InvalidValue(f"{name}: invalid learning rate lr={lr}; it must be >= 0")
        for t in params:
            if t.requires_grad is None:
                t.requires_grad = True
        self.params = _dedup([t for t in params if t.requires_grad])
        self.buffers = _dedup([t for t in params if not t.requires_grad])
        if not self.params:
            raise InvalidValue(
                f"{name} got no parameters: no tensor with requires_grad=True among "
                f"{len(params)} tensors (a generator can be used once only: make it a list); "
                "pass the model's parameters (nn.state.get_parameters(model))"
            )
        self.device = self.params[0].device
        if isinstance(lr, Tensor):
            self.lr = lr
        else:
            self.lr = Tensor([float(lr)], device=self.device, requires_grad=False)

    def zero_grad(self) -> None:
        """Forget the gradients; the next ``backward`` starts from zero."""
        for t in self.params:
            t.grad = None

    def step(self, *also: Tensor) -> None:
        """Update every parameter from its ``.grad``, in one realize with the optimizer state.

        ``also``: tensors of the same forward pass to realize in that realize too (the loss, an
        accuracy). Realized on their own after the step, they would run the whole forward pass
        again, from the weights as they were (a GPT step: 65 more kernels, a third more time).
        The tensors ``backward`` was called on since the last step are realized too (the loss
        of ``loss.backward(); optimizer.step(); loss.item()``, a PyTorch loop's order).
        """
        updated = self.schedule_step()
        Tensor.realize(*also, *taken_backward_roots(), *updated)  # (one named twice: realized once)
        _forget_graphs(updated)

    def schedule_step(self) -> list[Tensor]:
        """Assign the new values without computing them; returns the tensors to realize."""
        if Tensor.no_grad:
            raise FusegradError(
                "optimizer step inside Tensor.no_grad_mode(); leave the block first"
            )
        missing = [i for i, t in enumerate(self.params) if t.grad is None]
        if missing:
            raise FusegradError(
                f"parameters {missing} of {type(self).__name__} have no .grad; call "
                "loss.backward() "
                "before step(), and check that each parameter is used in the loss"
            )
        grads = [t.grad.detach() for t in self.params]  # type: ignore[union-attr]
        return self._update(grads) + self.buffers

    def _update(self, grads: list[Tensor]) -> list[Tensor]:
        """Assign each parameter and state tensor its new value; return all of them."""
        raise NotImplementedError

    def _lr(self, t: Tensor) -> Tensor:
        return self.lr.to(t.device)

    def _state(self) -> list[Tensor]:
        """A zero tensor per parameter, shaped like it, in a buffer of its own (no kernel runs);
        a sharded parameter's state is sharded alike, so that its updates move no data."""
        states = [Tensor(np.zeros(t.shape, np.float32), t.device, t.dtype) for t in self.params]
        for state, t in zip(states, self.params):
            if t.uop.op is Ops.MULTI and t.uop.arg[1] is not None:
                state.shard_(*t.uop.arg)
        return states


class Rebuilt:
    """The nodes a function of tensors builds, built once per kind of input (shapes, dtypes,
    devices, and the constants it reads: ``hyper``) on stand-ins, and for each call rebuilt
    from the inputs' own nodes: the same nodes, hash-consed, as calling it, without the Tensor
    layer's checks and promotions for each op: an AdamW step over 26 parameters of 256 x 256
    built its graph in 3.4 ms of Python, 1.8 ms so (~70 us a parameter, its three assigns
    included). Inputs on several devices at once (sharded) call the function."""

    def __init__(self, fn: Callable[..., list[Tensor]]):
        self.fn = fn
        self.built: dict[tuple, _Recipe | None] = {}

    def __call__(self, hyper: tuple, inputs: tuple[Tensor, ...]) -> list[Tensor]:
        if any(isinstance(x.device, tuple) for x in inputs):
            return self.fn(*inputs)
        key = (hyper, tuple((x.uop.shape, x.uop.dtype, x.device) for x in inputs))
        if key not in self.built:
            self.built[key] = _Recipe.of(self.fn, inputs)
        if (recipe := self.built[key]) is None:
            return self.fn(*inputs)
        values = recipe.fixed + [x.uop for x in inputs]
        for op, dtype, arg, sources, one in recipe.steps:
            values.append(
                UOp(op, dtype, (values[one],) if sources is None else sources(values), arg)
            )
        return [Tensor._wrap(values[k], inputs[0].device) for k in recipe.outputs]


#: a node ``Rebuilt`` makes: op, dtype, arg, the getter of its sources, its first source's place
_Step = tuple[Ops, Any, Any, Callable[[list[UOp]], tuple[UOp, ...]] | None, int]


@dataclass
class _Recipe:
    """How ``Rebuilt`` makes a function's nodes from its inputs' nodes: ``values`` starts as
    the nodes that depend on no input (``fixed``: constants) followed by the inputs' nodes;
    each step appends one node: (op, dtype, arg, a getter of its sources from ``values``, the
    position of its first source; a node of one source has no getter); ``outputs`` are
    positions in ``values``."""

    fixed: list[UOp]
    steps: list[_Step]
    outputs: list[int]

    @staticmethod
    def of(fn: Callable[..., list[Tensor]], inputs: tuple[Tensor, ...]) -> _Recipe | None:
        """The recipe of ``fn`` for inputs like ``inputs``; None where ``fn`` reads beneath an
        input's node (a view's buffer): the stand-ins' would stay in the nodes rebuilt."""
        stand_ins = [Tensor.empty(*x.shape, dtype=x.dtype, device=x.device) for x in inputs]
        outs = [o.uop for o in fn(*stand_ins)]
        leaves = [s.uop for s in stand_ins]
        beneath = {s for leaf in leaves for s in toposort([leaf])} - set(leaves)
        above = set(leaves)
        order = []
        for u in toposort(outs):
            if u in above or u in beneath:  # (an input's node, or one under it)
                continue
            if any(s in beneath for s in u.src):
                return None
            if any(s in above for s in u.src):
                above.add(u)
                order.append(u)
        fixed = list(dict.fromkeys(s for u in order for s in u.src if s not in above))
        fixed += [o for o in outs if o not in above and o not in fixed]  # (an output of no input)
        position = {u: k for k, u in enumerate(fixed + leaves + order)}
        steps: list[_Step] = []
        for u in order:
            at = [position[s] for s in u.src]
            sources = itemgetter(*at) if len(at) > 1 else None  # (one source: ``values[at[0]]``)
            steps.append((u.op, u.dtype, u.arg, sources, at[0]))
        return _Recipe(fixed, steps, [position[o] for o in outs])


class SGD(Optimizer):
    """Stochastic gradient descent with PyTorch's momentum (dampening 0) and L2 weight decay.

    >>> from fusegrad import Tensor
    >>> w = Tensor([1.0, 2.0], requires_grad=True)
    >>> opt = SGD([w], lr=0.5)
    >>> _ = (w * w).sum().backward()
    >>> opt.step()
    >>> w.tolist()
    [0.0, 0.0]
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float | Tensor = 0.001,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ):
        super().__init__(params, lr)
        if momentum < 0 or weight_decay < 0:
            raise InvalidValue(
                f"SGD: momentum={momentum} and weight_decay={weight_decay} must be >= 0"
            )
        if nesterov and momentum <= 0:
            raise FusegradError(f"nesterov SGD needs momentum > 0, got momentum={momentum}")
        self.momentum, self.weight_decay, self.nesterov = momentum, weight_decay, nesterov
        self.b = self._state() if momentum else []

    def _update(self, grads: list[Tensor]) -> list[Tensor]:
        for i, (t, g) in enumerate(zip(self.params, grads, strict=True)):
            if self.weight_decay:
                g = g + self.weight_decay * t.detach()
            if self.momentum:
                b = self.b[i].assign(self.momentum * self.b[i] + g)  # b <- mu b + g
                g = g + self.momentum * b if self.nesterov else b
            t.assign(t.detach() - self._lr(t) * g)
        return self.params + self.b


class LAMB(Optimizer):
    """LAMB (You et al., 2019): Adam's step, rescaled per tensor by ||w|| / ||step||.

    With ``adam=True`` the rescaling is skipped, which makes it Adam with decoupled weight
    decay (AdamW); ``Adam`` and ``AdamW`` below are this class with those arguments.
    """

    def __init__(
        self,
        params: Sequence[Tensor],
        lr: float | Tensor = 0.001,
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        adam: bool = False,
        name: str | None = None,
    ):
        super().__init__(params, lr, name)
        for beta, value in (("b1", b1), ("b2", b2)):
            if not 0 <= value < 1:
                raise InvalidValue(
                    f"{self.name}: {beta}={value} is not a beta; betas lie in [0, 1), "
                    "e.g. b1=0.9, b2=0.999"
                )
        self.b1, self.b2, self.eps, self.weight_decay, self.adam = b1, b2, eps, weight_decay, adam
        self.m, self.v = self._state(), self._state()
        self._rebuilt = Rebuilt(self._values)
        # b1**t and b2**t for the bias correction, kept on the device so steps never recompile
        self.b1_t = Tensor([1.0], device=self.device, requires_grad=False)
        self.b2_t = Tensor([1.0], device=self.device, requires_grad=False)

    def _update(self, grads: list[Tensor]) -> list[Tensor]:
        b1_t = self.b1_t.assign(self.b1_t * self.b1)
        b2_t = self.b2_t.assign(self.b2_t * self.b2)
        # the bias corrections once per step, not once per parameter (fewer nodes to build)
        c1, c2 = (1.0 - b1_t).reciprocal(), (1.0 - b2_t).reciprocal()
        hyper = (self.b1, self.b2, self.eps, self.weight_decay, self.adam)
        for t, g, m, v in zip(self.params, grads, self.m, self.v, strict=True):
            inputs = (t.detach(), g, m, v, c1.to(t.device), c2.to(t.device), self._lr(t))
            new_m, new_v, new_t = self._rebuilt(hyper, inputs)
            m.assign(new_m)
            v.assign(new_v)
            t.assign(new_t)
        return self.params + self.m + self.v + [self.b1_t, self.b2_t]

    def _values(self, *inputs: Tensor) -> list[Tensor]:
        """A parameter's new moments and value, from the parameter, its gradient, its moments,
        the two bias corrections and the learning rate."""
        t, g, m, v, c1, c2, lr = inputs
        # (in the moments' own dtype, as assign stores them, before the step reads them)
        m = (self.b1 * m + (1.0 - self.b1) * g).cast(m.dtype)
        v = (self.b2 * v + (1.0 - self.b2) * (g * g)).cast(v.dtype)
        up = (m * c1) / ((v * c2).sqrt() + self.eps)
        if self.weight_decay:
            up = up + self.weight_decay * t
        if not self.adam:
            up = up * self._trust_ratio(t, up)
        return [m, v, t - lr * up]

    @staticmethod
    def _trust_ratio(w: Tensor, up: Tensor) -> Tensor:
        """||w|| / ||up||, or 1 where either norm is zero."""
        w_norm, up_norm = (w * w).sum().sqrt(), (up * up).sum().sqrt()
        return (w_norm > 0).where((up_norm > 0).where(w_norm / up_norm, 1.0), 1.0)


def Adam(
    params: Sequence[Tensor],
    lr: float | Tensor = 0.001,
    b1: float = 0.9,
    b2: float = 0.999,  # noqa: N802
    eps: float = 1e-8,
) -> LAMB:
    """Adam (Kingma and Ba, 2014), as ``torch.optim.Adam`` without weight decay."""
    return LAMB(params, lr, b1, b2, eps, weight_decay=0.0, adam=True, name="Adam")


def AdamW(
    params: Sequence[Tensor],
    lr: float | Tensor = 0.001,
    b1: float = 0.9,
    b2: float = 0.999,  # noqa: N802
    eps: float = 1e-8,
    weight_decay: float = 0.01,
) -> LAMB:
    """Adam with decoupled weight decay (Loshchilov and Hutter), as ``torch.optim.AdamW``."""
    return LAMB(params, lr, b1, b2, eps, weight_decay, adam=True, name="AdamW")
