"""ONNX's signal ops: DFT, STFT, the Hann/Hamming/Blackman windows and MelWeightMatrix.

A DFT of length n along an axis is a matmul with the n-point cosine and sine tables, built on
the host in float64 (the lengths are shapes or known constants), so it fuses with what
surrounds it like any matmul. Complex values are ONNX's trailing axis of 1 (real) or 2
(real, imaginary). The windows and the mel matrix depend only on constants and are computed
on the host.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusegrad.dtype import dtypes
from fusegrad.errors import InvalidValue
from fusegrad.nn.onnx.dtypes import to_dtype
from fusegrad.nn.onnx.ops_nn import host_value
from fusegrad.nn.onnx.registry import Node, onnx_op
from fusegrad.tensor import Tensor


def host_int(node: Node, index: int, value: Any) -> int | None:
    """Input ``index`` as a Python int (known constant, else read back); None when absent."""
    array = host_value(node, index, value, f"input {index}")
    return None if array is None else int(array.reshape(-1)[0])


def host_float(node: Node, index: int, value: Any) -> float:
    return float(host_value(node, index, value, f"input {index}").reshape(-1)[0])  # type: ignore[union-attr]


# ---- DFT -----------------------------------------------------------------------------------------


def _tables(size_in: int, n: int, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2 pi k t / n for t < size_in (the input, zero-padded or cut to n) and
    k < bins: (size_in', bins) each."""
    t = np.arange(min(size_in, n), dtype=np.float64)[:, None]
    k = np.arange(bins, dtype=np.float64)[None, :]
    angle = 2 * np.pi * ((t * k) % n) / n
    return np.cos(angle), np.sin(angle)


def _apply(x: Tensor, table: np.ndarray) -> Tensor:
    """x (..., size_in) @ table (size', bins), cutting x to the table's rows."""
    if x.shape[-1] > table.shape[0]:
        x = x[..., : table.shape[0]]
    return x.matmul(Tensor(table.astype(np.float32), device=x.device).cast(x.dtype))


def dft(x: Tensor, n: int | None, axis: int, inverse: bool, onesided: bool) -> Tensor:
    """ONNX DFT of ``x`` (..., 1 or 2) along ``axis``; output (..., 2), or (..., 1) for the
    inverse of a one-sided spectrum (a real signal)."""
    axis = axis % x.ndim
    size = x.shape[axis]
    if n is None:
        n = 2 * (size - 1) if inverse and onesided else size
    real = x[..., 0].transpose(axis, -1)
    imag = x[..., 1].transpose(axis, -1) if x.shape[-1] == 2 else None
    if inverse and onesided:
        return _irfft(real, imag, n).transpose(axis, -1).unsqueeze(-1)
    bins = n // 2 + 1 if onesided and not inverse else n
    cos, sin = _tables(size, n, bins)
    sign = 1.0 if inverse else -1.0
    re, im = _apply(real, cos), _apply(real, sin) * sign
    if imag is not None:
        re = re - _apply(imag, sin) * sign
        im = im + _apply(imag, cos)
    if inverse:
        re, im = re / n, im / n
    out = re.unsqueeze(-1).cat(im.unsqueeze(-1), dim=-1)
    return out.transpose(axis, -2).cast(x.dtype)


