"""Gradients for ``Tensor``: ``requires_grad``, ``backward``, ``gradient``, and the train and
no-grad switches. The derivative rules themselves are in ``gradient.py``."""

from __future__ import annotations

import weakref
from contextlib import ContextDecorator
from typing import TYPE_CHECKING, Any, ClassVar, Self

from fusegrad.dtype import DType
from fusegrad.engine import capture
from fusegrad.errors import DTypeError, FusegradError, ShapeError
from fusegrad.gradient import compute_gradient, full_like
from fusegrad.tensor.base import TensorBase
from fusegrad.tensor.movement import buffer_of
from fusegrad.uop.ops import Ops, UOp

if TYPE_CHECKING:
    from fusegrad.tensor.tensor import Tensor

# Tensors that asked for gradients; backward() looks for them in the graph it differentiates.
_GRAD_TENSORS: weakref.WeakSet = weakref.WeakSet()
# realized tensor's buffer node -> the graph that computed it, while gradients are tracked
REALIZED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
# The tensors backward() was called on since the last optimizer step (``taken_backward_roots``)
_BACKWARD_ROOTS: weakref.WeakSet = weakref.WeakSet()


def taken_backward_roots() -> list[Tensor]:
    """The tensors ``backward`` was called on since the last call, still held somewhere:
    ``Optimizer.step`` realizes them with its update, so that a loss read after the step
    (``loss.item()``, as a PyTorch loop does) is not computed again, forward pass and all."""
    roots = list(_BACKWARD_ROOTS)
    _BACKWARD_ROOTS.clear()
    return roots


def check_differentiable(dtype: DType) -> None:
    """Only floating-point tensors have gradients, as in PyTorch."""
    if not dtype.is_float:
        raise DTypeError(
            f"only floating-point tensors can require gradients, got {dtype.name}; "
            "cast it first with .float()"
        )


def _tensor_rule(g: UOp, inputs: tuple[UOp, ...], params: tuple) -> tuple[UOp | None, ...]:
    """A ``_with_gradient`` rule, written with Tensors, called by ``gradient.py`` with UOps."""
    rule, cls, device, extra = params
    grads = rule(cls._wrap(g, device), *(cls._wrap(u, device) for u in inputs), *extra)
    return tuple(None if t is None else t.uop for t in grads)


class _Switch(ContextDecorator):
    """A class-level flag usable as ``with`` block or decorator, restoring the old value."""

    def __init__(self, cls: type, name: str, value: bool):
        self.cls, self.name, self.value = cls, name, value

    def __enter__(self) -> None:
        self.old = getattr(self.cls, self.name)
        setattr(self.cls, self.name, self.value)

    def __exit__(self, *_: Any) -> None:
        setattr(self.cls, self.name, self.old)


