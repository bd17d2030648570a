"""The pure-math ops of the ``ai.onnx.ml`` domain (scikit-learn exports).

Linear models are a matmul and a post-transform; a tree ensemble becomes two matmuls too: each
split is one comparison for every row at once, and a leaf is reached when all the splits on
its path agree (the count of agreeing splits equals the path length), so no per-row branching
is needed. LabelEncoder maps strings, which fusegrad tensors cannot hold, on the host.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fusegrad.dtype import dtypes
from fusegrad.errors import InvalidValue
from fusegrad.nn.onnx.ops_nn import bad_choice, read_back, text
from fusegrad.nn.onnx.registry import ML_DOMAIN, Node, onnx_op
from fusegrad.nn.onnx.runner import onnx_check
from fusegrad.tensor import Tensor


def _rows(x: Tensor) -> Tensor:
    """A 1-d input is one row."""
    return x.reshape(1, -1) if x.ndim == 1 else x


def _const(values: Any, like: Tensor, dtype: Any = dtypes.float32) -> Tensor:
    return Tensor(np.asarray(values, dtype=dtype.np), device=like.device)


@onnx_op("ArrayFeatureExtractor", domain=ML_DOMAIN)
def array_feature_extractor(node: Node, x: Tensor, indices: Tensor) -> Tensor:
    """The features at ``indices`` (last axis); a 1-d input gives one row."""
    picked = x[..., indices.reshape(-1).cast(dtypes.int64)]
    return picked.reshape(1, -1) if x.ndim == 1 else picked


@onnx_op("Binarizer", domain=ML_DOMAIN)
def binarizer(node: Node, x: Tensor) -> Tensor:
    return (x > float(node.attr("threshold", 0.0))).cast(x.dtype)


@onnx_op("Scaler", domain=ML_DOMAIN)
def scaler(node: Node, x: Tensor) -> Tensor:
    """(x - offset) * scale, each broadcast along the features; the result is float."""
    offset, scale = node.attr("offset", [0.0]), node.attr("scale", [1.0])
    xf = x.cast(dtypes.float32)
    return (xf - _const(offset, x)) * _const(scale, x)


@onnx_op("Normalizer", domain=ML_DOMAIN)
def normalizer(node: Node, x: Tensor) -> Tensor:
    """Each row divided by its MAX, L1 or L2 norm (at least 1e-30)."""
    rows, norm = _rows(x.cast(dtypes.float32)), text(node.attr("norm", "MAX"))
    if norm == "MAX":
        div = rows.abs().max(1, keepdim=True)
    elif norm == "L1":
        div = rows.abs().sum(1, keepdim=True)
    elif norm == "L2":
        div = (rows * rows).sum(1, keepdim=True).sqrt()
    else:
        raise InvalidValue(f"Normalizer {node.name!r}: norm must be MAX, L1 or L2, got {norm!r}")
    return rows / div.maximum(1e-30)


@onnx_op("OneHotEncoder", domain=ML_DOMAIN)
def one_hot_encoder(node: Node, x: Any) -> Tensor:
    """A float one-hot vector over the categories for each value (a new last axis)."""
    ints, strings = node.attr("cats_int64s"), node.attr("cats_strings")
    if isinstance(x, np.ndarray):  # strings
        cats = list(strings or [])
        out = np.stack([np.asarray(x) == c for c in cats], axis=-1).astype(np.float32)
        return Tensor(out)
    codes = _const(ints or [], x, dtypes.int64)
    return (x.cast(dtypes.int64).unsqueeze(-1) == codes).cast(dtypes.float32)


# ---- post transforms -----------------------------------------------------------------------------


def post_transform(scores: Tensor, how: str) -> Tensor:
    """ONNX-ML's score transforms over the class axis (1)."""
    if how == "NONE":
        return scores
    if how == "LOGISTIC":
        return scores.sigmoid()
    if how == "SOFTMAX":
        return scores.softmax(1)
    if how == "SOFTMAX_ZERO":  # zeros stay out of the exponentials
        e = (scores.abs() > 1e-7).where(
            (scores - scores.max(1, keepdim=True)).exp(),
            scores * (-scores.max(1, keepdim=True)).exp(),
        )
        total = e.sum(1, keepdim=True)
        return (total == 0).where(0.5, e / total)
    if how == "PROBIT":
        return (scores * 2 - 1).erfinv() * math.sqrt(2)
    raise InvalidValue(
        f"unknown post_transform {how!r}; ONNX-ML allows NONE, LOGISTIC, "
        "SOFTMAX, SOFTMAX_ZERO, PROBIT"
    )


@onnx_op("LinearRegressor", domain=ML_DOMAIN)
def linear_regressor(node: Node, x: Tensor) -> Tensor:
    """x @ coefficients^T + intercepts, one column per target."""
    targets = int(node.attr("targets", 1))
    rows = _rows(x.cast(dtypes.float32))
    coef = _const(node.attr("coefficients"), x).reshape(targets, -1)
    out = rows.matmul(coef.transpose(0, 1))
    if node.attr("intercepts"):
        out = out + _const(node.attr("intercepts"), x)
    return post_transform(out, text(node.attr("post_transform", "NONE")))


