"""Progress bars on stderr for the long waits: BEAM search, compiling many kernels, downloads,
training epochs.

``progress(iterable, total=..., desc=...)`` wraps an iterable (or, without one, counts what
``update(n)`` reports) and draws a bar: tqdm's if tqdm is installed, else a plain one-line bar.
It is off when stderr is not a terminal (a log file, CI, a pipe), so logs stay clean;
``PROGRESS=1`` forces it on and ``PROGRESS=0`` off. Off, it is a plain pass-through.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import Any, TextIO

#: seconds between two redraws of the plain bar (tqdm throttles itself)
REDRAW_SECONDS = 0.1
#: characters of the plain bar
WIDTH = 30


def enabled(stream: TextIO | None = None) -> bool:
    """Whether bars are drawn: ``PROGRESS`` if set (1 on, 0 off), else whether ``stream``
    (stderr) is a terminal."""
    forced = os.environ.get("PROGRESS", "")
    if forced != "":
        return forced not in ("0", "false", "no", "off")
    stream = stream if stream is not None else sys.stderr
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Progress:
    """A bar: iterate over it, or call ``update(n)``; ``close()`` (or the ``with`` block's end)
    finishes its line. Drawn only when ``enabled()``; tqdm draws it where installed."""

    def __init__(
        self,
        iterable: Iterable[Any] | None = None,
        total: int | None = None,
        desc: str = "",
        unit: str = "it",
        stream: TextIO | None = None,
        scale: bool = False,
    ) -> None:
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.iterable, self.total, self.desc, self.unit = iterable, total, desc, unit
        self.scale = scale  # counts shown in millions (bytes as MB)
        self.stream = stream if stream is not None else sys.stderr
        self.count, self.start, self._drawn = 0, time.perf_counter(), 0.0
        self._width = 0  # the widest line drawn, so that a shorter one covers it
        self.on = total != 0 and enabled(self.stream)
        self._bar = _tqdm(total, desc, unit, scale, self.stream) if self.on else None
        self._closed = False
        self._postfix = ""

    def __iter__(self) -> Iterator[Any]:
        if self.iterable is None:
            raise TypeError("this Progress wraps no iterable; call update() instead")
        try:
            for item in self.iterable:
                yield item
                self.update()
        finally:
            self.close()

    def update(self, n: int = 1) -> None:
        """Count ``n`` more units done and redraw (at most every ``REDRAW_SECONDS``); the bar
        closes itself when the count reaches ``total``."""
        self.count += n
        if not self.on or self._closed:
            return
        if self._bar is not None:
            self._bar.update(n)
        elif time.perf_counter() - self._drawn >= REDRAW_SECONDS:
            self._draw()
        if self.total is not None and self.count >= self.total:
            self.close()

    def postfix(self, text: str) -> None:
        """Show ``text`` after the bar (a loss, an accuracy) from its next redraw on."""
        self._postfix = text
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)

    def close(self) -> None:
        """Finish the bar's line (once)."""
        if self._closed:
            return
        self._closed = True
        if self._bar is not None:
            self._bar.close()
        elif self.on:
            self._draw()
            self.stream.write("\n")
            self.stream.flush()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def line(self) -> str:
        """The plain bar's text: ``desc [#####.....]  50% 5/10 it, 2.0 it/s``."""
        elapsed = max(time.perf_counter() - self.start, 1e-9)
        unit, per = (f"M{self.unit}", 1e6) if self.scale else (self.unit, 1)
        rate = f"{self.count / elapsed / per:.1f} {unit}/s"
        done = f"{self.count / per:.1f}" if self.scale else str(self.count)
        if self.total:
            filled = WIDTH * min(self.count, self.total) // self.total
            percent = 100 * self.count // self.total
            bar = f"[{'#' * filled}{'.' * (WIDTH - filled)}] {percent:3d}%"
            total = f"{self.total / per:.1f}" if self.scale else str(self.total)
            text = f"{self.desc} {bar} {done}/{total} {unit}, {rate}"
        else:
            text = f"{self.desc} {done} {unit}, {rate}"
        return f"{text} {self._postfix}".strip()

    def _draw(self) -> None:
        self._drawn = time.perf_counter()
        text = self.line()
        self._width = max(len(text), self._width)
        self.stream.write(f"\r{text.ljust(self._width)}")
        self.stream.flush()


def progress(
    iterable: Iterable[Any] | None = None,
    total: int | None = None,
    desc: str = "",
    unit: str = "it",
    scale: bool = False,
) -> Progress:
    """A ``Progress`` bar on stderr over ``iterable`` (or counting ``update`` calls); ``scale``
    shows counts in millions (``unit="B"``: MB)."""
    return Progress(iterable, total, desc, unit, scale=scale)


def _tqdm(total: int | None, desc: str, unit: str, scale: bool, stream: TextIO) -> Any:
    """A tqdm bar that counts the ``update`` calls (the wrapped iterable is iterated by
    ``Progress``), or None when tqdm is not installed (the plain bar then)."""
    try:
        from tqdm import tqdm  # optional: the plain bar is drawn without it
    except ImportError:
        return None
    return tqdm(
        total=total, desc=desc or None, unit=unit, unit_scale=scale, file=stream, leave=False
    )
