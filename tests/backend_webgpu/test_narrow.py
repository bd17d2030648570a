"""8/16-bit integers and bools on WEBGPU: packed 32-bit words, atomics, 32-bit arithmetic."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor, dtypes
from fusegrad.device import Buffer
from fusegrad.engine.realize import get_runner

NARROW = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16]


def values(dtype, n: int = 37) -> np.ndarray:
    """``n`` values over the whole range of ``dtype``: its extremes, -1 and 0 first."""
    x = np.random.default_rng(n).integers(int(dtype.min), int(dtype.max) + 1, n)
    x[:4] = [dtype.min, dtype.max, -1 if dtype.kind == "i" else 1, 0]
    return x.astype(dtype.np)


OPS = {  # each wraps like numpy's fixed-width integers
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "neg": lambda a, b: -a,
    "max": lambda a, b: a.maximum(b),
    "min": lambda a, b: a.minimum(b),
    "lt": lambda a, b: a < b,
    "ne": lambda a, b: a != b,
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
    "square": lambda a, b: a * a * a,
}


@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("dtype", NARROW, ids=lambda d: d.name)
def test_narrow_arithmetic_with_negatives_and_overflow(name, dtype):
    a, b = values(dtype), values(dtype)[::-1].copy()
    with np.errstate(over="ignore"):
        expected = (
            OPS[name](a, b) if name not in ("max", "min") else getattr(np, f"{name}imum")(a, b)
        )
    got = OPS[name](Tensor(a, device="WEBGPU"), Tensor(b, device="WEBGPU"))
    assert got.dtype.np == expected.dtype
    np.testing.assert_array_equal(got.numpy(), expected)


@pytest.mark.parametrize("dtype", NARROW, ids=lambda d: d.name)
def test_narrow_overflow_of_constants(dtype):
    x = Tensor(values(dtype), device="WEBGPU")
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal((x + 1).numpy(), values(dtype) + dtype.np.type(1))
        np.testing.assert_array_equal((x * 3).numpy(), values(dtype) * dtype.np.type(3))


@pytest.mark.parametrize(
    "src, dst",
    [
        (dtypes.int8, dtypes.uint8),
        (dtypes.uint8, dtypes.int8),
        (dtypes.int16, dtypes.int8),
        (dtypes.uint16, dtypes.int16),
        (dtypes.int32, dtypes.int8),
        (dtypes.int8, dtypes.int32),
        (dtypes.uint8, dtypes.float32),
        (dtypes.int16, dtypes.bool),
    ],
)
def test_narrow_casts(src, dst):
    x = values(src) if src != dtypes.int32 else np.array([-129, 128, 70000, -1, 255], np.int32)
    np.testing.assert_array_equal(Tensor(x, device="WEBGPU").cast(dst).numpy(), x.astype(dst.np))


def test_narrow_reductions():
    x = values(dtypes.int8, 100)
    t = Tensor(x, device="WEBGPU")
    assert t.max().item() == x.max() and t.min().item() == x.min()
    assert t.sum().item() == x.astype(np.int64).sum()
    with np.errstate(over="ignore"):  # the products wrap in int16, their sum is wider
        products = x.reshape(10, 10).astype(np.int16) * np.int16(300)
    np.testing.assert_array_equal(
        (t.reshape(10, 10).cast(dtypes.int16) * 300).sum(1).numpy(),
        products.astype(np.int64).sum(1),
    )


@pytest.mark.parametrize("n", [4, 7, 256, 4099])
def test_uint8_store_where_every_thread_of_a_word_writes(n):
    """Four neighbouring threads write the four bytes of each word at once, into a buffer full of
    0xFF: each clears its own byte and sets it, and no thread's byte is lost or left at 0xFF."""
    x = (np.arange(n) * 37 % 251).astype(np.uint8)
    src = Tensor(x, device="WEBGPU")
    (step,) = (src + 1).schedule()
    out = Buffer("WEBGPU", n, dtypes.uint8).copyin(np.full(n, 0xFF, np.uint8))
    get_runner(step.ast, "WEBGPU")([out.handle, src._buffer().handle], wait=True)
    np.testing.assert_array_equal(out.numpy(), x + 1)


def test_bool_storage():
    a, b = values(dtypes.int16, 41), values(dtypes.int16, 43)[:41]
    lt = Tensor(a, device="WEBGPU") < Tensor(b, device="WEBGPU")
    np.testing.assert_array_equal(lt.numpy(), a < b)
    np.testing.assert_array_equal((lt & Tensor(a > 0, device="WEBGPU")).numpy(), (a < b) & (a > 0))
    np.testing.assert_array_equal(lt.where(1.5, -2.0).numpy(), np.where(a < b, 1.5, -2.0))


def test_narrow_padding_and_views():
    x = values(dtypes.uint8, 24).reshape(4, 6)
    t = Tensor(x, device="WEBGPU")
    np.testing.assert_array_equal(t.T.pad(((1, 1), (0, 2))).numpy(), np.pad(x.T, ((1, 1), (0, 2))))
    np.testing.assert_array_equal(t[1:3, ::-2].contiguous().numpy(), x[1:3, ::-2])


def test_bfloat16_is_packed_too():
    x = np.array([1.5, -2.25, 3.0, 1000.0, -0.0078125], np.float32)
    t = Tensor(x, device="WEBGPU").cast(dtypes.bfloat16) * 2
    np.testing.assert_array_equal(t.float().numpy(), x * 2)