@onnx_op("LinearClassifier", domain=ML_DOMAIN)
def linear_classifier(node: Node, x: Tensor) -> Any:
    """(label, scores): scores = x @ coefficients^T + intercepts after the post transform
    (one score for two classes becomes (-s, s)); the label is the best class's."""
    ints, strings = node.attr("classlabels_ints"), node.attr("classlabels_strings")
    labels = list(ints) if ints else list(strings or [])
    rows = _rows(x.cast(dtypes.float32))
    coef = _const(node.attr("coefficients"), x).reshape(-1, rows.shape[1])
    scores = rows.matmul(coef.transpose(0, 1))
    if node.attr("intercepts"):
        scores = scores + _const(node.attr("intercepts"), x)
    if coef.shape[0] == 1 and len(labels) == 2:
        scores = (-scores).cat(scores, dim=1)
    how = text(node.attr("post_transform", "NONE"))
    scores = post_transform(scores, how)
    if scores.shape[1] > 1:
        best = scores.argmax(1)
        if strings and not ints:
            return np.asarray(labels, dtype=object)[read_back(node, best, "the best class")], scores
        return _const(labels, x, dtypes.int64)[best], scores
    hit = (scores >= (0.0 if how == "NONE" else 0.5)).reshape(-1)
    if strings and not ints:
        return np.where(read_back(node, hit, "the decision"), labels[0], "").astype(object), scores
    return hit.where(labels[0], 0).cast(dtypes.int64), scores


# ---- LabelEncoder --------------------------------------------------------------------------------


def _mapping(node: Node) -> tuple[list, list, Any, Any]:
    """(keys, values, default, numpy output dtype) from any of the attribute spellings."""
    keys = (
        node.attr("keys_strings")
        or node.attr("keys_int64s")
        or node.attr("keys_floats")
        or node.attr("classes_strings")
    )
    if keys is None and node.attr("keys_tensor") is not None:
        keys = node.attr("keys_tensor").reshape(-1).tolist()
    values, default, dtype = None, None, None
    for key, fallback, kind in (
        ("values_strings", "default_string", object),
        ("values_int64s", "default_int64", np.int64),
        ("values_floats", "default_float", np.float32),
    ):
        if node.attr(key):
            values, dtype = list(node.attr(key)), kind
            default = node.attr(fallback, {object: "_Unused", np.int64: -1, np.float32: -0.0}[kind])
    if values is None and node.attr("values_tensor") is not None:
        table = node.attr("values_tensor")
        values, dtype = table.reshape(-1).tolist(), table.dtype
        fallback = node.attr("default_tensor")
        default = (
            fallback.reshape(-1)[0]
            if fallback is not None
            else ("_Unused" if table.dtype == object else -1 if table.dtype.kind in "iu" else -0.0)
        )
    if keys is None or values is None:
        raise InvalidValue(f"LabelEncoder {node.name!r} has no keys or values attribute")
    return list(keys), values, default, dtype


@onnx_op("LabelEncoder", domain=ML_DOMAIN)
def label_encoder(node: Node, x: Any) -> Any:
    """Each input value replaced by its value in the keys -> values table (``default_*`` when
    absent). Strings are looked up on the host; numbers too, since the table is small."""
    keys, values, default, dtype = _mapping(node)
    table = dict(zip(keys, values, strict=False))
    source = x if isinstance(x, np.ndarray) else read_back(node, x, "the values to encode")
    out = np.vectorize(lambda v: table.get(v, default), otypes=[object])(source)
    if dtype is object:
        return out.astype(object)
    return Tensor(out.astype(dtype).reshape(source.shape))


# ---- TreeEnsemble --------------------------------------------------------------------------------

#: TreeEnsemble node modes: 0 LEQ, 1 LT, 2 GTE, 3 GT, 4 EQ, 5 NEQ, 6 MEMBER
_COMPARE = {
    0: lambda v, s: v <= s,
    1: lambda v, s: v < s,
    2: lambda v, s: v >= s,
    3: lambda v, s: v > s,
    4: lambda v, s: v == s,
    5: lambda v, s: v != s,
}


def tree_paths(node: Node) -> tuple[list[tuple[int, list[tuple[int, bool]]]], dict[int, list]]:
    """Every leaf reached from a root with its path [(split node, branch taken)], in ONNX's
    depth-first order (which also assigns the MEMBER nodes their sets)."""
    modes = list(node.attr("nodes_modes"))
    true_ids, false_ids = node.attr("nodes_truenodeids"), node.attr("nodes_falsenodeids")
    true_leaf, false_leaf = node.attr("nodes_trueleafs"), node.attr("nodes_falseleafs")
    members = iter(np.asarray(node.attr("membership_values", []), dtype=np.float64).tolist())
    sets: dict[int, list] = {}
    leaves: list[tuple[int, list[tuple[int, bool]]]] = []

    def walk(index: int, is_leaf: bool, path: list[tuple[int, bool]]) -> None:
        if is_leaf:
            leaves.append((index, path))
            return
        if int(modes[index]) == 6:
            chosen = []
            for value in members:
                if math.isnan(value):
                    break
                chosen.append(value)
            sets[index] = chosen
        walk(int(true_ids[index]), bool(true_leaf[index]), [*path, (index, True)])
        walk(int(false_ids[index]), bool(false_leaf[index]), [*path, (index, False)])

    for root in node.attr("tree_roots"):
        root = int(root)
        lone = true_leaf[root] and false_leaf[root] and true_ids[root] == false_ids[root]
        walk(int(true_ids[root]) if lone else root, bool(lone), [])
    return leaves, sets


