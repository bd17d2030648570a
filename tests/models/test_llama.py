"""SmolLM2-135M from its 4-bit GGUF file, against a float32 torch model built here from the same
file (gguf's numpy dequantization, then torch ops written out below)."""

import math
import subprocess
import sys

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
pytest.importorskip("tokenizers")
torch = pytest.importorskip("torch")

from fusegrad.models.llama import Llama, Sampler, smollm2_path  # noqa: E402
from fusegrad.models.tokenizer import GGUFTokenizer  # noqa: E402
from tests.models.smollm2_reference import GREEDY_IDS, GREEDY_TEXT, PROMPT, PROMPT_IDS  # noqa: E402


@pytest.fixture(scope="module")
def path():
    try:
        return smollm2_path()
    except FileNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="module")
def model(path):
    return Llama(path, max_context=64)


@pytest.fixture(scope="module")
def tokenizer(model):
    return GGUFTokenizer(model.metadata)


@pytest.fixture(scope="module")
def greedy(model):
    """fusegrad's greedy continuation of the prompt, and the logits each step picked from."""
    model.reset()
    steps = [model.logits(PROMPT_IDS)]
    ids = [int(np.argmax(steps[0]))]
    while len(ids) < len(GREEDY_IDS):
        steps.append(model.logits(ids[-1:]))
        ids.append(int(np.argmax(steps[-1])))
    return ids, steps


class TorchLlama:
    """The reference: every weight dequantized to float32 by gguf's numpy code, the model
    written out in torch. Rotary embeddings rotate pairs (2i, 2i+1), as the converter's
    permutation of the Q and K rows requires."""

    def __init__(self, path):
        reader = gguf.GGUFReader(str(path))
        meta = {k: f.contents() for k, f in reader.fields.items() if k.startswith("llama.")}
        self.heads, self.kv = (
            meta["llama.attention.head_count"],
            meta["llama.attention.head_count_kv"],
        )
        self.eps, self.theta = (
            meta["llama.attention.layer_norm_rms_epsilon"],
            meta["llama.rope.freq_base"],
        )
        self.w = {}
        for t in reader.tensors:
            values = gguf.quants.dequantize(t.data, t.tensor_type)
            shape = [int(n) for n in reversed(t.shape.tolist())]
            self.w[t.name] = torch.from_numpy(np.array(values, np.float32).reshape(shape))
        self.layers = meta["llama.block_count"]

    def norm(self, x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x):
        t, h, d = x.shape
        inv = self.theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        angles = torch.arange(t, dtype=torch.float64)[:, None] * inv[None]
        cos, sin = angles.cos().float()[:, None], angles.sin().float()[:, None]
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], -1).reshape(t, h, d)

    @torch.no_grad()
    def logits(self, ids):
        """The logits after each prefix of ``ids``, ``(len(ids), vocab)``, in one causal pass."""
        w, t = self.w, len(ids)
        x = w["token_embd.weight"][ids]
        mask = torch.full((t, t), -math.inf).triu(1)
        for i in range(self.layers):
            p = f"blk.{i}."
            h = self.norm(x, w[p + "attn_norm.weight"])
            q = self.rope((h @ w[p + "attn_q.weight"].T).reshape(t, self.heads, -1))
            k = self.rope((h @ w[p + "attn_k.weight"].T).reshape(t, self.kv, -1))
            v = (h @ w[p + "attn_v.weight"].T).reshape(t, self.kv, -1)
            group = self.heads // self.kv
            k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
            scores = torch.einsum("thd,shd->hts", q, k) / math.sqrt(q.shape[-1]) + mask
            out = torch.einsum("hts,shd->thd", scores.softmax(-1), v).reshape(t, -1)
            x = x + out @ w[p + "attn_output.weight"].T
            h = self.norm(x, w[p + "ffn_norm.weight"])
            gate = torch.nn.functional.silu(h @ w[p + "ffn_gate.weight"].T)
            x = x + (gate * (h @ w[p + "ffn_up.weight"].T)) @ w[p + "ffn_down.weight"].T
        head = w.get("output.weight", w["token_embd.weight"])
        return (self.norm(x, w["output_norm.weight"]) @ head.T).numpy()


@pytest.fixture(scope="module")
def reference(path):
    """The torch model's logits after the prompt and each expected token (teacher forcing, one
    pass), and its greedy picks from them: if every pick is the next expected token, its own
    greedy decoding is the expected sequence."""
    steps = TorchLlama(path).logits(PROMPT_IDS + GREEDY_IDS[:-1])[len(PROMPT_IDS) - 1 :]
    return [int(np.argmax(row)) for row in steps], list(steps)


def test_the_tokenizer_encodes_and_decodes_the_prompt(tokenizer):
    assert tokenizer.encode(PROMPT) == PROMPT_IDS
    assert tokenizer.decode(GREEDY_IDS) == GREEDY_TEXT


def test_the_chat_template_renders_chatml_with_control_tokens(tokenizer):
    text = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    ids = tokenizer.encode(text)
    assert ids[0] == 1 and ids.count(2) == 2  # <|im_start|>, <|im_end|> as single tokens
    assert 2 in tokenizer.stop_ids()


