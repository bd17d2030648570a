"""ONNX's string ops, on the host: fusegrad has no string dtype, so a string tensor is a numpy
array of Python ``str`` objects and these ops are numpy and ``re`` code. A bool or int64 result
becomes a Tensor, so the math after it runs as usual.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from fusegrad.nn.onnx.registry import Node, onnx_op
from fusegrad.tensor import Tensor


def _strings(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=object)


@onnx_op("StringConcat", since=20)
def string_concat(n: Node, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.asarray(np.frompyfunc(lambda u, v: u + v, 2, 1)(_strings(a), _strings(b)), object)


@onnx_op("RegexFullMatch", since=20)
def regex_full_match(n: Node, x: np.ndarray) -> Tensor:
    pattern = re.compile(n.attr("pattern"))
    hits = np.frompyfunc(lambda s: pattern.fullmatch(s) is not None, 1, 1)(_strings(x))
    return Tensor(np.asarray(hits, dtype=bool).reshape(np.shape(x)))


@onnx_op("StringSplit", since=20)
def string_split(n: Node, x: np.ndarray) -> tuple[np.ndarray, Tensor]:
    """Split each string at ``delimiter`` (runs of whitespace when empty or absent), at most
    ``maxsplit`` times; the pieces are padded with "" to the longest count."""
    x = _strings(x)
    delimiter = n.attr("delimiter") or None
    maxsplit = n.attr("maxsplit", -1)
    pieces = [s.split(delimiter, maxsplit) for s in x.reshape(-1)]
    counts = np.array([len(p) for p in pieces], np.int64).reshape(x.shape)
    width = max((len(p) for p in pieces), default=0)
    out = np.full((len(pieces), width), "", dtype=object)
    for i, p in enumerate(pieces):
        out[i, : len(p)] = p
    return out.reshape(*x.shape, width), Tensor(counts)


@onnx_op("StringNormalizer", since=10)
def string_normalizer(n: Node, x: np.ndarray) -> np.ndarray:
    """Drop the elements that are stopwords, then change case; [C] or [1, C] in, the same rank
    out ([""] when nothing is left)."""
    x = _strings(x)
    sensitive = bool(n.attr("is_case_sensitive", 0))
    stops = set(n.attr("stopwords") or [])
    fold = (lambda s: s) if sensitive else str.lower
    stops = {fold(s) for s in stops}
    kept = [s for s in x.reshape(-1) if fold(s) not in stops]
    action = n.attr("case_change_action", "NONE")
    kept = [s.lower() if action == "LOWER" else s.upper() if action == "UPPER" else s for s in kept]
    out = np.array(kept or [""], dtype=object)
    return out.reshape(1, -1) if x.ndim == 2 else out


def _pool(n: Node) -> dict[tuple, int]:
    """n-gram (a tuple of tokens) -> output index, from the flat pool and its per-length starts."""
    pool = list(n.attr("pool_strings") or n.attr("pool_int64s") or [])
    starts = list(n.attr("ngram_counts")) + [len(pool)]
    indexes = list(n.attr("ngram_indexes"))
    grams: dict[tuple, int] = {}
    for length, (lo, hi) in enumerate(zip(starts, starts[1:]), start=1):
        for at in range(lo, hi, length):
            grams[tuple(pool[at : at + length])] = indexes[len(grams)]
    return grams


def _count_row(row: list, grams: dict[tuple, int], n: Node, counts: np.ndarray) -> None:
    """Count each pooled n-gram of ``row``: tokens ``skip + 1`` apart, skip up to the limit
    (a unigram is counted once, whatever the skip)."""
    low, high = n.attr("min_gram_length"), n.attr("max_gram_length")
    for length in range(low, high + 1):
        for skip in range(n.attr("max_skip_count", 0) + 1 if length > 1 else 1):
            span = (length - 1) * (skip + 1)
            for start in range(len(row) - span):
                gram = tuple(row[start : start + span + 1 : skip + 1])
                if gram in grams:
                    counts[grams[gram]] += 1


@onnx_op("TfIdfVectorizer", since=9)
def tfidf_vectorizer(n: Node, x: Any) -> Tensor:
    """Count the pooled n-grams of each row (TF), or mark them (IDF), times ``weights``."""
    data = x if isinstance(x, np.ndarray) else x.numpy()
    grams = _pool(n)
    width = max(n.attr("ngram_indexes")) + 1
    rows = data.reshape(-1, data.shape[-1]) if data.ndim > 1 else data.reshape(1, -1)
    counts = np.zeros((rows.shape[0], width), np.float32)
    for i, row in enumerate(rows):
        _count_row([v if isinstance(v, str) else int(v) for v in row], grams, n, counts[i])
    mode = n.attr("mode", "TF")
    if mode == "IDF":
        counts = (counts > 0).astype(np.float32)
    weights = n.attr("weights")
    if mode != "TF" and weights is not None:
        counts = counts * np.asarray(weights, np.float32)
    return Tensor(counts if data.ndim > 1 else counts[0])
