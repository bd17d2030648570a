"""TinyJit: run a function's kernels again without running the function.

The first call runs the function normally (kernels get compiled). The second call runs it again
while recording every kernel launch and the buffers it used. From the third call on, the
recorded kernels are replayed with the new inputs' buffers put in place of the recorded ones:
no graph is built, nothing is scheduled, only kernels are launched.

Replays write their results into the same buffers every time, so a returned tensor holds the
result of the latest call. A change of input shape, dtype or device captures again.

A function may assign to tensors that live outside it (an optimizer step updates weights and
moments). The capture logs each assign: the buffer the kernels read the old value from and the
buffer they write the new value to. A replay first copies the tensor's current value into the
read buffer, runs the kernels, and points the tensor at the written buffer again. Plain Python
values the function reads (a learning rate as a float) are baked into the kernels: what should
change between calls must be a tensor.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fusegrad.device import Buffer
from fusegrad.engine import realize
from fusegrad.errors import FusegradError


class JitError(FusegradError, RuntimeError):
    """A function TinyJit cannot capture; the message says why and what to do."""


@dataclass
class _Assigned:
    """A tensor the function assigns to: the kernels read ``before`` and write ``after``."""

    tensor: Any
    before: Buffer
    after: Any  # the BUFFER UOp the tensor points at after a call


@dataclass
class _Launch:
    """One recorded kernel: its runner, the handles it was given, and which were inputs."""

    runner: Any
    handles: list[Any]
    patches: list[tuple[int, int]]  # (argument position, input number)
    buffers: list[Buffer]  # kept alive: the handles belong to them


class TinyJit:
    """Decorate a function of tensors; its third and later calls replay its kernels.

    >>> from fusegrad import Tensor
    >>> from fusegrad.engine.jit import TinyJit
    >>> double_plus_one = TinyJit(lambda x: (x * 2 + 1).realize())
    >>> [double_plus_one(Tensor([float(i)] * 3)).tolist() for i in range(4)][-1]
    [7.0, 7.0, 7.0]
    """

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        self.calls = 0
        self.signature: tuple | None = None
        self.launches: list[_Launch] = []
        self.assigned: list[_Assigned] = []
        self.outputs: Any = None
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def reset(self) -> None:
        """Forget the capture; the next two calls run the function again."""
        self.calls, self.signature, self.launches, self.assigned, self.outputs = 0, None, [], [], None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from fusegrad.tensor import Tensor

        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
        buffers = [t._buffer() for t in tensors]  # realizes lazy inputs into buffers
        signature = tuple((t.shape, t.dtype, t.device) for t in tensors)
        if self.signature is not None and signature != self.signature:
            self.reset()  # new shapes or dtypes: capture again
        if self.calls >= 2:
            return self._replay(buffers)
        self.calls += 1
        if self.calls == 1:
            return _realized(self.fn(*args, **kwargs))
        return self._capture(buffers, signature, args, kwargs)

    def _capture(self, inputs: list[Buffer], signature: tuple, args: tuple, kwargs: dict) -> Any:
        from fusegrad import tensor_autograd

        recorded: list[tuple[Any, list[Buffer]]] = []
        log: list[tuple[Any, Any]] = []
        realize.recorder, tensor_autograd.ASSIGN_LOG = recorded.append, log
        try:
            out = _realized(self.fn(*args, **kwargs))
        finally:
            realize.recorder, tensor_autograd.ASSIGN_LOG = None, None
        self.assigned = _assigned(log)
        position = {id(b): i for i, b in enumerate(inputs)}
        self.launches = [
            _Launch(runner, [b.handle for b in bufs],
                    [(k, position[id(b)]) for k, b in enumerate(bufs) if id(b) in position], bufs)
            for runner, bufs in recorded
        ]
        self.signature, self.outputs = signature, out
        return out

    def _replay(self, inputs: list[Buffer]) -> Any:
        for a in self.assigned:  # the kernels read the value the tensor has now
            if (current := a.tensor._buffer()) is not a.before:
                realize._copy(a.before, current)
        handles = [b.handle for b in inputs]
        for launch in self.launches:
            args = launch.handles
            if launch.patches:
                args = list(args)
                for k, i in launch.patches:
                    args[k] = handles[i]
            launch.runner(args)
        realize.GlobalCounters.kernel_count += len(self.launches)
        for a in self.assigned:
            a.tensor.uop, a.tensor._graph = a.after, None
        return self.outputs


def _assigned(log: list[tuple[Any, Any]]) -> list[_Assigned]:
    """The tensors a captured call assigned to, with the buffers its kernels read and wrote."""
    from fusegrad.tensor import buffer_of

    first: dict[int, tuple[Any, Any]] = {}
    for tensor, before in log:
        first.setdefault(id(tensor), (tensor, before))
    out = []
    for tensor, before in first.values():
        if buffer_of(tensor.uop) is None:
            raise JitError(
                f"TinyJit: the function assigns to a tensor of shape {tensor.shape} but leaves it "
                "unrealized; realize it inside the function (optimizer.step() does)"
            )
        if (read := buffer_of(before)) is None:
            raise JitError(
                f"TinyJit: the function assigns to a tensor of shape {tensor.shape} that held no "
                "buffer when the call began; realize it before calling (Tensor.realize)"
            )
        out.append(_Assigned(tensor, read, tensor.uop))
    return out


def _realized(out: Any) -> Any:
    """Realize every tensor in ``out`` (a tensor, or a tuple/list/dict of them)."""
    from fusegrad.tensor import Tensor

    found = [out] if isinstance(out, Tensor) else [
        v for v in (out.values() if isinstance(out, dict) else out if isinstance(out, (list, tuple)) else ())
        if isinstance(v, Tensor)
    ]
    if found:
        Tensor.realize(*found)
    return out