def _irfft(real: Tensor, imag: Tensor | None, n: int) -> Tensor:
    """The real signal of length n whose spectrum's first half is (real, imag): the other half
    mirrors it, so each bin but DC (and Nyquist for even n) counts twice."""
    bins = n // 2 + 1
    t = np.arange(n, dtype=np.float64)[None, :]
    k = np.arange(min(bins, real.shape[-1]), dtype=np.float64)[:, None]
    weight = np.where((k == 0) | ((n % 2 == 0) & (k == n // 2)), 1.0, 2.0) / n
    angle = 2 * np.pi * ((k * t) % n) / n
    out = _apply(real, np.cos(angle) * weight)
    return out if imag is None else out - _apply(imag, np.sin(angle) * weight)


@onnx_op("DFT", since=17)
def dft_v17(node: Node, x: Tensor, length: Tensor | None = None) -> Tensor:
    """Opsets 17-19: the axis is an attribute (default 1)."""
    return dft(
        x,
        host_int(node, 1, length),
        int(node.attr("axis", 1)),
        bool(node.attr("inverse", 0)),
        bool(node.attr("onesided", 0)),
    )


@onnx_op("DFT", since=20)
def dft_v20(
    node: Node, x: Tensor, length: Tensor | None = None, axis: Tensor | None = None
) -> Tensor:
    """Opset 20: the axis is an input (default -2, the last signal axis)."""
    chosen = host_int(node, 2, axis)
    return dft(
        x,
        host_int(node, 1, length),
        -2 if chosen is None else chosen,
        bool(node.attr("inverse", 0)),
        bool(node.attr("onesided", 0)),
    )


@onnx_op("STFT", since=17)
def stft(
    node: Node,
    signal: Tensor,
    step: Tensor,
    window: Tensor | None = None,
    length: Tensor | None = None,
) -> Tensor:
    """Frames of ``frame_length`` samples every ``frame_step``, each times the window, then a
    DFT of each: (batch, frames, bins, 2)."""
    hop = host_int(node, 1, step)
    if hop is None or hop <= 0:
        raise InvalidValue(f"STFT {node.name!r}: frame_step must be a positive number, got {hop}")
    frame = host_int(node, 3, length)
    if frame is None:
        frame = window.shape[0] if window is not None else signal.shape[-2]
    frames = 1 + (signal.shape[1] - frame) // hop
    pieces = [signal[:, f * hop : f * hop + frame].unsqueeze(1) for f in range(frames)]
    framed = pieces[0] if frames == 1 else Tensor.cat(pieces, dim=1)  # (B, F, frame, 1|2)
    if window is not None:
        framed = framed * window.reshape(1, 1, frame, 1).cast(framed.dtype)
    return dft(framed, frame, 2, False, bool(node.attr("onesided", 1)))


# ---- windows and the mel matrix ------------------------------------------------------------------


def _window(node: Node, size: Tensor, terms: list[float]) -> Tensor:
    """sum_j (-1)^j a_j cos(2 pi j n / N) for the cosine-sum window with coefficients ``terms``;
    N is the size (periodic) or size - 1 (symmetric)."""
    count = host_int(node, 0, size)
    assert count is not None
    span = count if int(node.attr("periodic", 1)) else count - 1
    n = np.arange(count, dtype=np.float64)
    values = sum((-1) ** j * a * np.cos(2 * np.pi * j * n / span) for j, a in enumerate(terms))
    dtype = to_dtype(int(node.attr("output_datatype", 1)))
    return Tensor(
        np.asarray(values, dtype=dtype.np if dtype != dtypes.bfloat16 else np.float32),
        device=size.device,
    ).cast(dtype)


@onnx_op("HannWindow", since=17)
def hann_window(node: Node, size: Tensor) -> Tensor:
    return _window(node, size, [0.5, 0.5])


@onnx_op("HammingWindow", since=17)
def hamming_window(node: Node, size: Tensor) -> Tensor:
    return _window(node, size, [25 / 46, 21 / 46])


@onnx_op("BlackmanWindow", since=17)
def blackman_window(node: Node, size: Tensor) -> Tensor:
    return _window(node, size, [0.42, 0.5, 0.08])


def mel_matrix(bins: int, dft_length: int, rate: int, low: float, high: float) -> np.ndarray:
    """(dft_length // 2 + 1, bins) triangular filters evenly spaced on the mel scale, each
    peaking at 1, on the integer frequency bins ONNX's definition rounds them to."""
    mel = lambda hz: 2595 * np.log10(1 + hz / 700)  # noqa: E731
    edges = np.arange(bins + 2) * (mel(high) - mel(low)) / (bins + 2) + mel(low)
    hertz = 700 * np.expm1(edges / 2595 * np.log(10))
    points = (((dft_length + 1) * hertz) // rate).astype(int)
    out = np.zeros((dft_length // 2 + 1, bins))
    for i in range(bins):
        left, center, right = points[i : i + 3]
        if center == left:
            out[center, i] = 1
        else:
            out[left : center + 1, i] = (np.arange(left, center + 1) - left) / (center - left)
        if right > center:
            out[center:right, i] = (right - np.arange(center, right)) / (right - center)
    return out


@onnx_op("MelWeightMatrix", since=17)
def mel_weight_matrix(
    node: Node, bins: Tensor, length: Tensor, rate: Tensor, low: Tensor, high: Tensor
) -> Tensor:
    """The mel filter bank for the given bins, DFT length, sample rate and edges (host-built)."""
    counts = [host_int(node, i, v) for i, v in enumerate((bins, length, rate))]
    if any(c is None or c <= 0 for c in counts):
        raise InvalidValue(f"MelWeightMatrix {node.name!r}: sizes must be positive, got {counts}")
    n_bins, dft_length, sample_rate = (int(c or 0) for c in counts)
    edges = host_float(node, 3, low), host_float(node, 4, high)
    matrix = mel_matrix(n_bins, dft_length, sample_rate, *edges)
    dtype = to_dtype(int(node.attr("output_datatype", 1)))
    return Tensor(matrix.astype(np.float32), device=bins.device).cast(dtype)
