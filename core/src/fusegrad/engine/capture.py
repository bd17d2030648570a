"""What TinyJit records while it captures a call: kernel launches and assigns.

The engine (``engine/realize.py``) and ``Tensor.assign`` (``tensor/autograd.py``) report to the
capture that is active, if any; ``jit.py`` opens one with ``capturing()``. The active
capture lives in a ``ContextVar``, not in another module's global: a capture is undone when its
``with`` block ends, even by an exception, and a thread or task started elsewhere sees none.

Captures nest: what the inner one records is recorded by the outer one too, so an outer
function that calls a jitted one still replays every kernel it launched.

This module imports nothing of fusegrad, so any module may report to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Capture:
    """The launches and assigns of one captured call, in order."""

    #: (runner, the buffers it was launched on), one per kernel launch
    launches: list[tuple[Any, list[Any]]] = field(default_factory=list)
    #: (tensor, the graph it held before the assign), one per ``Tensor.assign``
    assigns: list[tuple[Any, Any]] = field(default_factory=list)
    #: (buffer, the values read from it), one per value the call read back to decide what to
    #: compute (a branch, a length): a replay is valid only where the same values come back
    reads: list[tuple[Any, Any]] = field(default_factory=list)
    outer: Capture | None = None

    def launched(self, runner: Any, buffers: list[Any]) -> None:
        """Record one kernel launch (here and in every capture around this one)."""
        capture: Capture | None = self
        while capture is not None:
            capture.launches.append((runner, buffers))
            capture = capture.outer

    def read_back(self, buffer: Any, values: Any) -> None:
        """Record that the call read ``values`` from ``buffer`` and went on according to them."""
        capture: Capture | None = self
        while capture is not None:
            capture.reads.append((buffer, values))
            capture = capture.outer

    def assigned(self, tensor: Any, before: Any) -> None:
        """Record that ``tensor`` was assigned to while it held the graph ``before``."""
        capture: Capture | None = self
        while capture is not None:
            capture.assigns.append((tensor, before))
            capture = capture.outer


_ACTIVE: ContextVar[Capture | None] = ContextVar("fusegrad_capture", default=None)


def active() -> Capture | None:
    """The capture now recording, or None (the usual case: nothing is recorded)."""
    return _ACTIVE.get()


@contextmanager
def capturing() -> Iterator[Capture]:
    """Record the launches and assigns of the ``with`` block into a new ``Capture``."""
    capture = Capture(outer=_ACTIVE.get())
    token = _ACTIVE.set(capture)
    try:
        yield capture
    finally:
        _ACTIVE.reset(token)
