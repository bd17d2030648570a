"""The profiler: a Chrome trace (Perfetto, chrome://tracing) of what fusegrad spent time on.

``PROFILE=1`` profiles the whole program and writes the trace when it exits, to
``PROFILE_PATH`` (default ``fusegrad-trace.json`` in the working folder); ``with
fusegrad.profile("trace.json"):`` profiles a block. The trace holds "complete" events (``ph``
``"X"``, times in microseconds from the start of the profile) on these tracks:

- one process per device (``CPU``, ``OPENCL:1``...): thread ``kernels``, each kernel launch
  with its name, global size, FLOPs, bytes, GFLOP/s and GB/s; thread ``copies``, each copy
  between the host and the device with its bytes and GB/s;
- the process ``fusegrad (host)``: thread ``schedule`` (planning a realize: the Python time
  before its kernels launch), ``TinyJit`` (captures and replays), and one thread per compiler
  thread (``codegen``: generating a kernel; ``compile``: building a batch of kernels).

While profiling, every kernel launch waits for its kernel to finish so that it can be timed
(as ``DEBUG=2`` does): a profiled program runs its kernels one after the other. Off, the cost
is one check of ``ACTIVE`` per planned realize, copy or compile, and none per kernel replayed
by a TinyJit batch.

This module imports nothing of fusegrad, so any module may report to it.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: the process of the host's tracks
HOST = "fusegrad (host)"
#: where ``PROFILE=1`` writes the trace unless ``PROFILE_PATH`` says otherwise
DEFAULT_PATH = "fusegrad-trace.json"


class Profiler:
    """The events of one profile, and the trace's process and thread ids for each track."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.events: list[dict[str, Any]] = []
        self._pids: dict[str, int] = {}  # process ids, in the order the processes appear
        self._tids: dict[tuple[int, str], int] = {}
        self._lock = threading.Lock()  # compiler threads report too

    def micros(self, seconds: float) -> float:
        """A ``time.perf_counter()`` reading as microseconds since the profile started."""
        return (seconds - self.start) * 1e6

    def track(self, process: str, thread: str) -> tuple[int, int]:
        """The (pid, tid) of ``thread`` in ``process``, named by metadata events when new."""
        with self._lock:
            if (pid := self._pids.get(process)) is None:
                pid = self._pids[process] = len(self._pids) + 1
                self.events.append(_metadata("process_name", pid, 0, process))
            if (tid := self._tids.get((pid, thread))) is None:
                tid = self._tids[(pid, thread)] = len(self._tids) + 1
                self.events.append(_metadata("thread_name", pid, tid, thread))
        return pid, tid

    def span(
        self,
        name: str,
        category: str,
        track: tuple[str, str],
        start: float,
        seconds: float,
        args: dict[str, Any] | None = None,
    ) -> None:
        """Record a complete event that began at ``start`` (``perf_counter``) and took
        ``seconds``, on ``track`` (process, thread). Work begun before the profile (a compile
        under way) is cut to the part inside it."""
        if start < self.start:
            seconds, start = seconds - (self.start - start), self.start
        pid, tid = self.track(*track)
        event = {
            "name": name,
            "cat": category,
            "ph": "X",
            "ts": self.micros(start),
            "dur": max(seconds, 0.0) * 1e6,
            "pid": pid,
            "tid": tid,
        }
        if args:
            event["args"] = args
        self.events.append(event)

    @contextmanager
    def timed(
        self, name: str, category: str, thread: str, args: dict[str, Any] | None = None
    ) -> Iterator[None]:
        """Record the ``with`` block as an event on the host's ``thread``."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.span(name, category, (HOST, thread), start, _since(start), args)

    def kernel(
        self,
        name: str,
        device: str,
        start: float,
        seconds: float,
        flops: int,
        nbytes: int,
        global_size: tuple[int, ...] | None,
    ) -> None:
        """Record a kernel launch of ``flops`` over ``nbytes`` of buffers, begun at ``start``."""
        args: dict[str, Any] = {
            "name": name,
            "global size": list(global_size) if global_size else None,
            "FLOPs": flops,
            "bytes": nbytes,
        }
        if seconds > 0:
            args["GFLOP/s"] = round(flops / seconds * 1e-9, 3)
            args["GB/s"] = round(nbytes / seconds * 1e-9, 3)
        self.span(name, "kernel", (device, "kernels"), start, seconds, args)

    def copy(self, direction: str, device: str, start: float, nbytes: int) -> None:
        """Record a copy of ``nbytes`` between the host and ``device`` that began at ``start``."""
        seconds = _since(start)
        args: dict[str, Any] = {"bytes": nbytes}
        if seconds > 0:
            args["GB/s"] = round(nbytes / seconds * 1e-9, 3)
        self.span(f"{direction} {nbytes} B", "copy", (device, "copies"), start, seconds, args)

    def trace(self) -> dict[str, Any]:
        """The Chrome trace event format's JSON object."""
        return {"traceEvents": list(self.events), "displayTimeUnit": "ms"}

    def write(self, path: str | os.PathLike) -> str:
        """Write the trace to ``path``; return the absolute path written."""
        with open(path, "w") as f:
            json.dump(self.trace(), f)
        return os.path.abspath(path)


def _metadata(kind: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def _since(start: float) -> float:
    return time.perf_counter() - start


#: the profile being recorded, or None (the usual case: the hooks do nothing)
ACTIVE: Profiler | None = None


@contextmanager
def profile(path: str | os.PathLike | None = None) -> Iterator[Profiler]:
    """Profile the ``with`` block and write its trace to ``path`` (if given) when it ends.
    Inside another profile (``PROFILE=1``), the block's events go to this one only.

    >>> import tempfile, os, fusegrad
    >>> path = os.path.join(tempfile.mkdtemp(), "trace.json")
    >>> with fusegrad.profile(path) as p:
    ...     _ = (fusegrad.Tensor([1.0, 2.0]) * 3).tolist()
    >>> any(e["cat"] == "kernel" for e in p.events if e["ph"] == "X")
    True
    """
    global ACTIVE
    outer, ACTIVE = ACTIVE, Profiler()
    profiler = ACTIVE
    try:
        yield profiler
    finally:
        ACTIVE = outer
        if path is not None:
            profiler.write(path)


def start_from_environment() -> None:
    """With ``PROFILE=1`` set, profile until the program exits and then write the trace to
    ``PROFILE_PATH`` (default ``fusegrad-trace.json``), saying where on stderr."""
    global ACTIVE
    if os.environ.get("PROFILE", "") in ("", "0") or ACTIVE is not None:
        return
    ACTIVE = profiler = Profiler()
    path = os.path.abspath(os.environ.get("PROFILE_PATH") or DEFAULT_PATH)  # before any chdir

    def write_at_exit() -> None:
        written = profiler.write(path)
        print(
            f"fusegrad: profile written to {written} (open it in ui.perfetto.dev)", file=sys.stderr
        )

    atexit.register(write_at_exit)