def _split_results(node: Node, x: Tensor, used: list[int], sets: dict[int, list]) -> Tensor:
    """(rows, len(used)) float: 1 where split node ``used[k]`` sends the row to its true side."""
    features = [int(node.attr("nodes_featureids")[i]) for i in used]
    values = x[:, features]
    splits = node.attr("nodes_splits")
    splits = splits.reshape(-1).tolist() if isinstance(splits, np.ndarray) else list(splits)
    tracks = node.attr("nodes_missing_value_tracks_true") or [0] * len(splits)
    columns = []
    for k, i in enumerate(used):
        v, mode = values[:, k], int(node.attr("nodes_modes")[i])
        if mode == 6:
            hit = v.zeros_like().cast(dtypes.bool)
            for member in sets[i]:
                hit = hit | (v == member)
        else:
            hit = _COMPARE[mode](v, float(splits[i]))
        if tracks[i]:
            hit = hit | v.isnan()
        columns.append(hit)
    return Tensor.stack(columns, dim=1).cast(dtypes.float32)


@onnx_op("TreeEnsemble", since=5, domain=ML_DOMAIN)
def tree_ensemble(node: Node, x: Tensor) -> Tensor:
    """Sum (average, min or max) of the reached leaves' weights per target."""
    leaves, sets = tree_paths(node)
    used = sorted({i for _, path in leaves for i, _ in path})
    column = {i: k for k, i in enumerate(used)}
    want_true = np.zeros((len(used), len(leaves)), np.float32)
    want_false = np.zeros_like(want_true)
    for j, (_, path) in enumerate(leaves):
        for i, branch in path:
            (want_true if branch else want_false)[column[i], j] = 1
    depth = want_true.sum(0) + want_false.sum(0)
    xf = _rows(x).cast(dtypes.float32)
    if used:
        hits = _split_results(node, xf, used, sets)
        agree = hits.matmul(_const(want_true, x)) + (1 - hits).matmul(_const(want_false, x))
        reached = agree == _const(depth, x)
    else:
        reached = Tensor.ones((xf.shape[0], len(leaves)), dtype=dtypes.bool, device=x.device)
    return _aggregate(node, x, reached, leaves)


def _aggregate(node: Node, x: Tensor, reached: Tensor, leaves: list) -> Tensor:
    targets = int(node.attr("n_targets", 1))
    weights = node.attr("leaf_weights")
    weights = weights.reshape(-1).tolist() if isinstance(weights, np.ndarray) else list(weights)
    target_ids = node.attr("leaf_targetids")
    table = np.zeros((len(leaves), targets), np.float32)
    owner = np.zeros((len(leaves), targets), bool)
    for j, (leaf, _) in enumerate(leaves):
        table[j, int(target_ids[leaf])] += weights[leaf]
        owner[j, int(target_ids[leaf])] = True
    how = int(node.attr("aggregate_function", 1))
    if how in (0, 1):
        out = reached.cast(dtypes.float32).matmul(_const(table, x))
        out = out / len(node.attr("tree_roots")) if how == 0 else out
    else:
        live = reached.unsqueeze(-1) & _const(owner, x, dtypes.bool)
        fill = math.inf if how == 2 else -math.inf
        spread = live.where(_const(table, x), fill)
        out = spread.min(1) if how == 2 else spread.max(1)
        limit = float(np.finfo(np.float32).max)
        out = out.isinf().where(limit if how == 2 else -limit, out)
    return out.cast(x.dtype)


# ---- build-time checks ---------------------------------------------------------------------------

TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")


@onnx_check("Normalizer", domain=ML_DOMAIN)
def check_normalizer(node: Node) -> str | None:
    return bad_choice(node, {"norm": ("MAX", ("MAX", "L1", "L2"))})


@onnx_check("LinearClassifier", domain=ML_DOMAIN)
@onnx_check("LinearRegressor", domain=ML_DOMAIN)
def check_post_transform(node: Node) -> str | None:
    return bad_choice(node, {"post_transform": ("NONE", TRANSFORMS)})


@onnx_check("TreeEnsemble", domain=ML_DOMAIN)
def check_tree_ensemble(node: Node) -> str | None:
    if int(node.attr("aggregate_function", 1)) not in (0, 1, 2, 3):
        return "attribute aggregate_function must be 0 (AVERAGE), 1 (SUM), 2 (MIN) or 3 (MAX)"
    if any(int(m) not in range(7) for m in node.attr("nodes_modes", [])):
        return "nodes_modes must be 0..6 (LEQ, LT, GTE, GT, EQ, NEQ, MEMBER)"
    return None
