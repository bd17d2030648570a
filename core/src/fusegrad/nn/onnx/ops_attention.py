"""ONNX's Attention (opsets 23 to 25) and RotaryEmbedding.

Attention builds one additive bias (mask, causal frontier, sliding window, key padding) of
zeros and -inf, adds it to the (optionally soft-capped) scores and takes a softmax in which a
row with no attendable key is all zeros rather than NaN, as the spec asks.
"""

from __future__ import annotations

import math
from typing import Any

from fusegrad.dtype import dtypes
from fusegrad.nn.onnx.dtypes import to_dtype
from fusegrad.nn.onnx.ops_nn import bad_choice
from fusegrad.nn.onnx.registry import Node, onnx_op
from fusegrad.nn.onnx.runner import onnx_check
from fusegrad.tensor import Tensor


def _split_heads(x: Tensor, heads: int) -> Tensor:
    """(B, S, heads * D) to (B, heads, S, D)."""
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).permute(0, 2, 1, 3)


def _allowed_bias(allowed: Tensor, dtype: Any) -> Tensor:
    return allowed.where(0.0, -math.inf).cast(dtype)


def _frontier(q_len: int, kv_len: int, offset: Tensor | int, device: str) -> Tensor:
    """i + offset - j for query i, key j: (q, kv), or (B, 1, q, kv) for a per-batch offset."""
    i = Tensor.arange(q_len, device=device, dtype=dtypes.int64).reshape(q_len, 1)
    j = Tensor.arange(kv_len, device=device, dtype=dtypes.int64).reshape(1, kv_len)
    if isinstance(offset, Tensor):
        return (i + offset.cast(dtypes.int64).reshape(-1, 1, 1, 1)) - j
    return i + offset - j


def _bias(
    node: Node, q: Tensor, kv_len: int, mask: Tensor | None, past: int, nonpad: Tensor | None
) -> Tensor:
    """The additive bias of zeros and -inf for the scores (B?, H?, q, kv)."""
    q_len, dtype = q.shape[2], q.dtype
    bias = Tensor.zeros((q_len, kv_len), dtype=dtype, device=q.device)
    if mask is not None:
        short = kv_len - mask.shape[-1]  # a mask shorter than the keys is padded: masked
        if mask.dtype == dtypes.bool:
            mask = mask.pad([None] * (mask.ndim - 1) + [(0, short)], value=False) if short else mask
            mask = _allowed_bias(mask, dtype)
        elif short:
            mask = mask.pad([None] * (mask.ndim - 1) + [(0, short)], value=-math.inf)
        bias = bias + mask.cast(dtype)
    offset: Tensor | int = past
    if nonpad is not None and not past:
        offset = nonpad - q_len
    diff = _frontier(q_len, kv_len, offset, q.device)
    if node.attr("is_causal", 0):
        bias = bias + _allowed_bias(diff >= 0, dtype)
    left, right = int(node.attr("left_window_size", -1)), int(node.attr("right_window_size", -1))
    if left >= 0:
        bias = bias + _allowed_bias(diff <= left, dtype)
    if right >= 0:
        bias = bias + _allowed_bias(-diff <= right, dtype)
    if nonpad is not None:
        keys = Tensor.arange(kv_len, device=q.device, dtype=dtypes.int64).reshape(1, kv_len)
        padding = keys < nonpad.cast(dtypes.int64).reshape(-1, 1)
        bias = bias + _allowed_bias(padding, dtype).reshape(-1, 1, 1, kv_len)
    return bias


def _masked_softmax(scores: Tensor, bias: Tensor) -> Tensor:
    """softmax over the last axis; a row whose bias is all -inf gives zeros."""
    top = scores.max(-1, keepdim=True)
    top = top.isinf().where(0.0, top).cast(scores.dtype)
    e = (scores - top).cast(dtypes.float32).exp().cast(scores.dtype)  # float32 exp, as numpy
    total = e.sum(-1, keepdim=True)
    p = e / (total == 0).where(1.0, total).cast(scores.dtype)
    dead = bias.max(-1, keepdim=True) == -math.inf
    return dead.where(0.0, p).cast(scores.dtype)


def _matmul(a: Tensor, b: Tensor) -> Tensor:
    """a @ b summed in float32 for half inputs (as numpy, which the spec's reference uses)."""
    if a.dtype == dtypes.float16:
        return a.cast(dtypes.float32).matmul(b.cast(dtypes.float32)).cast(a.dtype)
    return a.matmul(b)


