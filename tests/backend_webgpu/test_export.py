"""A model exported with ``export_webgpu`` runs in headless Chromium and matches the CPU backend."""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import threading
from pathlib import Path

import numpy as np
import pytest

from fusegrad import Tensor, TinyJit
from fusegrad.nn.state import get_state_dict, safe_load
from fusegrad_webgpu.export import export_webgpu

from .chromium import Chromium, find_chromium

EXAMPLES = Path(__file__).parents[2] / "examples"


def mnist_model():
    """The model of examples/mnist.py, with random weights (realized on the CPU)."""
    spec = importlib.util.spec_from_file_location("fusegrad_example_mnist", EXAMPLES / "mnist.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    Tensor.manual_seed(0)
    return module.Model()


def move(model, device: str) -> None:
    """Put every tensor of ``model`` on ``device``, realized."""
    for t in get_state_dict(model).values():
        t.uop, t.device = t.to(device).realize().uop, device


@pytest.fixture
def served(tmp_path):
    """A folder served on 127.0.0.1; yields (folder, url)."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    http.server.SimpleHTTPRequestHandler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield tmp_path, f"http://127.0.0.1:{server.server_address[1]}/index.html"
    server.shutdown()
    server.server_close()


def test_export_writes_kernels_plan_and_weights(tmp_path):
    w = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device="WEBGPU").realize()
    folder = export_webgpu(lambda x: (x @ w).relu().sum(1), [np.ones((4, 2), np.float32)], tmp_path)
    assert sorted(p.name for p in folder.iterdir()) == [
        "fusegrad-webgpu.js",
        "index.html",
        "inputs.safetensors",
        "model.js",
        "weights.safetensors",
    ]
    text = (folder / "model.js").read_text()
    plan = json.loads(text.split("export const buffers = ")[1].split(";\nexport")[0])
    roles = [b["role"] for b in plan]
    assert roles[:2] == ["input", "weight"] and roles[-1] == "output"
    assert set(roles[2:-1]) <= {"temporary"}  # however many kernels the scheduler makes
    assert "@compute" in text and "export const dispatches" in text
    np.testing.assert_array_equal(
        safe_load(folder / "weights.safetensors")["slot1"].numpy(), w.numpy().ravel()
    )


def test_a_kernel_over_a_variable_is_refused_naming_it(tmp_path):
    from fusegrad import Variable
    from fusegrad.errors import FusegradError

    seq = Variable("seq", 1, 16)
    with pytest.raises(FusegradError, match="Variable 'seq'.*concrete shapes"):
        export_webgpu(
            lambda x: (x.reshape(seq.bind(4), 2) * 2).sum(1),
            [np.ones((4, 2), np.float32)],
            tmp_path,
        )
    assert list(tmp_path.iterdir()) == []  # nothing half-written


@pytest.mark.parametrize("captured", [False, True], ids=["schedule", "tinyjit"])
def test_exported_mnist_model_runs_in_chromium(served, captured):
    executable = find_chromium()
    if executable is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    folder, url = served
    model = mnist_model()
    x = np.random.default_rng(0).standard_normal((1, 1, 28, 28)).astype(np.float32)
    expected = model(Tensor(x, device="CPU")).numpy()
    move(model, "WEBGPU")
    export_webgpu(TinyJit(lambda t: model(t).realize()) if captured else model, [x], folder)
    browser = Chromium(url, executable)
    try:
        status = browser.wait_for(
            "(s => s === 'done' || s.startsWith('error') ? s : '')"
            "(document.getElementById('status').textContent)",
            timeout=240,
        )
        assert status == "done", status
        result = json.loads(browser.evaluate("document.getElementById('result').textContent"))
    finally:
        browser.close()
    assert result["shape"] == [1, 10]
    np.testing.assert_allclose(
        np.array(result["values"], np.float32).reshape(1, 10), expected, rtol=1e-4, atol=1e-4
    )
