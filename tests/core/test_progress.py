"""Progress bars (``fusegrad/progress.py``): off unless stderr is a terminal or ``PROGRESS=1``,
tqdm's where installed, a plain one otherwise; and the places that draw them."""

from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import numpy as np
import pytest

import fusegrad
from fusegrad import Tensor, context, progress
from fusegrad.progress import Progress, enabled


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plain bar, as without tqdm."""
    monkeypatch.setattr(progress, "_tqdm", lambda *args: None)


def test_on_only_on_a_terminal_unless_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROGRESS", raising=False)
    assert not enabled(io.StringIO()) and enabled(Terminal())
    monkeypatch.setenv("PROGRESS", "1")
    assert enabled(io.StringIO())
    monkeypatch.setenv("PROGRESS", "0")
    assert not enabled(Terminal())


def test_off_passes_through_and_writes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROGRESS", raising=False)
    stream = io.StringIO()
    bar = Progress(range(4), stream=stream)
    assert list(bar) == [0, 1, 2, 3] and bar.count == 4
    assert stream.getvalue() == "" and bar._bar is None


def test_plain_bar_draws_and_finishes_its_line(plain: None) -> None:
    stream = Terminal()
    assert list(Progress(range(10), desc="epoch 1", unit="steps", stream=stream)) == list(range(10))
    out = stream.getvalue()
    assert out.startswith("\repoch 1 [") and out.endswith("\n")
    last = out.rstrip("\n").split("\r")[-1]
    assert last.startswith(f"epoch 1 [{'#' * 30}] 100% 10/10 steps, ")


def test_plain_bar_in_megabytes_without_a_total(plain: None) -> None:
    stream = Terminal()
    with Progress(desc="file.gz", unit="B", scale=True, stream=stream) as bar:
        bar.update(2_500_000)
    assert bar.line().startswith("file.gz 2.5 MB, ")
    assert stream.getvalue().endswith("\n")


def test_closes_itself_at_the_total(plain: None) -> None:
    stream = Terminal()
    bar = Progress(total=3, stream=stream)
    bar.update(2)
    assert not stream.getvalue().endswith("\n")
    bar.update(1)
    assert stream.getvalue().endswith("\n")
    bar.update(1)  # late updates (a compile thread) draw nothing more
    assert stream.getvalue().count("\n") == 1


@pytest.mark.skipif(importlib.util.find_spec("tqdm") is None, reason="tqdm not installed")
def test_tqdm_draws_it_where_installed() -> None:
    from tqdm import tqdm

    stream = Terminal()
    bar = Progress(range(3), desc="tq", stream=stream)
    assert isinstance(bar._bar, tqdm)
    assert list(bar) == [0, 1, 2]
    assert "tq" in stream.getvalue()


def test_compiling_many_kernels_shows_a_bar(
    plain: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PROGRESS", "1")
    monkeypatch.setenv("FUSEGRAD_DISABLE_CACHE", "1")
    fusegrad.reset_caches()
    a = Tensor(np.arange(35, dtype=np.float32).reshape(5, 7) / 35, device="CPU")
    out = ((a.exp() @ a.T).relu().sum(1) + a.sum(1).log()).softmax()
    assert out.numpy().shape == (5,)
    err = capsys.readouterr().err
    assert "compiling [" in err and "kernels" in err.split("\r")[-1]


def test_beam_search_shows_a_bar(
    plain: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PROGRESS", "1")
    monkeypatch.setenv("FUSEGRAD_CACHE", str(tmp_path))  # BEAM's choices: not from earlier runs
    fusegrad.reset_caches()
    a = Tensor(np.ones((6, 10), np.float32), device="CPU")
    with context(BEAM=1):
        assert a.sum(1).tolist() == [10.0] * 6
    err = capsys.readouterr().err
    bars = [line for line in err.split("\r") if line.startswith("BEAM r_")]
    assert bars and "candidates" in bars[-1]
    assert "candidates, best" in err  # the summary line after the bar
