"""uop/alu.py: one table says what each ALU op computes, for constant folding and for the
PYTHON device; both read it, so they cannot drift apart."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.dtype import dtypes
from fusegrad.runtime import python as python_device
from fusegrad.uop import alu, ops, symbolic
from fusegrad.uop.ops import GroupOp, Ops


def test_every_alu_op_has_one_row():
    assert set(alu.ALU) == set(GroupOp.ALU)


def test_folding_and_the_python_device_read_the_same_table():
    assert symbolic.exec_alu is alu.exec_alu and ops.exec_alu is alu.exec_alu
    assert python_device.ARRAY is alu.ARRAY
    for op, row in alu.ALU.items():
        assert alu.SCALAR[op] is row.scalar and alu.ARRAY[op] is row.array


@pytest.mark.parametrize(
    "op, dtype, args, expected",
    [
        (Ops.IDIV, dtypes.int32, (-7, 2), -3),
        (Ops.MOD, dtypes.int32, (-7, 2), -1),
        (Ops.IDIV, dtypes.int32, (5, 0), 0),
        (Ops.MOD, dtypes.int32, (5, 0), 0),
        (Ops.ADD, dtypes.int8, (127, 1), -128),
        (Ops.NEG, dtypes.bool, (True,), False),
    ],
)
def test_scalars_and_arrays_agree(op, dtype, args, expected):
    assert alu.exec_alu(op, dtype, args) == expected
    arrays = [np.array(a, dtype=dtype.np) for a in args]
    with np.errstate(all="ignore"):
        assert np.asarray(alu.ARRAY[op](*arrays)).astype(dtype.np) == expected


def test_float_edges_on_scalars():
    assert alu.exec_alu(Ops.RECIP, dtypes.float32, (-0.0,)) == -math.inf
    assert math.isnan(alu.exec_alu(Ops.SQRT, dtypes.float32, (-1.0,)))
    assert alu.exec_alu(Ops.EXP2, dtypes.float32, (2000.0,)) == math.inf


@pytest.mark.parametrize("a, b", [(1.0, math.nan), (math.nan, 1.0), (math.nan, math.nan)])
def test_folded_max_keeps_a_nan_from_either_side_as_devices_do(a, b):
    assert math.isnan(alu.exec_alu(Ops.MAX, dtypes.float32, (a, b)))
    assert math.isnan(Tensor(a).maximum(Tensor(b)).item())  # folded: both are constants
