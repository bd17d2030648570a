"""Every ALU op of the backend contract, on every dtype it applies to; every CAST and BITCAST.

Each case applies one contract op directly (``Tensor._alu``), so the kernel holds exactly that
op, and checks both that the op reached the device's program (unless the renderer declares it
lacks the op, and core decomposes it) and that the values equal the PYTHON device's. Inputs stay
where C leaves nothing undefined: no division by zero, no signed overflow, shifts narrower than
the type.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from fusegrad.codegen.decompose import replaces_math
from fusegrad.dtype import DType, dtypes
from fusegrad.testing.oracle import (
    ALL_DTYPES,
    against_oracle,
    make,
    program_ops,
    random_array,
    require_dtypes,
)
from fusegrad.uop.ops import Ops

SHAPE = (3, 67)  # odd sizes on purpose: no lane count divides them

Applies = Callable[[DType], bool]


def number(d: DType) -> bool:
    return d != dtypes.bool


def signed(d: DType) -> bool:
    return d == dtypes.bool or d.is_float or (d.is_int and not d.is_unsigned)


def integer(d: DType) -> bool:
    return d.is_int


def bits(d: DType) -> bool:
    return d.is_int or d == dtypes.bool


def anything(d: DType) -> bool:
    return True


def shift_amount(d: DType) -> tuple[float, float]:
    return (0, 8 * d.itemsize - 4)


#: op -> (the dtypes it applies to, the range of each input, given the dtype)
ALU: dict[Ops, tuple[Applies, Callable[[DType], list[tuple[float, float]]]]] = {
    Ops.ADD: (number, lambda d: [(-50, 50)] * 2),
    Ops.MUL: (number, lambda d: [(-10, 10)] * 2),
    Ops.IDIV: (integer, lambda d: [(-100, 100), (1, 9)]),
    Ops.MOD: (integer, lambda d: [(-100, 100), (1, 9)]),
    Ops.MAX: (anything, lambda d: [(-50, 50)] * 2),
    Ops.NEG: (signed, lambda d: [(-50, 50)]),
    Ops.RECIP: (lambda d: d.is_float, lambda d: [(0.5, 8)]),
    Ops.SQRT: (lambda d: d.is_float, lambda d: [(0, 50)]),
    Ops.EXP2: (lambda d: d.is_float, lambda d: [(-6, 6)]),
    Ops.LOG2: (lambda d: d.is_float, lambda d: [(0.1, 50)]),
    Ops.SIN: (lambda d: d.is_float, lambda d: [(-4, 4)]),
    Ops.CMPLT: (anything, lambda d: [(-3, 3)] * 2),
    Ops.CMPNE: (anything, lambda d: [(-3, 3)] * 2),
    Ops.AND: (bits, lambda d: [(-100, 100)] * 2),
    Ops.OR: (bits, lambda d: [(-100, 100)] * 2),
    Ops.XOR: (bits, lambda d: [(-100, 100)] * 2),
    Ops.SHL: (integer, lambda d: [(0, 7), shift_amount(d)]),
    Ops.SHR: (integer, lambda d: [(-100, 100), shift_amount(d)]),
}
CASES = [(op, d) for op, (applies, _) in ALU.items() for d in ALL_DTYPES if applies(d)]


def inputs_for(op: Ops, dtype: DType) -> list[np.ndarray]:
    """Random inputs in the op's safe range; comparisons get repeated values to find equal."""
    ranges = ALU[op][1](dtype)
    arrays = [
        random_array(dtype, SHAPE, lo, hi, key=(op.name, i)) for i, (lo, hi) in enumerate(ranges)
    ]
    if op in (Ops.CMPLT, Ops.CMPNE) and dtype.is_float:
        arrays = [np.round(a * 2) / 2 for a in arrays]  # a few values, so some are equal
    return arrays


@pytest.mark.parametrize("op, dtype", CASES, ids=[f"{op.name}-{d.name}" for op, d in CASES])
def test_alu(conformance_device, conformance_renderer, op: Ops, dtype: DType):
    renderer = conformance_renderer
    require_dtypes(
        conformance_device, dtype, *([dtypes.bool] if op in (Ops.CMPLT, Ops.CMPNE) else [])
    )
    arrays = inputs_for(op, dtype)
    build = lambda x, *rest: x._alu(op, *rest)
    if op in renderer.native_ops and not replaces_math(renderer, op, dtype):
        operands = [make(a, dtype, conformance_device) for a in arrays]
        assert op in program_ops(build(*operands)), f"{op.name} did not reach the program"
    against_oracle(conformance_device, build, arrays, [dtype] * len(arrays))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=[d.name for d in ALL_DTYPES])
def test_where(conformance_device, dtype: DType):
    require_dtypes(conformance_device, dtype, dtypes.bool)
    arrays = [random_array(dtypes.bool, SHAPE, 0, 1, key="cond")]
    arrays += [random_array(dtype, SHAPE, -50, 50, key=i) for i in range(2)]
    build = lambda c, x, y: c._alu(Ops.WHERE, x, y)
    operands = [
        make(a, d, conformance_device)
        for a, d in zip(arrays, [dtypes.bool, dtype, dtype], strict=True)
    ]
    assert Ops.WHERE in program_ops(build(*operands))
    against_oracle(conformance_device, build, arrays, [dtypes.bool, dtype, dtype])


def cast_input(source: DType, target: DType) -> np.ndarray:
    """Values both dtypes hold, with C-defined conversions: fractions only from floats, negative
    numbers only between signed types, every value within both ranges."""
    both_signed = signed(source) and signed(target) and source != dtypes.bool
    low = -100 if both_signed else 0
    x = random_array(source, (5, 41), low, 100, key=target.name)
    if source.is_float and target == dtypes.bool:
        x = np.where(np.abs(x) < 20, 0.0, x)  # zeros too: they cast to False
    return x


CAST_CASES = [(s, t) for s in ALL_DTYPES for t in ALL_DTYPES if s != t]


@pytest.mark.parametrize(
    "source, target", CAST_CASES, ids=[f"{s.name}-to-{t.name}" for s, t in CAST_CASES]
)
def test_cast(conformance_device, source: DType, target: DType):
    require_dtypes(conformance_device, source, target)
    against_oracle(
        conformance_device, lambda x: x.cast(target), [cast_input(source, target)], [source]
    )


BITCAST_CASES = [
    (s, t)
    for s in ALL_DTYPES
    for t in ALL_DTYPES
    if s != t and s.itemsize == t.itemsize and dtypes.bool not in (s, t)
]


def bitcast_input(source: DType, target: DType) -> np.ndarray:
    """Values whose bits are ordinary numbers in both dtypes (no NaN payloads to compare)."""
    floats = [d for d in (source, target) if d.is_float]
    if not floats or source.is_float:
        return random_array(source, (4, 33), -100, 100, key=target.name)
    pattern = random_array(floats[0], (4, 33), -100, 100, key=source.name)
    if floats[0] == dtypes.bfloat16:  # the top half of a float32
        top = (pattern.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
        return top.view(source.np).astype(np.int64)
    return pattern.astype(floats[0].np).view(source.np).astype(np.int64)


@pytest.mark.parametrize(
    "source, target", BITCAST_CASES, ids=[f"{s.name}-as-{t.name}" for s, t in BITCAST_CASES]
)
def test_bitcast(conformance_device, source: DType, target: DType):
    require_dtypes(conformance_device, source, target)
    x = bitcast_input(source, target)
    against_oracle(conformance_device, lambda t: t.bitcast(target), [x], [source])
