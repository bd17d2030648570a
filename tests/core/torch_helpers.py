"""Helpers of the few tests outside tests/core/differential that use torch: seeded inputs,
tolerances."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np
import pytest

from fusegrad import Tensor, dtypes
from fusegrad.dtype import DType

torch = pytest.importorskip("torch")

f32, f16, f64 = dtypes.float32, dtypes.float16, dtypes.float64
i8, u8, i32, i64, bool_ = dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64, dtypes.bool


def rand(
    shape: tuple[int, ...], dtype: DType = f32, low: float = -3, high: float = 3
) -> np.ndarray:
    """Random values of ``shape``, the same on every run (seeded by the arguments)."""
    rng = np.random.default_rng(zlib.crc32(repr((shape, dtype.name, low, high)).encode()))
    if dtype == bool_:
        return rng.random(shape) < 0.5
    if dtype.is_int:
        return rng.integers(max(int(low), int(dtype.min)), int(high) + 1, shape).astype(dtype.np)
    return rng.uniform(low, high, shape).astype(dtype.np)


def tol(dtype: DType) -> dict:
    if dtype == f16:
        return {"rtol": 3e-3, "atol": 3e-3}
    if dtype.is_float:
        return {"rtol": 2e-5, "atol": 2e-6}
    return {"rtol": 0, "atol": 0}


def check(out: Tensor | tuple, expected: Any, **kw) -> None:
    """``out`` (or each tensor of a tuple) has torch's shape and values."""
    if isinstance(out, tuple):
        for o, e in zip(out, expected, strict=False):
            check(o, e, **kw)
        return
    want = expected.detach().numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected)
    got = out.numpy()
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(
        got.astype(np.float64), want.astype(np.float64), **(kw or tol(out.dtype))
    )
