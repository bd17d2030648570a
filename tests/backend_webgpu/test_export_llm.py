"""A captured step with variables and state, and a language model's decode loop, exported as
pages that run in headless Chromium and give what the CPU backend gives."""

from __future__ import annotations

import base64
import json
import os
import shutil

import numpy as np
import pytest

from fusegrad import Tensor, TinyJit, Variable
from fusegrad.errors import InvalidValue
from fusegrad_webgpu.export import export_webgpu

from .chromium import Chromium, find_chromium
from .test_export import served  # noqa: F401 - a fixture

gguf = pytest.importorskip("gguf")

from fusegrad.models.llama import Llama, smollm2_path  # noqa: E402
from fusegrad_webgpu.llm import export_llm  # noqa: E402
from tests.models.smollm2_reference import GREEDY_IDS, GREEDY_TEXT, PROMPT_IDS  # noqa: E402

#: where a test saves what a person should see (the page's screenshot), when set
ARTEFACTS = "FUSEGRAD_TEST_ARTEFACTS"
DONE = (
    "(s => s === 'done' || s.startsWith('error') ? s : '')"
    "(document.getElementById('status').textContent)"
)


def write_tiny_llama(path, vocab=256, dim=64, layers=2, heads=4, kv_heads=2, ffn=128):
    """A random Llama GGUF file as the converter writes one: Q4_1 matrices, a Q8_0 embedding
    (tied head), float32 norms."""
    rng = np.random.default_rng(0)
    quant = gguf.GGMLQuantizationType
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(128)
    writer.add_embedding_length(dim)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(vocab)

    def matrix(name, rows, columns, kind=quant.Q4_1, scale=0.2):
        values = (rng.standard_normal((rows, columns)) * scale).astype(np.float32)
        raw = gguf.quants.quantize(values, kind)
        writer.add_tensor(name, raw, raw_shape=raw.shape, raw_dtype=kind)

    def norm(name):
        writer.add_tensor(name, (1 + 0.1 * rng.standard_normal(dim)).astype(np.float32))

    matrix("token_embd.weight", vocab, dim, quant.Q8_0, 1.0)
    width = kv_heads * (dim // heads)
    for i in range(layers):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight")
        norm(p + "ffn_norm.weight")
        matrix(p + "attn_q.weight", dim, dim)
        matrix(p + "attn_k.weight", width, dim)
        matrix(p + "attn_v.weight", width, dim)
        matrix(p + "attn_output.weight", dim, dim)
        matrix(p + "ffn_gate.weight", ffn, dim)
        matrix(p + "ffn_up.weight", ffn, dim)
        matrix(p + "ffn_down.weight", dim, ffn)
    norm("output_norm.weight")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def greedy_one_at_a_time(model, prompt, count):
    """Greedy ids after feeding ``prompt`` one token per step, as the page does."""
    model.reset()
    for token in prompt:
        logits = model.logits([token])
    ids = []
    while len(ids) < count:
        ids.append(int(np.argmax(logits)))
        if len(ids) < count:
            logits = model.logits(ids[-1:])
    return ids


def open_page(url):
    """Chromium showing ``url``, or a skip where it is not installed."""
    executable = find_chromium()
    if executable is None:
        pytest.skip("chromium is not installed (apt-get install -y chromium)")
    return Chromium(url, executable)


def model_constant(folder, name):
    """One constant of an exported ``model.js``."""
    text = (folder / "model.js").read_text()
    return json.loads(text.split(f"export const {name} = ")[1].split(";\n")[0])


def counting_step(in_place: bool = False):
    """A TinyJit step that adds its input ``(seq, 4)`` to a state and returns twice the state's
    column sums: to a whole tensor (an assign TinyJit copies back), or in place, into the first
    ``seq`` rows of a buffer (as a KV cache is written)."""
    total = Tensor.zeros(*((8, 4) if in_place else (4,)), device="WEBGPU").contiguous().realize()

    def step(x):
        if in_place:
            view = total.shrink(((0, x.shape[0]), None))
            view.assign(view + x).realize()
            return (total.sum(0) * 2).realize()
        total.assign(total + x.sum(0))
        return (total * 2).realize(total)

    return TinyJit(step), Variable("seq", 1, 8)


def test_a_captured_step_exports_its_variables_and_its_state(tmp_path):
    step, seq = counting_step()
    x = Tensor(np.ones((3, 4), np.float32), device="WEBGPU").reshape(seq.bind(3), 4)
    folder = export_webgpu(step, [x], tmp_path)
    buffers = model_constant(folder, "buffers")
    assert model_constant(folder, "variables") == {"seq": [1, 8]}
    assert model_constant(folder, "values") == {"seq": 3}
    assert buffers[0]["role"] == "input" and buffers[0]["bytes"] == 8 * 4 * 4  # largest seq
    [(after, before)] = model_constant(folder, "state")
    assert buffers[before]["role"] == "state" and after != before
    dispatches = model_constant(folder, "dispatches")
    assert any(d["variables"] == ["seq"] and d["uniform"] is not None for d in dispatches)
    most = max(len(d["bindings"]) for d in dispatches)
    assert model_constant(folder, "limits")["maxStorageBuffersPerShaderStage"] == most


@pytest.mark.parametrize("in_place", [False, True], ids=["assign", "in-place"])
def test_the_state_and_variables_carry_from_run_to_run_in_chromium(served, in_place):  # noqa: F811
    folder, url = served
    step, seq = counting_step(in_place)
    x = Tensor(np.ones((3, 4), np.float32), device="WEBGPU").reshape(seq.bind(3), 4)
    export_webgpu(step, [x], folder)
    # growing, as a KV cache does (rows past the prefix are not looked at)
    runs = (np.arange(12, dtype=np.float32).reshape(3, 4), np.full((5, 4), 0.5, np.float32))
    script = """(async () => {
      const model = await import('./model.js');
      const rt = await import('./fusegrad-webgpu.js');
      const adapter = await navigator.gpu.requestAdapter();
      const requiredLimits = rt.wantedLimits(adapter, model);
      const device = await adapter.requestDevice({ requiredLimits });
      const weights = rt.parseSafetensors(new Uint8Array(
        await (await fetch('weights.safetensors')).arrayBuffer()));
      const net = await rt.createModel(device, model, weights);
      const first = await net.run([new Float32Array(FIRST)], {seq: 3});
      const second = await net.run([new Float32Array(SECOND)], {seq: 5});
      window.outcome = JSON.stringify([Array.from(first[0]), Array.from(second[0])]);
    })().catch((e) => { window.outcome = 'error: ' + e.message; }); 1"""
    for name, values in zip(("FIRST", "SECOND"), runs, strict=True):
        script = script.replace(name, json.dumps(values.ravel().tolist()))
    browser = open_page(url)
    try:
        browser.wait_for(DONE, timeout=120)  # the page's own run, on the example input
        browser.evaluate(script)
        outcome = browser.wait_for("window.outcome", timeout=120)
    finally:
        browser.close()
    assert not outcome.startswith("error"), outcome
    first, second = (np.array(r, np.float32) for r in json.loads(outcome))
    start = 6.0  # the state after the export's two calls on ones(3, 4) (on a device of our
    # own: the page's run on the example input changed the page's buffers, not these)
    np.testing.assert_allclose(first, 2 * (start + runs[0].sum(0)))
    np.testing.assert_allclose(second, 2 * (start + runs[0].sum(0) + runs[1].sum(0)))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("llama") / "tiny.gguf")