def test_greedy_decoding_gives_the_expected_tokens(greedy, reference):
    assert greedy[0] == GREEDY_IDS
    assert reference[0] == GREEDY_IDS


def test_logits_match_the_float32_torch_reference_at_every_step(greedy, reference):
    worst = max(float(np.abs(a - b).max()) for a, b in zip(greedy[1], reference[1], strict=True))
    print(f"largest logit difference from torch over 20 steps: {worst:.2e}")
    assert worst < 1e-3, worst


def test_a_sampler_with_a_seed_repeats_itself_and_respects_top_k(greedy):
    logits = greedy[1][0]
    picks = [Sampler(temperature=0.8, top_k=5, seed=s)(logits, []) for s in range(20)]
    again = [Sampler(temperature=0.8, top_k=5, seed=s)(logits, []) for s in range(20)]
    assert picks == again
    assert set(picks) <= set(np.argsort(-logits)[:5].tolist()) and len(set(picks)) > 1
    penalised = Sampler(repetition_penalty=1e9)(logits, [GREEDY_IDS[0]])
    assert penalised != GREEDY_IDS[0]  # the greedy pick, once seen, loses to another


def test_generation_stops_at_a_stop_token(model):
    model.reset()
    out = list(model.generate(PROMPT_IDS, 10, stop={GREEDY_IDS[1]}))
    assert out == GREEDY_IDS[:2]


def test_the_caches_are_written_in_place_and_the_projections_joined(model):
    """Each step writes its keys and values into the caches' own buffers (TinyJit has nothing
    to copy back), and q/k/v and gate/up are one matmul each."""
    block = model.blocks[0]
    buffers = (block.cache_k._buffer(), block.cache_v._buffer())
    model.reset()
    assert list(model.generate(PROMPT_IDS, 4)) == GREEDY_IDS[:4]  # (replays the decode step)
    assert block.cache_k._buffer() is buffers[0] and block.cache_v._buffer() is buffers[1]
    assert model._step.assigned == []
    c = model.config
    assert [w.shape for w in block.qkv] == [(c.dim + 2 * c.kv_heads * c.head_dim, c.dim)]
    assert [w.shape for w in block.gate_up] == [(2 * c.ffn, c.dim)]


def test_the_decode_steps_scores_read_the_rotated_query_from_its_own_buffer(model):
    """Each layer's attention scores over the cache (a kernel over the context Variable that
    sums 64 products) read two buffers, the rotated query and the keys: the query's rotation
    (its cosines and sines) is not recomputed for every key position."""
    model.reset()
    list(model.generate(PROMPT_IDS, 3))
    scores = [
        launch
        for launch in model._step.launches
        if launch.symbolic and launch.runner.program.name.endswith("context_1_64")
    ]
    assert len(scores) == model.config.layers
    assert all(len(launch.buffers) == 3 for launch in scores)  # (the output, q, the keys)


def test_a_prompt_filling_the_context_keeps_the_decode_steps_capture_valid(path, model):
    """The caches never move, even for a prompt as long as the context, so the decode step
    captured before a prompt replays after it, without capturing again."""
    small = Llama(path, max_context=32)
    list(small.generate(PROMPT_IDS, 4))
    launches = small._step.launches
    prompt = (PROMPT_IDS * 4)[:20]  # padded to 32 tokens: the whole context
    small.reset()
    model.reset()
    assert list(small.generate(prompt, 4)) == list(model.generate(prompt, 4))
    assert small._step.launches is launches


def test_the_chat_command_streams_a_reply_and_its_speed(path):
    command = [sys.executable, "-m", "fusegrad", "chat", str(path), "--prompt", PROMPT]
    command += ["--raw", "--max-tokens", "3", "--max-context", "32", "--device", "CPU"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(" Paris.\n")
    assert "prompt: 5 tokens" in done.stderr and "generation: 3 tokens" in done.stderr


def test_a_batch_of_prompts_generates_what_each_prompt_does_alone(path, model):
    other = [1, 4093, 198]  # "<|im_start|>user\n": a shorter prompt, another continuation
    model.reset()
    alone = list(model.generate(other, 2))
    batched = Llama(path, max_context=32, batch=2).generate_batch([PROMPT_IDS, other], 2)
    assert batched == [GREEDY_IDS[:2], alone]


@pytest.mark.slow
def test_the_model_generates_the_same_tokens_on_webgpu(path, reference):
    try:
        import fusegrad_webgpu
    except ImportError:
        pytest.skip("fusegrad-webgpu is not installed")
    if (why := fusegrad_webgpu.probe()) is not None:
        pytest.skip(f"WEBGPU unavailable: {why}")
    model = Llama(path, device="WEBGPU", max_context=32)
    steps = [model.logits(PROMPT_IDS)]
    for token in GREEDY_IDS[:2]:
        steps.append(model.logits([token]))
    assert [int(np.argmax(s)) for s in steps] == GREEDY_IDS[:3]
    worst = max(float(np.abs(a - b).max()) for a, b in zip(steps, reference[1]))
    assert worst < 1e-3, worst
