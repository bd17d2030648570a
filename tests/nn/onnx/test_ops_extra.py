"""Op variants that onnx's node conformance cases leave out (older opsets, rarer attributes),
checked against onnx's reference evaluator (or onnxruntime where the reference lacks them) on
small one-node models: recurrent layers, Resize/Upsample, control flow, STFT, GridSample."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from fusegrad.errors import InvalidIndex  # noqa: E402
from fusegrad.nn.onnx import OnnxRunner  # noqa: E402
from fusegrad.tensor import bounds  # noqa: E402
from fusegrad.uop.ops import Ops, toposort  # noqa: E402

F = TensorProto.FLOAT
RNG = np.random.default_rng(0)


def model(
    nodes: list,
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    opset: int,
    inits: dict[str, np.ndarray] | None = None,
) -> onnx.ModelProto:
    info = [
        helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
        for k, v in inputs.items()
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        info,
        [helper.make_tensor_value_info(o, F, None) for o in outputs],
        [onnx.numpy_helper.from_array(v, k) for k, v in (inits or {}).items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(m: onnx.ModelProto, feeds: dict[str, np.ndarray], reference: str = "onnx") -> None:
    if reference == "onnx":
        want = ReferenceEvaluator(m).run(None, feeds)
    else:
        ort = pytest.importorskip("onnxruntime")
        want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, feeds
        )
    got = list(OnnxRunner(m)(feeds).values())
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-4, atol=1e-5)


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize(
    "attrs",
    [
        {"clip": 0.5},
        {"input_forget": 1},
        {"direction": "bidirectional", "activations": ["Sigmoid", "Tanh", "Tanh"] * 2},
    ],
)
def test_lstm_attributes(attrs: dict) -> None:
    h = 3
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    inits = {"W": randn(dirs, 4 * h, 2), "R": randn(dirs, 4 * h, h), "B": randn(dirs, 8 * h)}
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "yh", "yc"], hidden_size=h, **attrs)
    check(
        model([node], {"x": randn(4, 2, 2)}, ["y", "yh", "yc"], 14, inits),
        {"x": randn(4, 2, 2)},
        reference="ort",
    )


@pytest.mark.parametrize("before", [0, 1])
def test_gru_linear_before_reset(before: int) -> None:
    h = 3
    inits = {"W": randn(1, 3 * h, 2), "R": randn(1, 3 * h, h), "B": randn(1, 6 * h)}
    node = helper.make_node(
        "GRU", ["x", "W", "R", "B"], ["y", "yh"], hidden_size=h, linear_before_reset=before
    )
    x = randn(5, 2, 2)
    check(model([node], {"x": x}, ["y", "yh"], 14, inits), {"x": x}, reference="ort")


def test_rnn_sequence_lens_reverse() -> None:
    h = 4
    inits = {
        "W": randn(1, h, 3),
        "R": randn(1, h, h),
        "B": randn(1, 2 * h),
        "L": np.array([3, 1], np.int32),
    }
    node = helper.make_node(
        "RNN", ["x", "W", "R", "B", "L"], ["y", "yh"], hidden_size=h, direction="reverse"
    )
    x = randn(3, 2, 3)
    check(model([node], {"x": x}, ["y", "yh"], 14, inits), {"x": x}, reference="ort")


def test_resize_opset10_and_upsample_opset7() -> None:
    x = randn(1, 2, 3, 4)
    scales = np.array([1, 1, 2, 1.5], np.float32)
    resize = helper.make_node("Resize", ["x", "s"], ["y"], mode="nearest")
    check(model([resize], {"x": x}, ["y"], 10, {"s": scales}), {"x": x}, reference="ort")
    upsample = helper.make_node("Upsample", ["x"], ["y"], scales=[1.0, 1.0, 2.0, 3.0])
    check(model([upsample], {"x": x}, ["y"], 7), {"x": x}, reference="ort")


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_downscale(mode: str) -> None:
    x = randn(1, 1, 9, 7)
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode=mode, antialias=1)
    check(
        model([node], {"x": x}, ["y"], 18, {"s": np.array([1, 1, 0.45, 0.6], np.float32)}), {"x": x}
    )


def test_loop_without_iterations_keeps_state() -> None:
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["c"], ["c_out"]),
            helper.make_node("Add", ["v", "v"], ["v_out"]),
        ],
        "body",
        [
            helper.make_tensor_value_info("i", TensorProto.INT64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v", F, [2]),
        ],
        [
            helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
            helper.make_tensor_value_info("v_out", F, [2]),
        ],
    )
    inits = {"n": np.array(0, np.int64), "t": np.array(True)}
    node = helper.make_node("Loop", ["n", "t", "x"], ["y"], body=body)
    x = randn(2)
    check(model([node], {"x": x}, ["y"], 16, inits), {"x": x})
    inits["n"] = np.array(3, np.int64)
    check(model([node], {"x": x}, ["y"], 16, inits), {"x": x})


def test_stft_complex_input() -> None:
    signal = randn(1, 32, 2)
    node = helper.make_node("STFT", ["x", "step", "", "len"], ["y"], onesided=0)
    inits = {"step": np.array(6, np.int64), "len": np.array(8, np.int64)}
    check(model([node], {"x": signal}, ["y"], 17, inits), {"x": signal})


@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
def test_gridsample_cubic_paddings(padding: str) -> None:
    x, grid = randn(1, 2, 4, 5), RNG.uniform(-1.3, 1.3, (1, 3, 6, 2)).astype(np.float32)
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode="cubic", padding_mode=padding)
    check(model([node], {"x": x, "g": grid}, ["y"], 20), {"x": x, "g": grid})


@pytest.mark.parametrize(
    ("op", "attrs", "named"),
    [
        ("Resize", {"mode": "bicubic"}, "mode='bicubic'"),
        ("GridSample", {"padding_mode": "wrap"}, "padding_mode='wrap'"),
        ("Conv", {"auto_pad": "SAME"}, "auto_pad='SAME'"),
    ],
)
def test_bad_attribute_fails_when_built(op: str, attrs: dict, named: str) -> None:
    """An unsupported attribute value is an OnnxUnsupported naming it when the runner is
    built, before any input is given."""
    from fusegrad.nn.onnx import OnnxUnsupported

    inputs = {"Resize": ["x", "", "s"], "GridSample": ["x", "g"], "Conv": ["x", "w"]}[op]
    node = helper.make_node(op, inputs, ["y"], **attrs)
    feeds = {"x": randn(1, 1, 4, 4), "g": randn(1, 2, 2, 2), "w": randn(1, 1, 3, 3)}
    used = {k: v for k, v in feeds.items() if k in inputs}
    m = model([node], used, ["y"], 20, {"s": np.ones(4, np.float32)} if op == "Resize" else None)
    with pytest.raises(OnnxUnsupported, match=named):
        OnnxRunner(m)


def test_upsample_bilinear_opset7() -> None:
    x = randn(1, 1, 3, 4)
    node = helper.make_node("Upsample", ["x"], ["y"], mode="linear", scales=[1.0, 1.0, 2.0, 2.0])
    check(model([node], {"x": x}, ["y"], 7), {"x": x}, reference="ort")


def test_batchnorm_opset7_per_element() -> None:
    """spatial=0 (opsets 7 and 8): one scale, bias, mean and variance per element."""
    x = randn(2, 3, 2, 2)
    inits = {k: RNG.uniform(0.5, 1.5, (3, 2, 2)).astype(np.float32) for k in "sbmv"}
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], spatial=0)
    check(model([node], {"x": x}, ["y"], 7, inits), {"x": x}, reference="ort")


def test_dropout_opset7_mask_has_the_input_type() -> None:
    x = randn(3, 4)
    node = helper.make_node("Dropout", ["x"], ["y", "mask"], ratio=0.3)
    m = model([node], {"x": x}, ["y", "mask"], 7)
    got = OnnxRunner(m)({"x": x})
    assert got["mask"].dtype == got["y"].dtype
    np.testing.assert_array_equal(got["y"].numpy(), x)
    np.testing.assert_array_equal(got["mask"].numpy(), np.ones_like(x))


def _scaling_branch(name: str, factor: float, n: int) -> onnx.GraphProto:
    """A branch ``y{name} = x * factor`` of ``n`` elements."""
    k = helper.make_tensor(f"k{name}", F, [], [factor])
    return helper.make_graph(
        [helper.make_node("Mul", ["x", f"k{name}"], [f"y{name}"])],
        name,
        [],
        [helper.make_tensor_value_info(f"y{name}", F, [n])],
        [k],
    )


def _double_or_triple(cond: str) -> onnx.NodeProto:
    """An If of 32 floats: ``x * 2`` where ``cond``, else ``x * 3``."""
    then, other = _scaling_branch("a", 2.0, 32), _scaling_branch("b", 3.0, 32)
    return helper.make_node("If", [cond], ["y"], then_branch=then, else_branch=other)


def test_if_on_an_input_value_replays_right_under_tinyjit() -> None:
    """A condition computed from the inputs' values (a sum of 32): TinyJit's replays must still
    take the branch each input asks for (both branches run, ``where`` picks: no guard)."""
    from fusegrad import Tensor, TinyJit

    nodes = [
        helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"]),
        _double_or_triple("c"),
    ]
    zero = {"zero": np.zeros((), np.float32)}
    m = model(nodes, {"x": np.zeros(32, np.float32)}, ["y"], 16, zero)
    runner = OnnxRunner(m)
    jitted = TinyJit(lambda x: runner({"x": x})["y"].realize())
    for i in range(6):
        x = (np.arange(32, dtype=np.float32) + 1) * (1 if i % 2 else -1)
        want = x * (2.0 if x.sum() > 0 else 3.0)
        np.testing.assert_allclose(jitted(Tensor(x)).numpy(), want)
    assert not jitted.guards


def test_if_on_a_mode_input_runs_one_branch_under_tinyjit() -> None:
    """A condition computed from a scalar input (silero-vad's sample rate picks one of two whole
    models): the capture reads it back and runs the branch it names only, guarded, so a call
    with the other mode runs the model anew and both give the plain runner's values."""
    from fusegrad import GlobalCounters, Tensor, TinyJit

    nodes = [
        helper.make_node("Equal", ["sr", "k16"], ["c"]),
        _double_or_triple("c"),
    ]
    feeds = {"x": np.zeros(32, np.float32), "sr": np.array(16000, np.int64)}
    m = model(nodes, feeds, ["y"], 16, {"k16": np.array(16000, np.int64)})
    runner = OnnxRunner(m)
    jitted = TinyJit(lambda x, sr: runner({"x": x, "sr": sr})["y"].realize())
    x = np.arange(32, dtype=np.float32)
    for sr in [16000, 16000, 16000, 8000, 16000, 8000]:
        got = jitted(Tensor(x), Tensor(np.array(sr, np.int64))).numpy()
        np.testing.assert_allclose(got, x * (2.0 if sr == 16000 else 3.0))
    assert len(jitted.guards) == 1
    GlobalCounters.reset()
    jitted(Tensor(x), Tensor(np.array(16000, np.int64)))
    assert GlobalCounters.global_ops <= 32 + 1  # one product per element (and the comparison)


