"""Narrow types: the lazy encoders (float8, int4..., float8e8m0) agree with onnx's host rules
(ml_dtypes) on every kind of value (exact codes, ties, subnormals, overflow, infinities, nan,
-0.0) and run in kernels, under TinyJit; sub-byte values stay packed on the device."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

pytest.importorskip("onnx")
import ml_dtypes  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from fusegrad.dtype import dtypes  # noqa: E402
from fusegrad.jit import TinyJit  # noqa: E402
from fusegrad.nn.onnx import OnnxRunner  # noqa: E402
from fusegrad.nn.onnx.dtypes import (  # noqa: E402
    SUB_BYTE,
    Packed,
    decode_table,
    encode,
    narrow_numpy,
    pack_codes,
    to_codes,
)
from fusegrad.nn.onnx.ops_quant import FLOAT8, encode_e8m0, encode_float8, encode_int  # noqa: E402
from fusegrad.tensor import Tensor  # noqa: E402
from fusegrad.tensor.tensor import buffer_of  # noqa: E402

INT4 = TensorProto.INT4


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


# ---- encodes to the integer types and float8e8m0 (on the device) ---------------------------------

INT_TYPES = [t for t in SUB_BYTE if t != TensorProto.FLOAT4E2M1]


def int_awkward_values() -> np.ndarray:
    """Halves and values off them, both signs, values wrapping past the range, beyond int32,
    and the specials."""
    rng = np.random.default_rng(1)
    wide = rng.standard_normal(300) * 10.0 ** rng.integers(-3, 12, 300)
    halves = np.arange(-40, 40) / 2
    edges = [2.0**31 - 128, 2.0**31, -(2.0**31), 1e30, np.inf, -np.inf, np.nan, -0.0]
    return np.concatenate([wide, halves, halves + 1e-3, edges]).astype(np.float32)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("elem_type", INT_TYPES, ids=lambda t: TensorProto.DataType.Name(t))
def test_integer_encoding_matches_onnx_casts(elem_type: int, device: str) -> None:
    x = int_awkward_values()
    got = encode_int(Tensor(x, device=device), elem_type).numpy()
    assert_codes(got, cast_to(x, elem_type, True), x)
    ints = np.random.default_rng(2).integers(-(2**40), 2**40, 50)
    got = encode_int(Tensor(ints, device=device), elem_type).numpy()
    assert_codes(got, cast_to(ints, elem_type, True), ints)


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
@pytest.mark.parametrize("saturate", [True, False])
@pytest.mark.parametrize("round_mode", ["up", "nearest", "down"])
def test_e8m0_encoding_matches_onnx_casts(round_mode: str, saturate: bool, device: str) -> None:
    powers = (2.0 ** np.arange(-140, 128)).astype(np.float32)
    x = np.concatenate([int_awkward_values(), powers, powers * 1.5, powers * 1.25, [3.4e38]])
    x = x.astype(np.float32)
    got = encode_e8m0(Tensor(x, device=device), saturate, round_mode).numpy()
    assert_codes(got, cast_to(x, TensorProto.FLOAT8E8M0, saturate, round_mode), x)


def cast_to(x: np.ndarray, to: int, saturate: bool, round_mode: str = "up") -> np.ndarray:
    """onnx's reference Cast (host, ml_dtypes), as codes."""
    from onnx.reference.ops.op_cast import cast_to as reference

    with np.errstate(all="ignore"):
        return to_codes(reference(x, to, saturate, round_mode))


def assert_codes(got: np.ndarray, want: np.ndarray, x: np.ndarray) -> None:
    bad = np.nonzero(got != want)[0]
    assert not len(bad), [(x[i], got[i], want[i]) for i in bad[:5]]


# ---- sub-byte types stay packed ------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 6, 7, 33])
@pytest.mark.parametrize("elem_type", list(SUB_BYTE), ids=lambda t: TensorProto.DataType.Name(t))
def test_packing_is_onnx_file_packing(elem_type: int, n: int) -> None:
    """Host and Tensor packing both give the bytes an ONNX file holds; codes() undoes them."""
    bits = SUB_BYTE[elem_type]
    codes = np.random.default_rng(n).integers(0, 1 << bits, (n,)).astype(np.uint8)
    raw = numpy_helper.from_array(codes.view(narrow_numpy(elem_type))).raw_data
    assert pack_codes(codes, bits).tobytes() == raw
    assert Packed.pack(Tensor(codes), elem_type).data.numpy().tobytes() == raw
    packed = Packed.from_numpy(codes, elem_type)
    np.testing.assert_array_equal(packed.codes().numpy(), codes)
    np.testing.assert_array_equal(packed.numpy().view(np.uint8), codes)


