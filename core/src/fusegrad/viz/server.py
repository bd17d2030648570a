"""Serving a VIZ trace: the page in ``static/`` and the trace as ``/trace.json``, from the
standard library's HTTP server on 127.0.0.1 at a free port. Also ``fusegrad viz [TRACE]``.

A Chrome trace written by the profiler (``PROFILE=1``) opens too: the page shows its timeline.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import sys
import threading
import webbrowser
from pathlib import Path
from typing import Any

from fusegrad.errors import FileFormatError
from fusegrad.viz.recorder import FORMAT_VERSION, Trace

#: the page's files, shipped in the package
STATIC = Path(__file__).parent / "static"
#: the trace ``fusegrad viz`` serves when given none (what ``VIZ=1`` writes by default)
DEFAULT_PATH = "fusegrad-viz.json"


def load(path: str | os.PathLike) -> dict[str, Any]:
    """A trace file as the page reads it: a VIZ trace, or a profiler's Chrome trace (shown as a
    timeline alone)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise FileFormatError(
            f"no VIZ trace at {path}: run a program with VIZ=1 (it writes {DEFAULT_PATH}, or "
            "VIZ_PATH), then `fusegrad viz` that file"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise FileFormatError(f"{path} is not a JSON trace ({e})") from None
    if isinstance(data, dict) and data.get("format") == "fusegrad-viz":
        if data.get("version") != FORMAT_VERSION:
            raise FileFormatError(
                f"{path} is a VIZ trace of version {data.get('version')}, this fusegrad reads "
                f"version {FORMAT_VERSION}: record it again with this fusegrad"
            )
        return data
    if isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
        data = data["traceEvents"]
    if isinstance(data, list):  # a Chrome trace: its events alone
        return {"format": "fusegrad-viz", "version": FORMAT_VERSION, "profile": data}
    raise FileFormatError(f"{path} is neither a VIZ trace nor a Chrome trace")


def write(trace: Trace | dict[str, Any], path: str | os.PathLike) -> str:
    """Write ``trace`` to ``path`` as JSON; return the absolute path."""
    data = _as_json(trace)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, separators=(",", ":"))
    return os.path.abspath(path)


def _as_json(trace: Trace | dict[str, Any]) -> dict[str, Any]:
    return trace.to_json() if isinstance(trace, Trace) else trace


class _Handler(http.server.SimpleHTTPRequestHandler):
    """The page's files from ``STATIC``, and ``/trace.json``."""

    def __init__(self, trace: bytes, *args: Any, **kwargs: Any) -> None:
        self.trace = trace
        super().__init__(*args, directory=str(STATIC), **kwargs)

    def do_GET(self) -> None:
        if self.path.split("?")[0] != "/trace.json":
            super().do_GET()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.trace)))
        self.end_headers()
        self.wfile.write(self.trace)

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the URL was printed
        pass


def start_server(
    trace: Trace | dict[str, Any] | str | os.PathLike,
) -> http.server.ThreadingHTTPServer:
    """A server of ``trace`` on 127.0.0.1 at a free port, answering from a daemon thread;
    ``shutdown()`` stops it."""
    data = load(trace) if isinstance(trace, (str, os.PathLike)) else _as_json(trace)
    body = json.dumps(data, separators=(",", ":")).encode()
    handler = functools.partial(_Handler, body)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="fusegrad-viz").start()
    return server


def url_of(server: http.server.ThreadingHTTPServer) -> str:
    """The page's address."""
    host, port = server.server_address[:2]
    return f"http://{host!s}:{port}/"


def serve(trace: Trace | dict[str, Any] | str | os.PathLike, block: bool = True) -> str:
    """Serve ``trace``, print the URL and open a browser on it (unless ``VIZ_NO_OPEN=1``);
    with ``block``, until Ctrl-C. Return the URL."""
    server = start_server(trace)
    url = url_of(server)
    print(f"fusegrad viz: serving on {url} (Ctrl-C to stop)", file=sys.stderr)
    if os.environ.get("VIZ_NO_OPEN", "") in ("", "0"):
        webbrowser.open(url)
    if block:
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
        finally:
            server.shutdown()
    return url


def show_at_exit(trace: Trace, path: str) -> None:
    """``VIZ=1``'s end: write the trace to ``path``; serve it until Ctrl-C when a person is at a
    terminal, else say how to view it."""
    written = write(trace, path)
    print(f"fusegrad: VIZ trace written to {written}", file=sys.stderr)
    if sys.stdin is not None and sys.stdin.isatty():
        serve(written)
    else:
        print(f"fusegrad: view it with `fusegrad viz {written}`", file=sys.stderr)


def add_viz_command(commands: argparse._SubParsersAction) -> None:
    """Register ``fusegrad viz [TRACE]``."""
    viz = commands.add_parser(
        "viz",
        help="show a VIZ trace (VIZ=1) or a profile (PROFILE=1) in the browser",
        description="Serve the VIZ page for a trace written by a VIZ=1 run, or a profiler's "
        "Chrome trace, on 127.0.0.1 at a free port, until Ctrl-C. VIZ_NO_OPEN=1: do not open "
        "a browser.",
    )
    viz.add_argument("trace", nargs="?", default=DEFAULT_PATH, help=f"default {DEFAULT_PATH}")
    viz.set_defaults(run=viz_command)


def viz_command(args: argparse.Namespace) -> int:
    """``fusegrad viz [TRACE]``."""
    try:
        data = load(args.trace)
    except FileFormatError as e:
        print(f"fusegrad viz: {e}", file=sys.stderr)
        return 1
    serve(data)
    return 0