def _scores(node: Node, q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
    """q k^T * ``scale`` (its square root on each side) and the values, the kv heads repeated
    for grouped queries."""
    scale = node.attr("scale")
    root = math.sqrt(1 / math.sqrt(q.shape[3]) if scale is None else float(scale))
    reps = q.shape[1] // k.shape[1]
    if reps > 1:
        k, v = k.repeat_interleave(reps, 1), v.repeat_interleave(reps, 1)
    return _matmul(q * root, (k * root).transpose(-2, -1)), v


@onnx_op("Attention", since=23)
def attention(
    node: Node,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    past_k: Tensor | None = None,
    past_v: Tensor | None = None,
    nonpad: Tensor | None = None,
) -> Any:
    """softmax(q k^T * scale + bias) v over heads; 3-d inputs are split into heads, kv heads are
    repeated for grouped queries, the past keys and values are prepended (``present_*``)."""
    three_d = q.ndim == 3
    if three_d:
        q = _split_heads(q, int(node.attr("q_num_heads")))
        k = _split_heads(k, int(node.attr("kv_num_heads")))
        v = _split_heads(v, int(node.attr("kv_num_heads")))
    present_k = k if past_k is None else past_k.cat(k, dim=2)
    present_v = v if past_v is None else past_v.cat(v, dim=2)
    past = 0 if past_k is None else past_k.shape[2]
    bias = _bias(node, q, present_k.shape[2], mask, past, nonpad)
    scores, vv = _scores(node, q, present_k, present_v)
    cap = float(node.attr("softcap", 0.0) or 0.0)
    if cap > 0:
        scores = (scores / cap).tanh() * cap
    biased = scores + bias
    mode = int(node.attr("qk_matmul_output_mode", 0))
    precision = node.attr("softmax_precision")
    work = biased.cast(to_dtype(int(precision))) if precision else biased
    probs = _masked_softmax(work, bias)
    qk_out = {2: biased, 3: probs}.get(mode, scores).cast(q.dtype)
    y = _matmul(probs.cast(q.dtype), vv)
    if three_d:
        y = y.permute(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    return (y, present_k, present_v, qk_out)[: max(1, len(node.outputs))]


@onnx_op("RotaryEmbedding", since=23)
def rotary_embedding(
    node: Node, x: Tensor, cos: Tensor, sin: Tensor, positions: Tensor | None = None
) -> Tensor:
    """Rotate pairs of the first ``rotary_embedding_dim`` features of each head by the cached
    angles of each position: halves (x[:d/2], x[d/2:]) or, ``interleaved``, (x[0::2], x[1::2])."""
    shape = x.shape
    if x.ndim == 4:  # (B, H, S, D) to (B, S, H, D)
        x = x.permute(0, 2, 1, 3)
    else:
        heads = int(node.attr("num_heads"))
        x = x.reshape(shape[0], shape[1], heads, shape[2] // heads)
    dim = int(node.attr("rotary_embedding_dim", 0)) or x.shape[3]
    if positions is not None:
        cos, sin = cos[positions], sin[positions]
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    rot, rest = x[..., :dim], x[..., dim:]
    interleaved = bool(node.attr("interleaved", 0))
    if interleaved:
        pairs = rot.reshape(rot.shape[:-1] + (dim // 2, 2))
        x1, x2 = pairs[..., 0], pairs[..., 1]
    else:
        x1, x2 = rot[..., : dim // 2], rot[..., dim // 2 :]
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if interleaved:
        rot = real.unsqueeze(-1).cat(imag.unsqueeze(-1), dim=-1).reshape(rot.shape)
    else:
        rot = real.cat(imag, dim=-1)
    out = rot.cat(rest, dim=-1) if rest.shape[-1] else rot
    return out.reshape(shape) if len(shape) == 3 else out.permute(0, 2, 1, 3)


@onnx_op("CausalConvWithState", since=27)
def causal_conv_with_state(
    node: Node, x: Tensor, w: Tensor, b: Tensor | None = None, past: Tensor | None = None
) -> Any:
    """Depthwise causal 1-d convolution over (B, C, L) with the last k - 1 inputs of the
    previous call prepended (zeros without one); returns the output and those k - 1 positions
    of this call (``present_state``). ``activation`` silu/swish is fused."""
    batch, channels, length = x.shape
    k = w.shape[2]
    if past is None:
        past = Tensor.zeros((batch, channels, k - 1), dtype=x.dtype, device=x.device)
    padded = past.cast(x.dtype).cat(x, dim=2) if k > 1 else x
    out = None
    for j in range(k):
        term = padded[:, :, j : j + length].cast(dtypes.float32) * w[:, 0, j].reshape(1, -1, 1)
        out = term if out is None else out + term
    assert out is not None
    if b is not None:
        out = out + b.reshape(1, -1, 1)
    if str(node.attr("activation", "none")) in ("silu", "swish"):
        out = out * out.sigmoid()
    present = padded[:, :, padded.shape[2] - (k - 1) :]
    return out.cast(x.dtype), present


def _heads(x: Tensor, heads: int) -> Tensor:
    """(B, T, H * D) float32 to (B, H, T, D)."""
    return _split_heads(x, heads).cast(dtypes.float32)


@onnx_op("LinearAttention", since=27)
def linear_attention(
    node: Node,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    past: Tensor | None = None,
    decay: Tensor | None = None,
    beta: Tensor | None = None,
) -> Any:
    """The recurrent state S (B, H_kv, d_k, d_v), per token: decayed by exp(g) (gated rules),
    corrected towards v by beta (delta rules), plus k (x) v; the output reads q^T S * scale.
    Unrolled over the tokens (T is a shape), all lazy."""
    hq, hkv = int(node.attr("q_num_heads")), int(node.attr("kv_num_heads"))
    rule = str(node.attr("update_rule", "gated_delta"))
    b, t, _ = q.shape
    q4, k4, v4 = _heads(q, hq), _heads(k, hkv), _heads(v, hkv)
    d_k, d_v = q4.shape[3], v4.shape[3]
    scale = float(node.attr("scale", 0.0) or 0.0) or 1 / math.sqrt(d_k)
    if decay is not None:
        g4 = (
            _heads(decay, hkv)
            if decay.shape[-1] == hkv * d_k
            else decay.reshape(b, t, hkv, 1).permute(0, 2, 1, 3).cast(dtypes.float32)
        )
    if beta is not None:
        beta4 = beta.reshape(b, t, beta.shape[-1], 1).permute(0, 2, 1, 3).cast(dtypes.float32)
    state = (
        past.cast(dtypes.float32)
        if past is not None
        else Tensor.zeros((b, hkv, d_k, d_v), dtype=dtypes.float32, device=q.device)
    )
    group, outs = hq // hkv, []
    for i in range(t):
        k_t, v_t = k4[:, :, i], v4[:, :, i]
        if rule in ("gated", "gated_delta"):
            state = state * g4[:, :, i].exp().unsqueeze(-1)
        if rule in ("delta", "gated_delta"):
            retrieved = (state * k_t.unsqueeze(-1)).sum(2)
            v_t = beta4[:, :, i] * (v_t - retrieved)
        state = state + k_t.unsqueeze(-1) * v_t.unsqueeze(-2)
        read = state.repeat_interleave(group, 1) if group > 1 else state
        outs.append((q4[:, :, i].unsqueeze(-1) * read).sum(2) * scale)  # (B, H_q, d_v)
    y = Tensor.stack(outs, dim=2).permute(0, 2, 1, 3).reshape(b, t, hq * d_v)
    return y.cast(q.dtype), state.cast(past.dtype if past is not None else q.dtype)


@onnx_op("FlexAttention", since=1, domain="ai.onnx.preview")
def flex_attention(node: Node, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """softmax(score_mod(q k^T * scale)) v with optional subgraphs rewriting the scores
    (``score_mod``) and the probabilities (``prob_mod``); half inputs compute in float32."""
    scores, vv = _scores(node, q, k, v)
    precision = node.attr("softmax_precision")
    if precision:
        work = to_dtype(int(precision))
    else:
        work = dtypes.float32 if q.dtype in (dtypes.float16, dtypes.bfloat16) else q.dtype
    scores = scores.cast(work)
    if "score_mod" in node.attrs:
        scores = node.run_subgraph("score_mod", [scores])[0].cast(work)  # type: ignore[misc]
    probs = scores.softmax(-1)
    if "prob_mod" in node.attrs:
        probs = node.run_subgraph("prob_mod", [probs])[0].cast(work)  # type: ignore[misc]
    return probs.matmul(vv.cast(work)).cast(v.dtype)


@onnx_check("LinearAttention")
def check_linear_attention(node: Node) -> str | None:
    if node.attr("q_num_heads") is None or node.attr("kv_num_heads") is None:
        return "attributes q_num_heads and kv_num_heads are required; set both"
    return bad_choice(
        node, {"update_rule": ("gated_delta", ("linear", "gated", "delta", "gated_delta"))}
    )


@onnx_check("CausalConvWithState")
def check_causal_conv(node: Node) -> str | None:
    return bad_choice(node, {"activation": ("none", ("none", "silu", "swish"))})