def model(nodes: list, inputs: list, outputs: list, inits: list = (), opset: int = 21) -> Any:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_int4_initializer_is_never_widened() -> None:
    """The weight's device buffer holds ceil(n/2) bytes, and unpacking it fuses into the one
    kernel of its consumer."""
    w = np.arange(-8, 7, dtype=np.int8).astype(ml_dtypes.int4)  # 15 values
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.float32(0.5), "s")]
    node = helper.make_node("DequantizeLinear", ["w", "s"], ["y"])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [15])
    runner = OnnxRunner(model([node], [], [out], inits), lazy=True)
    y = runner({})["y"]
    stored = runner._weights["w"]
    assert isinstance(stored, Packed) and stored.shape == (15,)
    assert buffer_of(stored.data.uop).nbytes == 8
    assert len(y.schedule()) == 1
    np.testing.assert_array_equal(y.numpy(), w.astype(np.float32) * 0.5)


def test_int4_constant_folds_to_its_values() -> None:
    """A Constant's host value is codes: host folding must not cast those as numbers."""
    a = np.array([-8, 7, -1, 3, 0], ml_dtypes.int4)
    nodes = [
        helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(a)),
        helper.make_node("Cast", ["c"], ["y"], to=TensorProto.INT64),
    ]
    out = helper.make_tensor_value_info("y", TensorProto.INT64, [5])
    assert OnnxRunner(model(nodes, [], [out]))({})["y"].tolist() == [-8, 7, -1, 3, 0]


@pytest.mark.parametrize("given", ["ml_dtypes", "codes", "packed"])
def test_packed_input_to_packed_output(given: str) -> None:
    """An int4 input goes through Transpose to an output that is packed on the device."""
    x = np.random.default_rng(0).integers(-8, 8, (3, 5)).astype(ml_dtypes.int4)
    value = {"ml_dtypes": x, "codes": to_codes(x), "packed": Packed.from_numpy(x, INT4)}[given]
    node = helper.make_node("Transpose", ["x"], ["y"])
    graph = model(
        [node],
        [helper.make_tensor_value_info("x", INT4, [3, 5])],
        [helper.make_tensor_value_info("y", INT4, [5, 3])],
    )
    y = OnnxRunner(graph, packed_outputs=True, lazy=True)({"x": value})["y"]
    assert isinstance(y, Packed) and y.shape == (5, 3)
    assert len(y.data.schedule()) == 1  # unpack, transpose and pack in one kernel
    y.realize()
    assert buffer_of(y.data.uop).nbytes == 8
    np.testing.assert_array_equal(y.numpy(), x.T)
    codes = OnnxRunner(graph)({"x": value})["y"]  # the default: uint8 codes
    assert codes.dtype == dtypes.uint8 and codes.shape == (5, 3)
    np.testing.assert_array_equal(codes.numpy(), to_codes(x.T))


@pytest.mark.parametrize(
    "to, packed",
    [(INT4, False), (INT4, True), (TensorProto.UINT4, True), (TensorProto.FLOAT8E8M0, False)],
)
def test_casts_encode_in_kernels_under_tinyjit(
    to: int, packed: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cast to int4/uint4/float8e8m0 of a device tensor: no host read-back while the graph is
    built (Tensor.numpy is forbidden there), and TinyJit's replays give the right codes (packed
    on the device with ``packed_outputs``)."""
    node = helper.make_node("Cast", ["x"], ["y"], to=to)
    graph = model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [9])],
        [helper.make_tensor_value_info("y", to, [9])],
    )
    runner = OnnxRunner(graph, packed_outputs=packed)

    def forbidden(self: Tensor) -> None:
        raise AssertionError("a host read-back while building the graph")

    def step(x: Tensor) -> Tensor:
        with monkeypatch.context() as patch:
            patch.setattr(Tensor, "numpy", forbidden)
            y = runner({"x": x})["y"]
            return (y.data if packed else y).realize()

    jitted = TinyJit(step)
    rng = np.random.default_rng(3)
    for _ in range(4):
        x = (rng.standard_normal(9) * 20).astype(np.float32)
        got = jitted(Tensor(x)).numpy()
        want = cast_to(x, to, True)
        assert_codes(got, pack_codes(want, SUB_BYTE[to]) if packed else want, x)


@pytest.mark.parametrize("elem_type", [INT4, TensorProto.UINT4], ids=TensorProto.DataType.Name)
def test_quantize_to_int4_packs_in_the_kernel(elem_type: int) -> None:
    """QuantizeLinear (blocked, with an int4 zero point) to a packed output: one kernel reads
    the floats and the packed zero points and writes ceil(n/2) bytes; onnx's values."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(4)
    x = (rng.standard_normal((3, 8)) * 9).astype(np.float32)
    scale = rng.uniform(0.5, 2, (3, 2)).astype(np.float32)
    zero = rng.integers(0, 4, (3, 2)).astype(narrow_numpy(elem_type))
    inits = [numpy_helper.from_array(scale, "s"), numpy_helper.from_array(zero, "z")]
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1, block_size=4)
    graph = model(
        [node],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 8])],
        [helper.make_tensor_value_info("y", elem_type, [3, 8])],
        inits,
    )
    y = OnnxRunner(graph, packed_outputs=True, lazy=True)({"x": x})["y"]
    assert len(y.data.schedule()) == 1
    assert buffer_of(y.realize().data.uop).nbytes == 12
    want = ReferenceEvaluator(graph).run(None, {"x": x})[0]
    np.testing.assert_array_equal(y.numpy().view(np.uint8), to_codes(want))
