"""exp2 and log2 as float32 arithmetic (``codegen/transcendental.py``), chosen by the renderer's
``scalar_math_ops``: accuracy over dense sweeps of float32 against float64 numpy, special values,
and when the rewrite applies. The CPU backend declares the capability; the PYTHON interpreter runs
the same rewritten programs when a renderer subclass declares it, so the arithmetic is checked
apart from any C compiler too."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Device, Tensor, dtypes
from fusegrad.codegen.decompose import decompose, replaces_math
from fusegrad.codegen.kernel import KernelSource, generate
from fusegrad.renderer import Renderer
from fusegrad.runtime.python import PythonRenderer
from fusegrad.uop.ops import Ops, UOp, toposort
from tests.conftest import available

from .interpreted import run_with

F32_EDGES = [
    0.0,
    -0.0,
    np.inf,
    -np.inf,
    np.nan,
    1.0,
    2.0,
    0.5,
    127.0,
    127.99,
    128.0,
    -126.0,
    -149.0,
    -149.5,
    -150.0,
    -151.0,
    -160.0,
    1e-45,
    1e-40,
    1.1754942e-38,
    1.1754944e-38,
    3.4028235e38,
    -1e-45,
    -1.0,
    0.9999999,
    1.0000001,
    1e30,
    -1e30,
]


class MathRenderer(PythonRenderer):
    """The interpreter, declaring that its exp2 and log2 are slow scalar calls (as C's are)."""

    scalar_math_ops = frozenset({Ops.EXP2, Ops.LOG2})


def run_rewritten(t: Tensor) -> np.ndarray:
    """Realize ``t`` (on PYTHON, one kernel) with ``MathRenderer``'s programs; return its values."""
    return run_with(t, MathRenderer("PYTHON"), _no_math_calls)


def _no_math_calls(kernel: KernelSource) -> None:
    assert not {Ops.EXP2, Ops.LOG2} & {u.op for u in kernel.program}


def compute(op: str, x: np.ndarray, device: str) -> np.ndarray:
    t = getattr(Tensor(x, device=device), op)()
    return run_rewritten(t) if device == "PYTHON" else t.numpy()


def sweep(op: str) -> np.ndarray:
    """About a million float32 inputs: a dense line over exp2's whole range (-160..131), or
    random bit patterns of every positive float for log2 (subnormals included); plus edges."""
    if op == "exp2":
        dense = np.linspace(-160, 131, 1 << 20, dtype=np.float32)
    else:
        bits = np.random.default_rng(0).integers(0, 0x7F800000, 1 << 20, dtype=np.uint32)
        dense = bits.view(np.float32)
    return np.concatenate([dense, np.array(F32_EDGES, np.float32)])


def ulp_error(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """|got - want| in units of float32's last place at ``want`` (a float64), where both are
    finite."""
    exponent = np.frexp(np.abs(want))[1] - 1  # want in [2**exponent, 2**(exponent+1))
    ulp = np.ldexp(1.0, np.maximum(exponent - 23, -149))
    return np.abs(got.astype(np.float64) - want) / ulp


CAPABLE = ["PYTHON"] + [name for name in ("CPU",) if available(name)]


@pytest.mark.parametrize("device", CAPABLE)
@pytest.mark.parametrize("op", ["exp2", "log2"])
def test_float32_within_1_5_ulp_and_special_values_exact(op, device):
    x = sweep(op)
    got = compute(op, x, device)
    with np.errstate(all="ignore"):
        want = getattr(np, op)(x.astype(np.float64))
        rounded = want.astype(np.float32)  # inf past float32's range, 0 below its subnormals
    finite = np.isfinite(rounded) & (rounded != 0)
    assert ulp_error(got[finite], want[finite]).max() <= 1.5
    np.testing.assert_array_equal(got[~finite], rounded[~finite])  # inf, -inf, 0, NaN (libm's)


@pytest.mark.parametrize("device", CAPABLE)
@pytest.mark.parametrize("op", ["exp2", "log2"])
def test_float16_is_computed_in_float32_and_rounded(op, device):
    x = np.array(
        [
            -30,
            -24.5,
            -14,
            -1.5,
            0,
            0.3,
            1,
            10,
            15.9,
            16,
            np.inf,
            -np.inf,
            np.nan,
            6e-8,
            1e-5,
            0.5,
            2,
            100,
            65504,
        ],
        np.float16,
    )
    x = np.abs(x) if op == "log2" else x
    with np.errstate(all="ignore"):
        want = getattr(np, op)(x.astype(np.float64)).astype(np.float16)
    np.testing.assert_allclose(compute(op, x, device), want, rtol=1e-3, atol=0)


@pytest.mark.skipif(not available("CPU"), reason="no C compiler here")
@pytest.mark.parametrize("op", ["exp2", "log2"])
def test_cpu_kernels_call_libm_for_float64_only(op):
    def source(dtype):
        (step,) = getattr(Tensor.rand(64, device="CPU").cast(dtype), op)().schedule()
        return generate(step.ast, Device["CPU"].renderer).source

    assert f"{op}f(" not in source(dtypes.float32)
    assert f"{op}(" in source(dtypes.float64)
    x = np.linspace(0.001, 100, 1001)
    got = getattr(Tensor(x, device="CPU"), op)().numpy()
    np.testing.assert_allclose(got, getattr(np, op)(x), rtol=4e-16, atol=0)  # libm's precision


def _ops(graph: UOp) -> set[tuple[Ops, str]]:
    return {(u.op, u.dtype.name) for u in toposort([graph])}


@pytest.mark.parametrize("declared", [frozenset(), frozenset({Ops.EXP2})])
def test_rewrite_applies_to_declared_ops_on_floats_up_to_32_bits(declared):
    def math(op: Ops, dtype) -> UOp:
        return UOp(op, dtype, (UOp(Ops.CONST, dtype, (), 1.5) * 1.0,))

    graph = UOp(
        Ops.SINK,
        dtypes.void,
        tuple(
            math(op, dtype)
            for op in (Ops.EXP2, Ops.LOG2)
            for dtype in (dtypes.float32, dtypes.float64)
        ),
    )
    renderer = type("Declaring", (Renderer,), {"scalar_math_ops": declared})()
    left = _ops(decompose(graph, renderer))
    assert ((Ops.EXP2, "float32") in left) == (Ops.EXP2 not in declared)
    assert {(Ops.EXP2, "float64"), (Ops.LOG2, "float32"), (Ops.LOG2, "float64")} <= left
    assert replaces_math(renderer, Ops.EXP2, dtypes.float32) == (Ops.EXP2 in declared)
    assert not replaces_math(renderer, Ops.EXP2, dtypes.float64)
