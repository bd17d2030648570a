"""VIZ: a web page that shows what the compiler did, kernel by kernel and stage by stage.

``VIZ=1 python script.py`` records every realize (its tensor graph and schedule) and every
kernel generated (each stage's UOp graph, the rules that fired, the optimiser's choices, the
source), with launch and compile times from a profile taken alongside. When the program ends
the trace is written to ``VIZ_PATH`` (default ``fusegrad-viz.json``) and, on a terminal, served
on 127.0.0.1 until Ctrl-C (``VIZ_NO_OPEN=1``: do not open a browser); elsewhere
``fusegrad viz TRACE`` serves it later. In a program: ``with fusegrad.viz.recording() as t:``
then ``fusegrad.viz.serve(t)``. See docs/viz.md.

The recorder lives in ``viz/recorder.py``, the server in ``viz/server.py``, the page in
``viz/static/`` (plain files, no build step; dagre, vendored, lays the graphs out).
"""

from __future__ import annotations

import atexit
import os
from typing import Any

from fusegrad.viz.recorder import Trace, recording, start

__all__ = ["Trace", "recording", "serve", "start_from_environment"]


def serve(trace: Trace | dict[str, Any] | str | os.PathLike, block: bool = True) -> str:
    """Serve ``trace`` (a ``Trace``, its JSON, or a trace file) on 127.0.0.1 at a free port;
    print and return the page's URL. ``block``: until Ctrl-C, else from a daemon thread."""
    from fusegrad.viz import server  # deferred: http.server and webbrowser cost 30 ms to import

    return server.serve(trace, block=block)


def start_from_environment() -> None:
    """With ``VIZ=1`` set, record until the program exits, then write and show the trace."""
    if os.environ.get("VIZ", "") in ("", "0"):
        return
    trace = start()
    path = os.path.abspath(os.environ.get("VIZ_PATH") or "fusegrad-viz.json")  # before any chdir
    atexit.register(_at_exit, trace, path)


def _at_exit(trace: Trace, path: str) -> None:
    from fusegrad.viz import server  # deferred: loaded only when a VIZ=1 program ends

    server.show_at_exit(trace, path)
