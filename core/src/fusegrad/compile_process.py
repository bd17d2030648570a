"""Running a compiler as a child process: with a time limit, dying with its parent, in a
temporary folder that is removed even when the parent was killed.

A compiler runs in a process group of its own (gcc starts cc1, as and ld under it), so that
the whole group can be stopped at once. Each Python process that compiles has one watchdog, a
small child process told which groups are running; when its parent dies, even by SIGKILL, its
input pipe closes and it kills them. A compile's folder is named after the process that made it
(``fusegrad-build-pid123-...``); the first compile of the next process removes the folders of
processes that are gone.
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from fusegrad.errors import CompileError

#: Seconds a compile may run, unless ``FUSEGRAD_COMPILE_TIMEOUT`` says otherwise (0: no limit).
DEFAULT_TIMEOUT = 300.0
#: A temporary folder of ours, and the process id that owns it.
OWNED_FOLDER = re.compile(r"^fusegrad-[a-z]+-pid(\d+)-")
#: A temporary folder of an older fusegrad, named without its owner: removed once a day old.
UNOWNED_FOLDER = re.compile(r"^fusegrad-(?:cc|so|nvcc)-[a-z0-9_]{8}$")
UNOWNED_AGE = 24 * 3600
#: The watchdog: reads "+ pgid" and "- pgid" lines; at end of input, kills the groups left.
WATCHDOG = """import os, signal, sys
groups = set()
for line in sys.stdin:
    verb, group = line.split()
    (groups.add if verb == "+" else groups.discard)(int(group))
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
"""
_POSIX = os.name == "posix"


def compile_timeout() -> float | None:
    """The time limit of one compile in seconds, from ``FUSEGRAD_COMPILE_TIMEOUT``; None: none."""
    text = os.environ.get("FUSEGRAD_COMPILE_TIMEOUT", "").strip()
    try:
        seconds = float(text) if text else DEFAULT_TIMEOUT
    except ValueError:
        raise CompileError(
            f"FUSEGRAD_COMPILE_TIMEOUT={text!r} is not a number of seconds; set it to, for "
            f"example, {DEFAULT_TIMEOUT:g} (or 0 for no limit)"
        ) from None
    return seconds if seconds > 0 else None


def run_compiler_process(
    command: Sequence[str], what: str, cwd: str
) -> subprocess.CompletedProcess[str]:
    """Run ``command`` in ``cwd`` (C locale, text output captured) under the time limit.

    Raises ``CompileError`` naming ``what`` (``"the CPU kernel E_4"``) when it runs too long;
    ``OSError`` when the program cannot be started. The process and its children are killed
    when the limit passes, when this call is interrupted, and when this process dies.
    """
    limit = compile_timeout()
    process = subprocess.Popen(
        list(command),
        cwd=cwd,
        env={**os.environ, "LC_ALL": "C"},
        text=True,
        start_new_session=_POSIX,  # its own process group, for it and the programs it starts
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _watch("+", process.pid)
    try:
        stdout, stderr = process.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        _kill(process)
        raise CompileError(
            f"compiling {what} ran past the limit of {limit:g} s and was stopped; set "
            "FUSEGRAD_COMPILE_TIMEOUT to more seconds (or 0 for no limit) to let it finish"
        ) from None
    except BaseException:
        _kill(process)
        raise
    finally:
        _watch("-", process.pid)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _kill(process: subprocess.Popen[str]) -> None:
    """Kill ``process`` and its children (its process group), and wait for it."""
    try:
        if _POSIX:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
    except OSError:
        pass
    process.communicate()


_lock = threading.Lock()
_watchdog: tuple[int, subprocess.Popen[bytes]] | None = None


def _watch(verb: str, group: int) -> None:
    """Tell this process's watchdog (started on first use) that ``group`` started or ended."""
    global _watchdog
    if not _POSIX:
        return
    with _lock:
        # a forked child starts one of its own: the one it inherited watches its parent
        if _watchdog is None or _watchdog[0] != os.getpid() or _watchdog[1].poll() is not None:
            _watchdog = (os.getpid(), _start_watchdog())
        pipe = _watchdog[1].stdin
        assert pipe is not None  # started with stdin=PIPE
        try:
            pipe.write(f"{verb} {group}\n".encode())
            pipe.flush()
        except OSError:  # it died: the next call starts another
            pass


def _start_watchdog() -> subprocess.Popen[bytes]:
    """The watchdog process, in a session of its own so that Ctrl-C leaves it to its work;
    stopped when this process exits normally."""
    watchdog = subprocess.Popen(
        [sys.executable, "-S", "-c", WATCHDOG], stdin=subprocess.PIPE, start_new_session=True
    )
    atexit.register(_stop_watchdog, watchdog, os.getpid())
    return watchdog


def _stop_watchdog(watchdog: subprocess.Popen[bytes], pid: int) -> None:
    """Close the watchdog's input, which ends it (a forked child leaves its parent's alone)."""
    if os.getpid() == pid and watchdog.stdin is not None:
        try:
            watchdog.stdin.close()
            watchdog.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass


@contextmanager
def compile_folder(kind: str = "build") -> Iterator[str]:
    """A new temporary folder for one compile, removed afterwards; the first one of a process
    removes those that killed processes left behind."""
    remove_stale_folders()
    folder = owned_folder(kind)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def owned_folder(kind: str) -> str:
    """A new temporary folder named after this process (``fusegrad-KIND-pidN-...``)."""
    return tempfile.mkdtemp(prefix=f"fusegrad-{kind}-pid{os.getpid()}-")


@functools.cache
def remove_stale_folders() -> list[str]:
    """Remove the temporary folders of ours whose process is gone; once per process. Returns
    their paths."""
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return []
    stale = [os.path.join(root, name) for name in names if _is_stale(root, name)]
    for folder in stale:
        shutil.rmtree(folder, ignore_errors=True)
    return stale


def _is_stale(root: str, name: str) -> bool:
    """Whether the folder ``name`` in ``root`` is ours and left behind by a process now gone."""
    if m := OWNED_FOLDER.match(name):
        return not _alive(int(m.group(1)))
    if UNOWNED_FOLDER.match(name):
        try:
            return time.time() - os.path.getmtime(os.path.join(root, name)) > UNOWNED_AGE
        except OSError:
            return False
    return False


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (one of another user's counts as alive)."""
    if not _POSIX:
        return True  # no cheap check: leave the folder alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
