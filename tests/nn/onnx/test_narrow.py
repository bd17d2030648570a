"""Narrow types: the lazy float8 encoder agrees with onnx's host rules (ml_dtypes) on every
kind of value: exact codes, ties, subnormals, overflow, infinities, nan, -0.0."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
from onnx import TensorProto  # noqa: E402

from fusegrad.nn.onnx.dtypes import decode_table, encode  # noqa: E402
from fusegrad.nn.onnx.ops_quant import FLOAT8, encode_float8  # noqa: E402
from fusegrad.tensor import Tensor  # noqa: E402


def awkward_values(elem_type: int) -> np.ndarray:
    """Every code's value, the midpoints between neighbours (ties), values just off them,
    and the specials, with both signs."""
    table = decode_table(elem_type)
    finite = np.unique(table[np.isfinite(table)])
    mids = (finite[1:] + finite[:-1]) / 2
    rng = np.random.default_rng(0)
    wide = rng.standard_normal(200) * 10.0 ** rng.integers(-8, 6, 200)
    more = [finite * 1.001, mids * 1.0001, mids * 0.9999, finite[-1:] * 4, [1e30, np.inf, np.nan]]
    values = np.concatenate([finite, mids, wide, *more]).astype(np.float32)
    return np.concatenate([values, -values, np.float32([-0.0])])


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize(
    "elem_type", [*FLOAT8, TensorProto.FLOAT4E2M1], ids=lambda t: TensorProto.DataType.Name(t)
)
def test_lazy_float8_encoding_matches_the_host_rules(
    elem_type: int, saturate: bool, device: str
) -> None:
    x = awkward_values(elem_type)
    got = encode_float8(Tensor(x, device=device), elem_type, saturate).numpy()
    want = encode(x, elem_type, saturate)
    bad = np.nonzero(got != want)[0]
    assert not len(bad), [(x[i], got[i], want[i]) for i in bad[:5]]
