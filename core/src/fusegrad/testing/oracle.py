"""What every conformance test does: make the same inputs on the device under test and on the
PYTHON device, build the same graph on both, and compare the results.

Inputs are made from numpy arrays in the test's dtype, so both devices start from the same bits;
bfloat16, which numpy lacks, is made from float32 on the device, as ``Tensor`` always does.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from fusegrad import caches
from fusegrad.codegen.kernel import generate
from fusegrad.device import Device
from fusegrad.dtype import DType, dtypes
from fusegrad.errors import UnsupportedOp
from fusegrad.tensor import Tensor
from fusegrad.uop.ops import Ops

ORACLE = "PYTHON"
#: Every dtype, narrowest first: the suite is parametrised over all, and skips what the
#: renderer does not declare.
ALL_DTYPES: tuple[DType, ...] = tuple(sorted(dtypes.all(), key=lambda d: d.priority))


@functools.cache
def held_dtypes(device: str) -> frozenset[DType]:
    """The dtypes ``device`` can hold: those its renderer declares (``supported_dtypes``) and
    those core emulates from its other capabilities (bfloat16, narrow integers).

    Found by generating, not running, one kernel per dtype: only core's capability-driven
    decisions are consulted, the device is never asked.
    """
    runtime, held = Device[device], set()
    for dtype in ALL_DTYPES:
        x = Tensor.empty(4, dtype=dtype, device=device)
        try:
            for step in x.flip(0).contiguous().schedule():
                generate(step.ast, runtime.renderer, runtime.rules)
        except UnsupportedOp:
            continue
        held.add(dtype)
    return frozenset(held)


caches.register("held dtypes", held_dtypes.cache_clear)


def require_dtypes(device: str, *wanted: DType) -> None:
    """Skip the test unless ``device`` holds every dtype in ``wanted``, naming the first missing."""
    missing = [d for d in wanted if d not in held_dtypes(device)]
    if missing:
        pytest.skip(
            f"the device cannot hold {missing[0].name} (not in its renderer's "
            "supported_dtypes, and core does not emulate it there)"
        )


def rng_for(*key: Any) -> np.random.Generator:
    """A generator seeded by ``key``: the same inputs on every run, different for each case."""
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def random_array(
    dtype: DType, shape: tuple[int, ...], low: float, high: float, key: Any = ()
) -> np.ndarray:
    """Values in ``[low, high]`` (clipped to what ``dtype`` holds), as a float64 or int64 array.

    The array is converted to ``dtype`` when the tensor is made, on both devices alike.
    """
    rng = rng_for(dtype.name, shape, low, high, key)
    if dtype == dtypes.bool:
        return rng.random(shape) < 0.5
    if dtype.is_int:
        lo, hi = max(int(low), int(dtype.min)), min(int(high), int(dtype.max))
        return rng.integers(lo, hi + 1, shape, dtype=np.int64)
    return rng.uniform(low, high, shape)


def make(array: np.ndarray, dtype: DType, device: str) -> Tensor:
    """A realized tensor of ``dtype`` on ``device`` holding ``array``'s values."""
    if dtype == dtypes.bfloat16:
        return Tensor(array.astype(np.float32), device=device).cast(dtype).realize()
    return Tensor(np.asarray(array).astype(dtype.np), device=device)


def tolerance(dtype: DType) -> dict[str, float]:
    """How close a float result must be to the oracle's: a few units in the last place."""
    if dtype == dtypes.bfloat16:
        return {"rtol": 1.6e-2, "atol": 1.6e-2}
    if dtype == dtypes.float16:
        return {"rtol": 2e-3, "atol": 2e-3}
    if dtype == dtypes.float32:
        return {"rtol": 2e-6, "atol": 2e-6}
    return {"rtol": 1e-12, "atol": 1e-12}


def assert_same(got: Tensor, expected: Tensor) -> None:
    """``got`` (device under test) equals ``expected`` (oracle): in shape, dtype and values."""
    assert got.shape == expected.shape, f"shape {got.shape}, the oracle's is {expected.shape}"
    assert got.dtype == expected.dtype, f"dtype {got.dtype}, the oracle's is {expected.dtype}"
    a, b = got.numpy(), expected.numpy()
    if got.dtype.is_float:
        tol = tolerance(got.dtype)
        np.testing.assert_allclose(a, b, rtol=tol["rtol"], atol=tol["atol"], equal_nan=True)
    else:
        np.testing.assert_array_equal(a, b)


def against_oracle(
    device: str,
    build: Callable[..., Tensor],
    arrays: Sequence[np.ndarray],
    in_dtypes: Sequence[DType],
) -> tuple[Tensor, Tensor]:
    """Build ``build(*inputs)`` on ``device`` and on the oracle, realize both, check they agree.

    Returns both results, realized, for further checks.
    """
    got = build(*(make(a, d, device) for a, d in zip(arrays, in_dtypes, strict=True))).realize()
    expected = build(
        *(make(a, d, ORACLE) for a, d in zip(arrays, in_dtypes, strict=True))
    ).realize()
    assert_same(got, expected)
    return got, expected


def program_ops(tensor: Tensor) -> set[Ops]:
    """The contract ops in the kernels that would compute ``tensor`` (not yet realized)."""
    rt = Device[tensor.device]
    kernels = [generate(step.ast, rt.renderer, rt.rules) for step in tensor.schedule()]
    return {u.op for kernel in kernels for u in kernel.program}
