"""float16 on the CPU: stored as 16 bits, computed in float32, converted with integer ops that
gcc vectorises (codegen/decompose.py ``FLOAT16``). Every conversion must equal the hardware's
(numpy's), and every op round as one float16 op would."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Device, Tensor, dtypes
from fusegrad.codegen.kernel import generate
from fusegrad.codegen.opt import heuristic_opts

from .test_renderer import _gcc_vector_report

ALL_HALVES = np.arange(1 << 16, dtype=np.uint16)


def _same_bits(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Elementwise: the same bits, or both NaN."""
    bits = got.view(f"u{got.itemsize}") == want.view(f"u{want.itemsize}")
    return bits | (np.isnan(got) & np.isnan(want))


def test_every_half_converts_to_its_float32_exactly():
    """All 65,536 bit patterns: normals, subnormals, zeros, infinities, NaNs with payloads."""
    got = Tensor(ALL_HALVES).bitcast(dtypes.float16).cast(dtypes.float32).numpy()
    want = ALL_HALVES.view(np.float16).astype(np.float32)
    assert (got.view(np.uint32) == want.view(np.uint32)).all()


def _float32_cases() -> np.ndarray:
    rng = np.random.default_rng(0)
    spread = rng.standard_normal(50_000) * 10.0 ** rng.integers(-10, 7, 50_000)
    halves = ALL_HALVES.view(np.float16)
    finite = np.sort(halves[np.isfinite(halves)].astype(np.float64))
    ties = (finite[:-1] + finite[1:]) / 2  # halfway: ties to even
    edges = [65504, 65519.996, 65520, 65536, 1e30, 2**-14, 2**-24, 2**-25, 3 * 2**-26, 2**-26]
    return np.concatenate(
        [spread, finite, ties, np.nextafter(ties, 0), np.nextafter(ties, np.inf), edges]
    ).astype(np.float32)


def test_float32_to_half_rounds_as_the_hardware_does():
    """Ties to even, subnormal halves, the overflow boundary (65520 and up: infinity)."""
    values = np.concatenate([_float32_cases(), -_float32_cases()])
    values = np.concatenate([values, np.array([np.inf, -np.inf, np.nan], np.float32)])
    got = Tensor(values).cast(dtypes.float16).numpy()
    with np.errstate(over="ignore"):
        want = values.astype(np.float16)
    assert got.dtype == np.float16
    wrong = ~_same_bits(got, want)
    assert not wrong.any(), (values[wrong][:5], got[wrong][:5], want[wrong][:5])


@pytest.mark.parametrize(
    "name, fn",
    [
        ("add", lambda a, b: a + b),
        ("mul", lambda a, b: a * b),
        ("div", lambda a, b: a / b),
        ("chain", lambda a, b: (a * b + a) * 0.5 - b),
        ("maximum", lambda a, b: (a - b).maximum(a * b) if isinstance(a, Tensor) else None),
    ],
)
def test_each_float16_op_rounds_once_as_numpy(name, fn):
    """A fused chain rounds after each op, as separate float16 ops (numpy, torch eager) do; a
    division rounds once (its reciprocal is not rounded first)."""
    rng = np.random.default_rng(1)
    a, b = (
        np.concatenate(
            [rng.standard_normal(4000) * 100, [65504, -65504, 1e-7, 0.0, np.inf]]
        ).astype(np.float16)
        for _ in range(2)
    )
    got = fn(Tensor(a), Tensor(b)).numpy()
    with np.errstate(all="ignore"):
        want = fn(a, b) if name != "maximum" else np.maximum(a - b, a * b)
    assert got.dtype == np.float16
    assert _same_bits(got, want).all()


def test_float16_matmul_sums_exact_products_in_float32():
    """Products of halves are exact in float32; the sum runs there and rounds once, as torch's
    float16 matmul does."""
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((48, 300)).astype(np.float16), rng.standard_normal((300, 40))
    b = b.astype(np.float16)
    got = (Tensor(a) @ Tensor(b)).numpy()
    exact = a.astype(np.float64) @ b.astype(np.float64)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, exact.astype(np.float16), rtol=2e-3, atol=1e-3)


def test_float16_sum_and_mean_add_up_in_float32():
    x = np.random.default_rng(3).standard_normal(100_000).astype(np.float16)
    total = Tensor(x).sum().numpy()
    assert abs(float(total) - float(x.astype(np.float64).sum())) <= 0.5  # (a half's step here)
    mean = Tensor(x).mean().numpy()
    np.testing.assert_allclose(float(mean), x.astype(np.float64).mean(), atol=1e-3)


def test_float16_kernels_hold_no_float16_and_gcc_vectorises_them(tmp_path):
    """The source has no ``_Float16`` (gcc 12 left every loop converting one scalar: a float16
    ``x * 2 + 1`` ran 7x slower than float32); loads and stores are ``unsigned short``."""
    rt = Device["CPU"]
    x = Tensor(np.ones(1 << 16, np.float16)).realize()
    (step,) = (x * 2 + 1).schedule()
    source = generate(step.ast, rt.renderer, rt.rules, heuristic_opts(step.ast, rt.renderer)).source
    assert "_Float16" not in source and "unsigned short" in source
    report = _gcc_vector_report(source, tmp_path)
    assert report is None or "loop vectorized" in report, report
    assert (Tensor(x.numpy()) * 2 + 1).numpy().tolist()[:2] == [3.0, 3.0]


def test_bfloat16_sum_rounds_to_nearest_once():
    """The emulated bfloat16 sum adds in float32 and rounds the total to nearest (it was cut
    to its top 16 bits)."""
    x = np.full(3, 1 + 2**-7, np.float32)  # a bfloat16 value; the sum 3 + 3 * 2**-7 is not
    got = Tensor(x).cast(dtypes.bfloat16).sum().cast(dtypes.float32).numpy()
    total = np.float32(x.astype(np.float64).sum())
    bits = total.view(np.uint32)
    nearest = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).view(np.float32)
    assert got == nearest


def test_a_half_read_outside_the_innermost_loop_converts_natively(tmp_path):
    """A float16 scale per row, read outside the vector loop over the row, converts with the
    target's one instruction (its integer form would cost a dozen scalar ops per row: SmolLM2's
    float16 block scales slowed its decode 65 -> 48 tok/s so); the row loop still vectorises."""
    rt = Device["CPU"]
    rng = np.random.default_rng(4)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    scale = rng.standard_normal((64, 1)).astype(np.float16)
    out = Tensor(x) * Tensor(scale).cast(dtypes.float32)
    (step,) = out.schedule()
    source = generate(step.ast, rt.renderer, rt.rules, heuristic_opts(step.ast, rt.renderer)).source
    assert "union { unsigned short a; _Float16 b; }" in source
    report = _gcc_vector_report(source, tmp_path)
    assert report is None or "loop vectorized" in report, report
    np.testing.assert_array_equal(out.numpy(), x * scale.astype(np.float32))