@pytest.mark.parametrize("stops", [False, True], ids=["8-tokens", "stop-token"])
def test_the_page_generates_the_cpu_greedy_tokens(tiny, served, stops):  # noqa: F811
    folder, url = served
    prompt = [1, 2, 3, 4, 5]
    expected = greedy_one_at_a_time(Llama(tiny, device="CPU", max_context=32), prompt, 8)
    stop = {expected[3]} if stops else set()
    if stops:  # the page ends after the first stop token, which it shows
        expected = expected[: expected.index(expected[3]) + 1]
    export_llm(Llama(tiny, device="WEBGPU", max_context=32), folder, prompt, 8, stop=stop)
    browser = open_page(url)
    try:
        status = browser.wait_for(DONE, timeout=240)
        tokens = json.loads(browser.evaluate("document.getElementById('tokens').textContent"))
    finally:
        browser.close()
    assert status == "done", status
    assert tokens == {"prompt": prompt, "generated": expected}


def test_export_llm_refuses_a_model_off_webgpu_or_too_long_a_generation(tiny, tmp_path):
    with pytest.raises(InvalidValue, match="device='WEBGPU'"):
        export_llm(Llama(tiny, device="CPU", max_context=16), tmp_path, [1, 2], 4)
    with pytest.raises(InvalidValue, match="larger max_context"):
        export_llm(Llama(tiny, device="WEBGPU", max_context=16), tmp_path, [1] * 10, 10)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_smollm2_generates_its_cpu_tokens_in_chromium(served, tmp_path_factory):  # noqa: F811
    try:
        path = smollm2_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))
    from fusegrad.models.tokenizer import GGUFTokenizer

    folder, url = served
    cpu = greedy_one_at_a_time(Llama(path, device="CPU", max_context=32), PROMPT_IDS, 20)
    assert cpu == GREEDY_IDS
    model = Llama(path, device="WEBGPU", max_context=32)
    export_llm(model, folder, PROMPT_IDS, len(GREEDY_IDS), GGUFTokenizer(model.metadata).tokens)
    browser = open_page(url)
    try:
        status = browser.wait_for(DONE, timeout=600)
        tokens = json.loads(browser.evaluate("document.getElementById('tokens').textContent"))
        text = browser.evaluate("document.getElementById('generated').textContent")
        shot = browser.send("Page.captureScreenshot", {"format": "png"}, browser.session, 60)
    finally:
        browser.close()
    screenshot = tmp_path_factory.mktemp("artefacts") / "smollm2-in-chromium.png"
    screenshot.write_bytes(base64.b64decode(shot["data"]))
    assert screenshot.read_bytes().startswith(b"\x89PNG")
    if folder_for_artefacts := os.environ.get(ARTEFACTS):
        os.makedirs(folder_for_artefacts, exist_ok=True)
        shutil.copy(screenshot, folder_for_artefacts)
    assert status == "done", status
    assert tokens["generated"] == cpu
    assert text == GREEDY_TEXT
