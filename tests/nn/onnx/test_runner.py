"""``OnnxRunner`` end to end, its errors for bad models and bad inputs, the ``fusegrad onnx``
command, and the generated ops table of docs/onnx.md."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

from fusegrad.errors import DTypeError, FileFormatError, InvalidArgument, ShapeError  # noqa: E402
from fusegrad.nn.onnx import OnnxRunner, OnnxUnsupported  # noqa: E402
from fusegrad.nn.onnx.docs import BEGIN, END, ops_table  # noqa: E402
from fusegrad.uop.ops import Ops  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def mlp_model(opset: int = 17) -> onnx.ModelProto:
    """x [batch, 4] -> relu(x @ w + b) [batch, 3], and the shape of x as a second output."""
    w = helper.make_tensor("w", F, [4, 3], np.arange(12, dtype=np.float32) / 10)
    b = helper.make_tensor("b", F, [3], [0.5, -1.0, 0.0])
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["y0"]),
        helper.make_node("Relu", ["y0"], ["y"]),
        helper.make_node("Shape", ["x"], ["s"]),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", F, ["batch", 4])],
        [
            helper.make_tensor_value_info("y", F, ["batch", 3]),
            helper.make_tensor_value_info("s", I64, [2]),
        ],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_runs_from_proto_bytes_and_path(tmp_path: Path) -> None:
    model = mlp_model()
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    want = np.maximum(
        x @ (np.arange(12, dtype=np.float32).reshape(4, 3) / 10)
        + np.array([0.5, -1.0, 0.0], np.float32),
        0,
    )
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    for source in (model, model.SerializeToString(), path, str(path)):
        out = OnnxRunner(source)({"x": x})
        assert list(out) == ["y", "s"]  # the graph's output order
        np.testing.assert_allclose(out["y"].numpy(), want, rtol=1e-6)
        assert out["s"].tolist() == [2, 4] and out["s"].dtype.name == "int64"


def test_unsupported_op_is_refused_when_built_with_the_closest_op() -> None:
    model = mlp_model()
    model.graph.node[2].op_type = "Reluu"
    model.graph.node[2].name = "act"
    with pytest.raises(OnnxUnsupported) as e:
        OnnxRunner(model)
    text = str(e.value)
    assert "'act'" in text and "Reluu" in text and "opset 17" in text and "Relu" in text


def test_truncated_file_is_a_clear_error(tmp_path: Path) -> None:
    data = mlp_model().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FileFormatError, match="truncated"):
        OnnxRunner(path)


def test_unknown_domain_is_refused() -> None:
    model = mlp_model()
    model.graph.node[2].domain = "com.example"
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(OnnxUnsupported, match="com.example"):
        OnnxRunner(model)


@pytest.mark.parametrize(
    ("inputs", "error", "words"),
    [
        ({"x": np.zeros((2, 5), np.float32)}, ShapeError, "shape [2, 5]"),
        ({"x": np.zeros((2, 4), np.float64)}, DTypeError, "astype"),
        ({}, InvalidArgument, "missing required input 'x'"),
        ({"x": np.zeros((2, 4), np.float32), "z": np.zeros(1)}, InvalidArgument, "no input named"),
    ],
)
def test_bad_inputs_are_clear_errors(inputs: dict, error: type, words: str) -> None:
    with pytest.raises(error) as e:
        OnnxRunner(mlp_model())(inputs)
    assert words in str(e.value)


def test_sequences_and_optionals_in_and_out() -> None:
    seq = helper.make_tensor_sequence_value_info("seq", F, None)
    nodes = [
        helper.make_node("SequenceLength", ["seq"], ["n"]),
        helper.make_node("ConcatFromSequence", ["seq"], ["cat"], axis=0),
        helper.make_node("SequenceInsert", ["seq", "cat"], ["longer"]),
    ]
    graph = helper.make_graph(
        nodes,
        "seq",
        [seq],
        [
            helper.make_tensor_value_info("n", I64, []),
            helper.make_tensor_value_info("cat", F, None),
            helper.make_tensor_sequence_value_info("longer", F, None),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    out = OnnxRunner(model)({"seq": [np.ones(2, np.float32), np.zeros(3, np.float32)]})
    assert out["n"].item() == 2
    assert out["cat"].tolist() == [1, 1, 0, 0, 0]
    assert [t.shape for t in out["longer"]] == [(2,), (3,), (5,)]


def test_onnx_command(tmp_path: Path) -> None:
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp_model(), path)
    np.save(tmp_path / "x.npy", np.ones((3, 4), np.float32))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "fusegrad",
            "onnx",
            str(path),
            "--input",
            f"x={tmp_path / 'x.npy'}",
            "--bench",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stderr
    assert "MatMul x1" in run.stdout and "parameters: 15" in run.stdout
    assert "y: shape [3, 3] float32" in run.stdout and "s: shape [2] int64" in run.stdout
    assert "kernels" in run.stdout and "bench: median" in run.stdout
    random = subprocess.run(
        [sys.executable, "-m", "fusegrad", "onnx", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert random.returncode == 0 and "y: shape [1, 3]" in random.stdout  # batch = 1


def test_docs_table_matches_the_registry() -> None:
    text = (ROOT / "docs" / "onnx.md").read_text()
    table = text.partition(BEGIN)[2].partition(END)[0].strip()
    assert table == ops_table(), (
        "docs/onnx.md's ops table is stale: run "
        "`python -m fusegrad.nn.onnx.docs --write docs/onnx.md`"
    )


def test_runs_under_tinyjit_and_with_a_variable_batch() -> None:
    from fusegrad import Tensor, TinyJit
    from fusegrad.engine.realize import GlobalCounters
    from fusegrad.uop.ops import Variable

    model = mlp_model()
    del model.graph.output[1]  # the shape output: a symbolic batch has no host value
    runner = OnnxRunner(model)
    w = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    b = np.array([0.5, -1.0, 0.0], np.float32)
    step = TinyJit(lambda x: runner({"x": x})["y"].realize())
    rng = np.random.default_rng(0)
    for _ in range(4):
        x = rng.standard_normal((2, 4)).astype(np.float32)
        np.testing.assert_allclose(step(Tensor(x)).numpy(), np.maximum(x @ w + b, 0), rtol=1e-5)
    batch = Variable("batch", 1, 16)
    compiles = []
    for n in (3, 7, 5):
        x = rng.standard_normal((n, 4)).astype(np.float32)
        before = GlobalCounters.compiles
        out = runner({"x": Tensor(x).reshape(batch.bind(n), 4)})["y"].numpy()
        compiles.append(GlobalCounters.compiles - before)
        np.testing.assert_allclose(out, np.maximum(x @ w + b, 0), rtol=1e-5)
    assert compiles[1:] == [0, 0], compiles  # one kernel set serves every batch size


def test_unsupported_attribute_value_is_refused_when_built() -> None:
    node = helper.make_node("Pad", ["x", "p"], ["y"], mode="mirror", name="pad0")
    graph = helper.make_graph(
        [node],
        "pad",
        [helper.make_tensor_value_info("x", F, [2])],
        [helper.make_tensor_value_info("y", F, None)],
        [helper.make_tensor("p", I64, [2], [1, 1])],
    )
    with pytest.raises(OnnxUnsupported, match="'pad0'.*mode='mirror'.*reflect"):
        OnnxRunner(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]))


def test_the_command_without_the_onnx_package_says_how_to_install_it():
    """Without the extra, `fusegrad devices` still works and `fusegrad onnx` names the fix."""
    code = (
        "import sys; sys.modules['onnx'] = None\n"
        "from fusegrad.__main__ import main\n"
        "sys.exit(main(['onnx', 'model.onnx']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 1
    assert "pip install 'fusegrad[onnx]'" in done.stderr


def test_outputs_that_share_work_are_computed_once():
    """Two outputs of one MatMul (silero-vad's output and state): the runner realizes them in
    one plan, so reading both runs the MatMul once (its operations counted); a ``lazy``
    runner's outputs read one by one run it twice."""
    from fusegrad import GlobalCounters, Tensor
    from fusegrad.tensor import buffer_of

    nodes = [
        helper.make_node("MatMul", ["x", "x"], ["m"]),
        helper.make_node("Relu", ["m"], ["a"]),
        helper.make_node("Neg", ["m"], ["b"]),
    ]
    spec = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [16, 16]) for n in "xab"]
    graph = helper.make_graph(nodes, "g", spec[:1], spec[1:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32)
    counts = []
    for lazy in (False, True):
        runner = OnnxRunner(model, lazy=lazy)
        runner({"x": x})  # (compiles)
        before = GlobalCounters.global_ops
        out = runner({"x": Tensor(x)})
        assert all(buffer_of(t.uop) is not None for t in out.values()) != lazy
        np.testing.assert_allclose(out["a"].numpy(), np.maximum(x @ x, 0), rtol=1e-5)
        np.testing.assert_allclose(out["b"].numpy(), -(x @ x), rtol=1e-5)
        counts.append(GlobalCounters.global_ops - before)
    assert counts[0] < 1.2 * 2 * 16**3 < 2 * 2 * 16**3 <= counts[1]  # the MatMul once / twice


def test_weight_layout_copies_are_skipped_by_tinyjit_replays():
    """Two Conv layers: the layout pass copies each weight with its output channels innermost.
    Each copy keeps its own memory (schedule/kernelize.py ``plan_memory``), so a TinyJit replay
    skips both (silero-vad ran its weights' copies at every call: 10-30% of its time)."""
    from onnx import numpy_helper

    from fusegrad import Tensor, TinyJit

    rng = np.random.default_rng(0)
    w1, w2 = (rng.standard_normal((64, 64, 3)).astype(np.float32) for _ in range(2))
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1]),
        helper.make_node("Relu", ["h"], ["r"]),
        helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1]),
    ]
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")]
    spec = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 64, 32]) for n in "xy"]
    graph = helper.make_graph(nodes, "g", spec[:1], spec[1:], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    runner = OnnxRunner(model)
    jitted = TinyJit(lambda x: runner({"x": x})["y"])
    for _ in range(4):
        x = rng.standard_normal((1, 64, 32)).astype(np.float32)
        pad = np.pad(np.maximum(_conv1d(np.pad(x[0], ((0, 0), (1, 1))), w1), 0), ((0, 0), (1, 1)))
        np.testing.assert_allclose(
            jitted(Tensor(x)).numpy()[0], _conv1d(pad, w2), rtol=1e-4, atol=1e-4
        )
    skipped = [launch for launch in jitted.launches if launch.constant]
    assert len(skipped) == 2


def test_a_large_weight_copy_is_skipped_by_tinyjit_replays(monkeypatch):
    """1 MB weights' panel copies (larger than PRIVATE_BYTES, no larger than the weights) keep
    their memory too: the second would share the memory of the first product, dead by then,
    and run at every call (PP-OCR recognition copied three 1x1 convolutions' weights so). (On a
    target of 16-column panels these products pack their weights' panels themselves, a group at
    a time, and copy nothing: group packing is off here, so that every target copies them.)"""
    from onnx import numpy_helper

    from fusegrad import Device, Tensor, TinyJit

    monkeypatch.setattr(Device["CPU"].renderer, "group_pack_bytes", 0)

    rng = np.random.default_rng(0)
    w1, w2, w3 = (rng.standard_normal((512, 512)).astype(np.float32) / 16 for _ in range(3))
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"]),
        helper.make_node("MatMul", ["h", "w2"], ["g"]),
        helper.make_node("MatMul", ["g", "w3"], ["y"]),
    ]
    spec = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [512, 512]) for n in "xy"]
    init = [numpy_helper.from_array(w, n) for w, n in ((w1, "w1"), (w2, "w2"), (w3, "w3"))]
    graph = helper.make_graph(nodes, "g", spec[:1], spec[1:], initializer=init)
    runner = OnnxRunner(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    jitted = TinyJit(lambda x: runner({"x": x})["y"])
    for _ in range(4):
        x = rng.standard_normal((512, 512)).astype(np.float32)
        np.testing.assert_allclose(
            jitted(Tensor(x)).numpy(), x @ w1 @ w2 @ w3, rtol=1e-3, atol=1e-3
        )
    assert sum(launch.constant for launch in jitted.launches) == 3  # the panels, made once


def _static_model(extra: list | None = None) -> onnx.ModelProto:
    """y = x @ concat(w[:, 4:], w[:, :4]) (a weight reordered in the graph, as an exporter
    leaves an LSTM's gates), plus ``extra`` nodes and outputs."""
    from onnx import numpy_helper

    w = np.arange(64, dtype=np.float32).reshape(8, 8) / 64
    consts = {"a": [0], "m": [4], "e": [8], "ax": [1]}
    inits = [numpy_helper.from_array(w, "w")]
    inits += [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in consts.items()]
    nodes = [
        helper.make_node("Slice", ["w", "m", "e", "ax"], ["hi"]),
        helper.make_node("Slice", ["w", "a", "m", "ax"], ["lo"]),
        helper.make_node("Concat", ["hi", "lo"], ["w2"], axis=1),
        helper.make_node("MatMul", ["x", "w2"], ["y"]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])]
    for node, out in extra or []:
        nodes.append(node)
        outputs.append(out)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    graph = helper.make_graph(nodes, "g", [x], outputs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_weight_arithmetic_in_the_graph_runs_at_the_first_call_only():
    """Nodes computing from weights only (Slice, Slice, Concat) are static: the first call
    realizes the Concat, which the MatMul reads (the frontier), and later calls skip the three
    nodes, so a call is one kernel; a plain Slice of a weight (a view) is not copied."""
    from fusegrad import Tensor
    from fusegrad.tensor import buffer_of

    runner = OnnxRunner(_static_model(), lazy=True)
    static = {s.node.op_type: s for s in runner.graph.steps if s.static}
    assert sorted(static) == ["Concat", "Slice"] and static["Concat"].frontier == {"w2"}
    w = np.arange(64, dtype=np.float32).reshape(8, 8) / 64
    want = np.concatenate([w[:, 4:], w[:, :4]], axis=1)
    for call in range(3):
        x = np.random.default_rng(call).standard_normal((2, 8)).astype(np.float32)
        y = runner({"x": Tensor(x)})["y"]
        assert len(y.schedule()) == 1  # the MatMul only: the reordered weight is a buffer
        np.testing.assert_allclose(y.numpy(), x @ want, rtol=1e-5, atol=1e-6)
    (kept,), _ = static["Concat"].constants["CPU"]
    assert buffer_of(kept.uop) is not None
    (hi,), _ = static["Slice"].constants["CPU"]
    assert buffer_of(hi.uop) is None  # a view of the weight: nothing to keep


def test_weight_arithmetic_in_a_branch_over_the_outer_weights_is_static():
    """silero-vad reorders its LSTM's weights inside an If's branches, from the outer graph's
    initializers: those branch nodes are static too (kept after the first call)."""
    from onnx import numpy_helper

    from fusegrad import Tensor
    from fusegrad.tensor import buffer_of

    inner = _static_model().graph
    then = helper.make_graph(
        list(inner.node), "then", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    )
    other = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["z"])],
        "else",
        [],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
    )
    nodes = [helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other)]
    spec = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8]),
        helper.make_tensor_value_info("c", TensorProto.BOOL, []),
    ]
    out = [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 8])]
    graph = helper.make_graph(nodes, "g", spec, out, initializer=list(inner.initializer))
    runner = OnnxRunner(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    (branch,) = runner.graph.steps
    concat = [s for s in branch.subgraphs["then_branch"].steps if s.node.op_type == "Concat"]
    assert concat[0].static and concat[0].frontier == {"w2"}
    w = numpy_helper.to_array(inner.initializer[0])
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    for _ in range(2):
        got = runner({"x": Tensor(x), "c": np.array(True)})["out"].numpy()
        np.testing.assert_allclose(got, x @ np.roll(w, 4, axis=1), rtol=1e-5, atol=1e-6)
    assert buffer_of(concat[0].constants["CPU"][0][0].uop) is not None


def test_random_nodes_expansions_and_overridden_weights_are_not_kept():
    """A random node of a weight draws anew at every call; a weight broadcast to a larger shape
    stays an expression (kept, it would take memory for nothing); a weight that is also a graph
    input is not static: the caller may give another value."""
    from fusegrad import Tensor

    extra = [
        (
            helper.make_node("RandomUniformLike", ["w2"], ["r"]),
            helper.make_tensor_value_info("r", TensorProto.FLOAT, [8, 8]),
        ),
        (
            helper.make_node("Expand", ["w2", "shape"], ["big"]),
            helper.make_tensor_value_info("big", TensorProto.FLOAT, [4, 8, 8]),
        ),
    ]
    model = _static_model(extra)
    model.graph.initializer.append(helper.make_tensor("shape", TensorProto.INT64, [3], [4, 8, 8]))
    runner = OnnxRunner(model)
    steps = {s.node.op_type: s for s in runner.graph.steps}
    assert not steps["RandomUniformLike"].static and steps["Expand"].static
    x = np.ones((2, 8), np.float32)
    first, second = runner({"x": x}), runner({"x": x})
    assert not np.array_equal(first["r"].numpy(), second["r"].numpy())
    (big,), _ = steps["Expand"].constants["CPU"]
    assert big.uop.op is not Ops.BUFFER and big.shape == (4, 8, 8)
    w = np.arange(64, dtype=np.float32).reshape(8, 8) / 64
    np.testing.assert_allclose(second["big"].numpy()[3], np.concatenate([w[:, 4:], w[:, :4]], 1))
    # w as an input with the initializer as its default
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [8, 8]))
    runner = OnnxRunner(model)
    assert not any(s.static for s in runner.graph.steps if s.node.op_type == "Concat")
    other = np.eye(8, dtype=np.float32)
    np.testing.assert_allclose(runner({"x": x})["y"].numpy(), x @ np.roll(w, 4, axis=1))
    np.testing.assert_allclose(
        runner({"x": x, "w": Tensor(other)})["y"].numpy(), x @ np.roll(other, 4, axis=1)
    )


def _conv1d(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """(C_in, L + k - 1) with (C_out, C_in, k) -> (C_out, L), no padding."""
    k = w.shape[2]
    windows = np.stack([x[:, i : i + x.shape[1] - k + 1] for i in range(k)], axis=-1)
    return np.einsum("clk,ock->ol", windows, w)
