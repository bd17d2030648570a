"""kernel_cache.py and compile_process.py: the kernel cache heals itself. A truncated, corrupted,
swapped or foreign entry is deleted with one warning naming it, and the next run is correct; a
compiler dies with its parent, its folder is removed at the next start, and a compile that runs
too long fails naming its kernel."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

import fusegrad
from fusegrad import Tensor, compile_process, kernel_cache
from fusegrad.errors import CompileError
from fusegrad.kernel_cache import KernelCacheWarning

#: The tests of processes read /proc, and need process groups and signals.
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

X = np.arange(6, dtype=np.float32)
#: A C compiler that answers ``--version``, has no OpenMP, and otherwise writes its pid and its
#: child's (a grandchild of fusegrad) to $FAKE_CC_PIDS, then sleeps.
FAKE_CC = """#!/bin/sh
case "$*" in *--version*) echo "fake cc 1.0"; exit 0;; *-fopenmp*) exit 1;; esac
sleep 60 &
echo "$$ $!" > "$FAKE_CC_PIDS.tmp" && mv "$FAKE_CC_PIDS.tmp" "$FAKE_CC_PIDS"
wait
"""


@pytest.fixture
def cache(monkeypatch, tmp_path) -> Path:
    """An empty kernel cache and temporary folder, with nothing compiled in memory."""
    monkeypatch.setenv("FUSEGRAD_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("FUSEGRAD_DISABLE_CACHE", raising=False)
    monkeypatch.delenv("CC", raising=False)
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    fusegrad.reset_caches()
    yield tmp_path / "cache" / kernel_cache.FOLDER
    fusegrad.reset_caches()  # forget the kernels loaded from this test's cache


def compute(k: float) -> np.ndarray:
    """A one-kernel computation on the CPU; each ``k`` is a kernel (and an entry) of its own."""
    return (Tensor(X, device="CPU") * k + 1).numpy()


@contextmanager
def cache_warnings() -> Iterator[list[str]]:
    """The messages of the ``KernelCacheWarning``s raised in the block, filled in as it ends."""
    messages: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield messages
    messages.extend(str(w.message) for w in caught if issubclass(w.category, KernelCacheWarning))


def entries(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if not p.name.startswith(".tmp-"))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: kernel_cache.HEADER.size + 100])


def flip_payload_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def flip_length_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[40] ^= 0x01  # the payload length's lowest byte, after magic and key
    path.write_bytes(bytes(data))


def foreign(path: Path) -> None:
    path.write_bytes(b"\x7fELF" + bytes(200))


def empty(path: Path) -> None:
    path.write_bytes(b"")


@pytest.mark.parametrize("damage", [truncate, flip_payload_bit, flip_length_bit, foreign, empty])
def test_a_damaged_entry_is_deleted_with_one_warning_and_compiled_again(cache, damage):
    expected = X * 3 + 1
    np.testing.assert_array_equal(compute(3), expected)
    (entry,) = entries(cache)
    damage(entry)
    fusegrad.reset_caches()
    with cache_warnings() as messages:
        np.testing.assert_array_equal(compute(3), expected)
    assert len(messages) == 1 and entry.name in messages[0], messages
    assert "compiled again" in messages[0] and "/tmp" not in messages[0]
    # healed: stored again whole, and read back without a warning
    assert kernel_cache.unpack(entry.name, entry.read_bytes())[0] is not None
    fusegrad.reset_caches()
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelCacheWarning)
        np.testing.assert_array_equal(compute(3), expected)


def test_swapped_entries_are_each_deleted_with_a_warning_and_compiled_again(cache):
    compute(3)
    (first,) = entries(cache)
    compute(5)
    (second,) = [p for p in entries(cache) if p != first]
    a, b = first.read_bytes(), second.read_bytes()
    first.write_bytes(b)
    second.write_bytes(a)
    fusegrad.reset_caches()
    with cache_warnings() as messages:
        np.testing.assert_array_equal(compute(3), X * 3 + 1)
        np.testing.assert_array_equal(compute(5), X * 5 + 1)
    assert len(messages) == 2, messages
    for entry, other in ((first, second), (second, first)):
        (message,) = [m for m in messages if m.startswith(f"kernel cache entry {entry.name}")]
        assert f"holds the entry of {other.name}" in message


def test_an_entry_that_checks_out_but_does_not_load_is_evicted_and_compiled_again(cache):
    """A whole entry (right key, length and checksum) whose library cannot be loaded, such as one
    built for another machine: one warning, then the kernel is compiled and stored again."""
    compute(3)
    (entry,) = entries(cache)
    entry.write_bytes(kernel_cache.pack(entry.name, b"not a shared library"))
    fusegrad.reset_caches()
    with cache_warnings() as messages:
        np.testing.assert_array_equal(compute(3), X * 3 + 1)
    assert len(messages) == 1 and entry.name in messages[0] and "could not be loaded" in messages[0]
    assert kernel_cache.unpack(entry.name, entry.read_bytes())[0] != b"not a shared library"


@pytest.fixture
def fake_cc(tmp_path, monkeypatch) -> Path:
    """A C compiler that hangs (``FAKE_CC``); returns where it writes its pids."""
    script = tmp_path / "fake-cc"
    script.write_text(FAKE_CC)
    script.chmod(0o755)
    pids = tmp_path / "fake-cc-pids"
    monkeypatch.setenv("FAKE_CC_PIDS", str(pids))
    monkeypatch.setenv("CC", str(script))
    return pids


@linux
def test_a_compile_past_the_limit_fails_naming_its_kernel(cache, fake_cc, monkeypatch):
    monkeypatch.setenv("FUSEGRAD_COMPILE_TIMEOUT", "1")
    with pytest.raises(
        CompileError, match=r"compiling the CPU kernel \w+ ran past the limit of 1 s"
    ):
        compute(3)
    shell, sleeper = map(int, fake_cc.read_text().split())
    # its children are stopped with it (SIGKILL to its group: on a busy machine the sleeper
    # can still be exiting as the compile returns)
    wait_for(lambda: not alive(shell) and not alive(sleeper), 10)
    assert list(Path(tempfile.gettempdir()).iterdir()) == []
    monkeypatch.delenv("CC")
    fusegrad.reset_caches()
    np.testing.assert_array_equal(compute(3), X * 3 + 1)


def test_a_timeout_that_is_not_a_number_says_what_to_set(monkeypatch):
    monkeypatch.setenv("FUSEGRAD_COMPILE_TIMEOUT", "5m")
    with pytest.raises(CompileError, match="FUSEGRAD_COMPILE_TIMEOUT='5m' is not a number"):
        compile_process.compile_timeout()
    monkeypatch.setenv("FUSEGRAD_COMPILE_TIMEOUT", "0")
    assert compile_process.compile_timeout() is None


#: A fusegrad process that starts a compile (with $CC) and waits for it.
COMPILING = textwrap.dedent(
    """
    import numpy as np
    from fusegrad import Tensor
    (Tensor(np.arange(6, dtype=np.float32), device="CPU") * 3 + 1).numpy()
    """
)


@linux
def test_a_killed_compile_leaves_no_process_and_its_folder_goes_at_the_next_start(
    cache, fake_cc, monkeypatch
):
    env = {**os.environ, "TMPDIR": tempfile.gettempdir()}
    parent = subprocess.Popen([sys.executable, "-c", COMPILING], env=env)
    try:
        wait_for(fake_cc.exists, 60)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait()
    shell, sleeper = map(int, fake_cc.read_text().split())
    wait_for(lambda: not alive(shell) and not alive(sleeper), 10)
    left = [p.name for p in Path(tempfile.gettempdir()).iterdir()]
    assert [n for n in left if n.startswith(f"fusegrad-build-pid{parent.pid}-")], left
    # the next start, with a working compiler: no user action, a correct result, no folder left
    monkeypatch.delenv("CC")
    compile_process.remove_stale_folders.cache_clear()
    fusegrad.reset_caches()
    np.testing.assert_array_equal(compute(3), X * 3 + 1)
    left = [p.name for p in Path(tempfile.gettempdir()).iterdir()]
    assert not [n for n in left if f"pid{parent.pid}-" in n], left


@linux
def test_only_folders_of_gone_processes_are_removed(cache):
    temp = Path(tempfile.gettempdir())
    mine = temp / f"fusegrad-build-pid{os.getpid()}-abcdefgh"
    gone = temp / f"fusegrad-so-pid{dead_pid()}-abcdefgh"
    old, new = temp / "fusegrad-cc-abcdefgh", temp / "fusegrad-cc-12345678"
    unrelated = temp / "fusegrad-notes"
    for folder in (mine, gone, old, new, unrelated):
        folder.mkdir()
    os.utime(old, (time.time() - 2 * compile_process.UNOWNED_AGE,) * 2)
    compile_process.remove_stale_folders.cache_clear()
    assert sorted(compile_process.remove_stale_folders()) == sorted([str(gone), str(old)])
    assert sorted(p.name for p in temp.iterdir()) == sorted(p.name for p in (mine, new, unrelated))


def test_a_library_that_does_not_load_names_the_kernel_not_a_temporary_path():
    from fusegrad_cpu.device import CPUProgram

    with pytest.raises(CompileError) as e:
        CPUProgram("E_6", b"not a shared object")
    message = str(e.value)
    assert "CPU kernel E_6 could not be loaded" in message
    assert "fusegrad-so-" not in message and "/proc/self/fd" not in message


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def dead_pid() -> int:
    """The pid of a process that has exited (and was reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def wait_for(condition, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{condition} still false after {seconds} s"
        time.sleep(0.05)
