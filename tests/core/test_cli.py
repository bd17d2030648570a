"""The ``fusegrad`` command's tool verbs (``fusegrad/commands.py``) and how the command ends when
its reader goes away (``fusegrad devices --json | head -1``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fusegrad import kernel_cache
from fusegrad.__main__ import main, survey
from tests.conftest import available

FUSEGRAD = [sys.executable, "-m", "fusegrad"]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty kernel cache of this test's own (``FUSEGRAD_CACHE``)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("FUSEGRAD_CACHE", str(folder))
    return folder


def test_cache_info_counts_entries_by_kind(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kernel_cache.write_entry("a" * 64, b"fusegrad shared library; function E_4\0" + b"x" * 100)
    kernel_cache.write_entry("b" * 64, b"poclbin\0" + b"y" * 50)
    (cache / "beam").mkdir()
    (cache / "beam" / f"{'c' * 64}.json").write_text("null")
    assert main(["cache", "info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["path"] == str(cache)
    folders = {f["name"]: f for f in report["folders"]}
    assert folders["kernels-v1"]["files"] == 2
    assert set(folders["kernels-v1"]["kinds"]) == {"CPU shared libraries", "OpenCL binaries (PoCL)"}
    assert folders["beam"]["files"] == 1 and folders["beam"]["nbytes"] == 4
    assert main(["cache", "info"]) == 0
    text = capsys.readouterr().out
    assert f"kernel cache: {cache} (3 files" in text and "OpenCL binaries (PoCL): 1 files" in text


def test_cache_clear_removes_only_what_fusegrad_wrote(
    cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kernel_cache.write_entry("d" * 64, b"payload")
    (cache / "kernels-v1" / "notes.txt").write_text("mine")  # not ours: kept
    (cache / "datasets").mkdir()
    (cache / "datasets" / "mnist.gz").write_bytes(b"data")  # another folder: kept
    size = (cache / "kernels-v1" / ("d" * 64)).stat().st_size
    assert main(["cache", "clear"]) == 0
    assert capsys.readouterr().out.strip() == f"removed 1 files ({size} B) from {cache}"
    assert sorted(p.name for p in cache.rglob("*")) == [
        "datasets",
        "kernels-v1",
        "mnist.gz",
        "notes.txt",
    ]
    assert kernel_cache.read_entry("d" * 64) is None
    assert main(["cache", "clear"]) == 0
    assert "removed 0 files" in capsys.readouterr().out


def test_cache_clear_on_a_missing_cache(cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache", "clear"]) == 0 and "removed 0 files" in capsys.readouterr().out
    assert main(["cache", "info"]) == 0 and "empty" in capsys.readouterr().out


def test_profile_runs_the_command_with_profile_on(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "run.json"
    script = "from fusegrad import Tensor; print((Tensor([1.0], device='CPU') * 2).tolist())"
    assert main(["profile", "-o", str(trace), "--", sys.executable, "-c", script]) == 0
    out, err = capfd.readouterr()
    assert out.strip() == "[2.0]"
    assert f"trace written to {trace}" in err
    events = json.loads(trace.read_text())["traceEvents"]
    assert any(e.get("cat") == "kernel" for e in events)


def test_profile_passes_the_exit_code_and_says_when_no_trace_came(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "none.json"
    code = main(["profile", "-o", str(trace), "--", sys.executable, "-c", "raise SystemExit(3)"])
    assert code == 3
    assert "wrote no trace" in capfd.readouterr().err
    assert main(["profile"]) == 2


TINY_MODEL = """
import numpy as np
from fusegrad import Tensor


class Net:
    def __init__(self):
        self.w = Tensor(np.arange(12, dtype=np.float32).reshape(4, 3) / 10).realize()

    def __call__(self, x):
        return (x @ self.w).relu()


net = Net()
"""


@pytest.mark.skipif(not available("WEBGPU"), reason="no WebGPU adapter here")
def test_export_web_writes_the_page_of_a_module_object(tmp_path: Path) -> None:
    (tmp_path / "tiny_model.py").write_text(TINY_MODEL)
    done = subprocess.run(
        [*FUSEGRAD, "export-web", "tiny_model:net", "--input-shape", "2,4", "page"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "wrote" in done.stdout
    page = tmp_path / "page"
    for name in ("index.html", "model.js", "weights.safetensors", "inputs.safetensors"):
        assert (page / name).is_file(), name
    assert "@compute" in (page / "model.js").read_text()


def test_export_web_says_what_is_wrong(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export-web", "no_colon", "--input-shape", "2", "out"]) == 1
    assert "is not MODULE:OBJECT" in capsys.readouterr().err
    assert main(["export-web", "m:o", "--input-shape", "2,x", "out"]) == 1
    assert "--input-shape '2,x'" in capsys.readouterr().err
    missing = ["export-web", "no_such_module_here:o", "--input-shape", "2", "--device", "CPU", "o"]
    assert main(missing) == 1
    assert "No module named 'no_such_module_here'" in capsys.readouterr().err


@pytest.mark.skipif(not available("WEBGPU"), reason="no WebGPU adapter here")
def test_devices_names_the_webgpu_adapter() -> None:
    (webgpu,) = [d for d in survey()["devices"] if d["name"] == "WEBGPU"]
    from fusegrad_webgpu.device import find_adapter

    assert webgpu["hardware"].startswith(find_adapter().info["device"])


def test_devices_json_into_a_closed_pipe_ends_quietly() -> None:
    """The reader is gone before anything is written: no BrokenPipeError traceback."""
    child = subprocess.Popen(
        [*FUSEGRAD, "devices", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()
    assert child.wait(timeout=120) == 1
    assert child.stderr.read() == b""


def test_devices_json_into_head() -> None:
    command = f"{' '.join(FUSEGRAD)} devices --json | head -1"
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=120, env=os.environ
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "{\n", "")
