"""Progress bars (``fusegrad/progress.py``): off unless stderr is a terminal or ``PROGRESS=1``,
tqdm's where installed, a plain one otherwise; and the places that draw them."""

from __future__ import annotations

import importlib.util
import io
import re
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


def test_plain_bar_shows_a_postfix(plain: None) -> None:
    stream = Terminal()
    with Progress(total=4, desc="train", unit="step", stream=stream) as bar:
        bar.update(2)
        bar.postfix("loss  0.500 acc  75.0%")
        assert bar.line().endswith("step/s loss  0.500 acc  75.0%")
        bar.update(2)
    assert stream.getvalue().rstrip("\n").endswith("acc  75.0%")


@pytest.mark.skipif(importlib.util.find_spec("tqdm") is None, reason="tqdm not installed")
def test_tqdm_shows_the_postfix() -> None:
    stream = Terminal()
    with Progress(total=2, desc="train", stream=stream) as bar:
        bar.postfix("loss 1.000")
        bar.update(1)
        assert str(bar._bar).endswith("loss 1.000]")  # (tqdm's line; it erases it when done)


EXAMPLES = Path(__file__).parents[2] / "examples"


def test_the_mnist_example_trains_under_the_shared_bar(
    plain: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """examples/mnist.py's training loop draws ``fusegrad.progress``'s bar with its loss and
    accuracy (it drew a bar of its own)."""
    spec = importlib.util.spec_from_file_location("fusegrad_example_mnist", EXAMPLES / "mnist.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    monkeypatch.setenv("PROGRESS", "1")
    rng = np.random.default_rng(0)
    images = Tensor(rng.integers(0, 256, (16, 1, 28, 28), dtype=np.uint8))
    labels = Tensor(rng.integers(0, 10, 16).astype(np.int32))
    Tensor.manual_seed(0)
    example.train(example.Model(), images, labels, steps=10, batch=4, lr=0.002)
    last = capsys.readouterr().err.rstrip("\n").split("\r")[-1]
    assert last.startswith(f"train [{'#' * 30}] 100% 10/10 step, ")
    assert re.search(r"loss +\d+\.\d{3} acc +\d+\.\d%$", last), last
