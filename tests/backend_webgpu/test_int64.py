"""Integers widened to int64 and then compared: llvmpipe miscompiled ``i64(x) < 5`` (false for
x = 1) and sign-extended a uint32, so the WGSL renderer builds the int64 from the bits there."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Device, Tensor, dtypes

VALUES = {
    "int32": [1, 0, 4, 7, -3, -(2**31), 2**31 - 1],
    "int8": [1, 0, 4, -3, -128, 127],
    "int16": [1, -1, 300, -32768],
    "uint8": [1, 0, 200, 255],
    "uint32": [1, 0, 4, 3_000_000_000],
}


@pytest.mark.parametrize("dtype", list(VALUES))
def test_a_value_widened_to_int64_compares_right(dtype):
    if dtypes.int64 not in Device["WEBGPU"].renderer.supported_dtypes:
        pytest.skip("this adapter has no shader-int64")
    x = np.array(VALUES[dtype], dtype=dtype)

    def wide() -> Tensor:  # the cast fused into the comparison's kernel (not read back first)
        return Tensor(x, device="WEBGPU").cast(dtypes.int64)

    assert wide().tolist() == x.astype(np.int64).tolist()
    for bound in (-5, 0, 5, 2**31):
        assert (wide() < bound).tolist() == (x.astype(np.int64) < bound).tolist(), bound
        assert (wide() >= bound).tolist() == (x.astype(np.int64) >= bound).tolist(), bound