def test_value_dependent_output_replays_right_under_tinyjit() -> None:
    """NonMaxSuppression's output length depends on the boxes: the capture reads the selection
    back and keeps it as a guard, so a replay whose boxes select otherwise runs the model anew
    and every call gives what the plain runner gives."""
    from fusegrad import Tensor, TinyJit

    node = helper.make_node("NonMaxSuppression", ["b", "s", "n"], ["y"])
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("b", F, [1, 4, 4]),
            helper.make_tensor_value_info("s", F, [1, 1, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)],
        [onnx.numpy_helper.from_array(np.array([2], np.int64), "n")],
    )
    runner = OnnxRunner(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)]))
    jitted = TinyJit(lambda b, s: runner({"b": b, "s": s})["y"].realize())
    inputs = [(RNG.uniform(0, 1, (1, 4, 4)).astype(np.float32), randn(1, 1, 4)) for _ in range(3)]
    for boxes, scores in [inputs[0]] * 3 + inputs + [inputs[0]] * 2:
        want = runner({"b": boxes, "s": scores})["y"].numpy()
        np.testing.assert_array_equal(jitted(Tensor(boxes), Tensor(scores)).numpy(), want)
    assert len(jitted.guards) == 2  # NMS runs on the host: it reads the boxes and the scores