class AutogradMixin(TensorBase):
    """The gradient side of ``Tensor``."""

    __slots__ = ()
    uop: UOp
    grad: Tensor | None
    _requires_grad: bool | None
    _graph: UOp | None

    #: layers such as Dropout and BatchNorm behave differently while training
    training: ClassVar[bool] = False
    #: set by ``Tensor.no_grad_mode()``: optimizers and ``backward`` refuse to build gradients
    no_grad: ClassVar[bool] = False

    @classmethod
    def train(cls, mode: bool = True) -> _Switch:
        """``with Tensor.train(): ...`` (or as a decorator) sets ``Tensor.training``."""
        return _Switch(cls, "training", mode)

    @classmethod
    def no_grad_mode(cls) -> _Switch:
        """``with Tensor.no_grad_mode(): ...`` sets ``Tensor.no_grad``."""
        return _Switch(cls, "no_grad", True)

    @property
    def requires_grad(self) -> bool | None:
        return self._requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool | None) -> None:
        self._requires_grad = value
        if value:
            _GRAD_TENSORS.add(self)
        else:
            _GRAD_TENSORS.discard(self)

    def requires_grad_(self, value: bool = True) -> Self:
        if value:
            check_differentiable(self.uop.dtype)
        self.requires_grad = value
        return self

    def _differentiable_uop(self) -> UOp:
        """The graph to differentiate: the lazy one, even if this tensor was realized since."""
        return self._graph if self._graph is not None else self.uop

    def _with_gradient(self, rule: Any, inputs: tuple[Tensor, ...], params: tuple = ()) -> Tensor:
        """This value, whose gradient with respect to ``inputs`` is ``rule(g, *inputs, *params)``
        (Tensors in, one Tensor or None per input out) instead of the derivative of the ops that
        computed it.

        For ops whose derivative through their building blocks is slow (convolution) or not
        finite where PyTorch's is. ``rule`` should be a module-level function and ``params``
        hashable, so equal graphs stay equal nodes.
        """
        arg = (_tensor_rule, (rule, type(self), self.device, params))
        node = UOp(Ops.CUSTOM_GRAD, self.uop.dtype, (self.uop, *(t.uop for t in inputs)), arg)
        return self._wrap(node, self.device)

    def gradient(self, *targets: Tensor, gradient: Tensor | None = None) -> list[Tensor]:
        """d self / d target for each target, without touching ``.grad``.

        >>> from fusegrad import Tensor
        >>> x = Tensor([1.0, 2.0, 3.0])
        >>> (x * x).sum().gradient(x)[0].tolist()
        [2.0, 4.0, 6.0]
        """
        root = self._differentiable_uop()
        seed = self._seed_gradient(gradient)
        found = compute_gradient(root, seed, [t.uop for t in targets], REALIZED)
        out = []
        for t in targets:
            g = found.get(t.uop)
            out.append(self._wrap(g if g is not None else full_like(t.uop, 0.0), t.device))
        return out

    def _seed_gradient(self, gradient: Tensor | None) -> UOp:
        if gradient is None:
            if self.uop.shape not in ((), (1,)):
                raise ShapeError(
                    f"backward() of a tensor of shape {self.uop.shape} needs gradient=: "
                    "only a one-element tensor has an implicit gradient of 1"
                )
            return full_like(self._differentiable_uop(), 1.0)
        if gradient.shape != self.uop.shape:
            raise ShapeError(
                f"gradient of shape {gradient.shape} for a tensor of shape {self.uop.shape}; "
                "pass a gradient of the tensor's own shape"
            )
        return gradient.uop

    def backward(self, gradient: Tensor | None = None) -> Self:
        """Accumulate d self / d t into ``t.grad`` for every tensor ``t`` with ``requires_grad``."""
        if type(self).no_grad:
            raise FusegradError("backward() inside Tensor.no_grad_mode(); leave the block first")
        root = self._differentiable_uop()
        wanted = [t for t in list(_GRAD_TENSORS) if t.requires_grad]
        if not wanted:
            raise FusegradError(
                "backward(): no tensor in this graph has requires_grad=True; make the tensors "
                "to differentiate with Tensor(..., requires_grad=True) or .requires_grad_()"
            )
        found = compute_gradient(
            root, self._seed_gradient(gradient), [t.uop for t in wanted], REALIZED
        )
        for t in wanted:
            g = found.get(t.uop)
            if g is None:
                continue
            if t.uop.op in (Ops.MULTI, Ops.SHARD):  # sharded: its gradient sharded alike
                g = UOp(Ops.SHARD, g.dtype, (g,), t.uop.arg)
            g_tensor = self._wrap(g, t.device)
            t.grad = g_tensor if t.grad is None else t.grad + g_tensor
        _BACKWARD_ROOTS.add(self)
        return self

    def assign(self, x: Tensor | Any) -> Self:
        """Make this tensor hold ``x``'s values (same shape; cast to this dtype). Lazy.

        Into a view of the first elements of a realized tensor (``cache[:n]``, ``n`` an int or
        a bound ``Variable``) the values are written in place, into that tensor's buffer, when
        the view (or a result read from it) is realized: the tensor sees them then, and no
        other buffer or copy is made (a KV cache's rows). The value may read the view itself
        element for element.

        >>> cache = Tensor.zeros(4, 2).contiguous().realize()
        >>> cache[:2].assign(Tensor.ones(2, 2)).realize().shape
        (2, 2)
        >>> cache.tolist()
        [[1.0, 1.0], [1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]
        """
        if not isinstance(x, type(self)):
            x = type(self)(x, device=self.device, dtype=self.uop.dtype)
        if x.shape != self.uop.shape:
            raise ShapeError(f"assign of shape {x.shape} to a tensor of shape {self.uop.shape}")
        if x.device != self.device:
            x = x.to(self.device)
        value = x.uop if x.dtype == self.uop.dtype else x.cast(self.uop.dtype).uop
        if self.uop.op in (Ops.MULTI, Ops.SHARD):  # sharded: the new value placed alike
            value = UOp(Ops.SHARD, value.dtype, (value,), self.uop.arg)
        if (target := _prefix_buffer(self.uop)) is not None:  # (schedule/kernelize.py)
            self.uop, self._graph = UOp(Ops.CONTIGUOUS, value.dtype, (value, target)), None
            return self
        if (recording := capture.active()) is not None:  # TinyJit is capturing (engine/capture.py)
            recording.assigned(self, self.uop)
        replace_value(self, value)
        self._graph = None
        return self


def replace_value(t: TensorBase, value: UOp) -> None:
    """Give ``t`` the value ``value`` instead of the one it holds (not written in place). The
    buffer it held, or the buffers its unrealized value reads, are marked replaced
    (``Buffer.mark_replaced``): a TinyJit replay that reads them because its function reads
    ``t`` captures again, and so sees the new value."""
    if (old := buffer_of(t.uop)) is not None:
        if buffer_of(value) is not old:
            old.mark_replaced()
    else:
        for u in t.uop.toposort():
            if u.op is Ops.BUFFER:
                u.arg.mark_replaced()
    t.uop = value


def _prefix_buffer(u: UOp) -> UOp | None:
    """The BUFFER whose first elements the view ``u`` is, in order (reshapes, and a shrink of
    the first axis longer than 1 from 0); None when ``u`` is no such view or the whole buffer."""
    shrunk = False
    while u.op in (Ops.RESHAPE, Ops.SHRINK):
        if u.op is Ops.SHRINK:
            sizes = u.src[0].shape
            cut = [i for i, ((b, e), n) in enumerate(zip(u.arg, sizes)) if (b, e) != (0, n)]
            if len(cut) != 1 or u.arg[cut[0]][0] != 0 or any(n != 1 for n in sizes[: cut[0]]):
                return None
            shrunk = True
        u = u.src[0]
    return u if shrunk and u.op is Ops.BUFFER else None