def test_if_whose_branches_cannot_both_run_is_guarded_under_tinyjit() -> None:
    """The else branch reshapes x to (2, 2), which only a 4-element x allows: with a 3-element
    x the branches cannot both run, so the capture reads the condition back and guards on it."""
    from fusegrad import Tensor, TinyJit

    then = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["ya"])],
        "a",
        [],
        [helper.make_tensor_value_info("ya", F, None)],
    )
    other = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["yb"])],
        "b",
        [],
        [helper.make_tensor_value_info("yb", F, None)],
        [onnx.numpy_helper.from_array(np.array([2, 2], np.int64), "shape")],
    )
    nodes = [
        helper.make_node("Greater", ["c", "zero"], ["p"]),
        helper.make_node("If", ["p"], ["y"], then_branch=then, else_branch=other),
    ]
    m = model(
        nodes,
        {"x": np.zeros(3, np.float32), "c": np.zeros((), np.float32)},
        ["y"],
        16,
        {"zero": np.zeros((), np.float32)},
    )
    runner = OnnxRunner(m)
    jitted = TinyJit(lambda x, c: runner({"x": x, "c": c})["y"].realize())
    x = np.arange(3, dtype=np.float32)
    for c in [1.0, 1.0, 1.0, 2.0, 1.0]:
        np.testing.assert_array_equal(jitted(Tensor(x), Tensor(np.float32(c))).numpy(), -x)
    with pytest.raises(Exception, match="(?i)reshape"):  # the other branch, as without TinyJit
        jitted(Tensor(x), Tensor(np.float32(-1.0)))
    assert len(jitted.guards) == 1


@pytest.mark.parametrize(
    ("shape", "kernel", "attrs"),
    [
        ((1, 6, 9, 11), (3, 3), {"pads": [1, 1, 1, 1]}),
        ((2, 4, 12, 10), (5, 5), {"strides": [2, 2], "pads": [2, 1, 2, 3]}),
        ((1, 5, 13, 9), (3, 3), {"dilations": [2, 1], "pads": [2, 1, 2, 1]}),
        ((1, 5, 13, 9), (3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
        ((1, 3, 17), (4,), {"strides": [3]}),
    ],
)
def test_depthwise_conv(shape: tuple, kernel: tuple, attrs: dict) -> None:
    """Depthwise convolutions take the shifted-slices path: strides, dilations, asymmetric
    and automatic padding, a bias, 1-d."""
    channels = shape[1]
    inits = {"w": randn(channels, 1, *kernel), "b": randn(channels)}
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=channels, **attrs)
    x = randn(*shape)
    check(model([node], {"x": x}, ["y"], 13, inits), {"x": x}, reference="ort")


@pytest.mark.parametrize(
    ("shape", "kernel", "attrs"),
    [
        ((1, 3, 4, 5), (2, 2), {"strides": [2, 2]}),
        ((2, 2, 3, 3), (3, 2), {"strides": [3, 2], "pads": [1, 0, 1, 1]}),
        ((1, 4, 6), (3,), {"strides": [3], "output_padding": [1]}),
    ],
)
def test_conv_transpose_kernel_equal_to_stride(shape: tuple, kernel: tuple, attrs: dict) -> None:
    """Non-overlapping transposed convolutions take the matmul-and-reshuffle path."""
    inits = {"w": randn(shape[1], 5, *kernel), "b": randn(5)}
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    x = randn(*shape)
    check(model([node], {"x": x}, ["y"], 13, inits), {"x": x}, reference="ort")


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, -1.0, 1.7])
def test_pow_by_a_constant_exponent_multiplies(exponent: float) -> None:
    """A Pow whose exponent is a Constant or an initializer runs as that power of a number
    (x * x for 2, sqrt for 0.5): no exp2/log2 of the general pow in the graph (silero-vad's
    STFT magnitude took 40 us so), with numpy's values, nan for a negative base."""
    x = np.abs(randn(3, 5)) + 0.1
    x[0, 0] = -2.0
    value = helper.make_tensor("e", F, [], [exponent])
    nodes = [
        helper.make_node("Constant", [], ["c"], value=value),
        helper.make_node("Pow", ["x", "c"], ["y"]),
        helper.make_node("Pow", ["x", "w"], ["z"]),
    ]
    m = model(nodes, {"x": x}, ["y", "z"], 17, {"w": np.array([exponent], np.float32)})
    with np.errstate(invalid="ignore"):
        want = np.power(x, np.float32(exponent))
    y, z = OnnxRunner(m, lazy=True)({"x": x}).values()
    ops = {u.op for u in toposort([y.uop, z.uop])}
    assert (Ops.LOG2 in ops) == (exponent == 1.7)
    for got in (y, z):
        assert got.shape == (3, 5)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, equal_nan=True)


@pytest.mark.parametrize("i", [1, -2])
def test_gather_of_a_known_scalar_index_is_a_view(i: int) -> None:
    """An initializer's scalar index (silero-vad picks its state's halves so) is a view of x:
    no bounds check waits to be read back after the call, and no gather is computed."""
    x = randn(3, 4)
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=0)
    m = model([node], {"x": x}, ["y"], 13, {"i": np.array(i, np.int64)})
    out = OnnxRunner(m, lazy=True)({"x": x})["y"]
    assert not bounds.waiting()
    assert not any(u.op is Ops.GATHER for u in toposort([out.uop]))
    np.testing.assert_array_equal(out.numpy(), x[i])
    check(m, {"x": x})


def test_gather_of_a_known_index_out_of_range_fails_when_called() -> None:
    node = helper.make_node("Gather", ["x", "i"], ["y"], axis=1)
    m = model([node], {"x": randn(3, 4)}, ["y"], 13, {"i": np.array(4, np.int64)})
    with pytest.raises(InvalidIndex, match="index 4 is out of bounds for axis 1 of size 4"):
        OnnxRunner(m)({"x": randn(3, 4)})
