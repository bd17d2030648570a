"""ai.onnx.ml ops that onnx's node conformance cases do not cover, checked against onnx's
reference evaluator on small one-node models."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from fusegrad.nn.onnx import OnnxRunner  # noqa: E402

X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [0.0, 0.0, 0.0]], np.float32)


def one_node(
    op: str, outputs: list[tuple[str, int]], x_type: int = TensorProto.FLOAT, **attrs: object
) -> onnx.ModelProto:
    node = helper.make_node(op, ["x"], [n for n, _ in outputs], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", x_type, None)],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 3)]
    )


def check(model: onnx.ModelProto, x: np.ndarray) -> None:
    want = ReferenceEvaluator(model).run(None, {"x": x})
    got = list(OnnxRunner(model)({"x": x}).values())
    for g, w in zip(got, want, strict=True):
        value = g if isinstance(g, np.ndarray) else g.numpy()
        if np.asarray(w).dtype.kind in "OUS":
            assert value.tolist() == np.asarray(w).tolist()
        else:
            np.testing.assert_allclose(value, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer(norm: str) -> None:
    check(one_node("Normalizer", [("y", TensorProto.FLOAT)], norm=norm), X)


def test_scaler() -> None:
    check(
        one_node(
            "Scaler", [("y", TensorProto.FLOAT)], offset=[0.5, 1.0, -1.0], scale=[2.0, 0.5, 1.0]
        ),
        X,
    )


def test_linear_regressor() -> None:
    check(
        one_node(
            "LinearRegressor",
            [("y", TensorProto.FLOAT)],
            targets=2,
            coefficients=[0.1, 0.2, 0.3, -0.4, 0.5, 0.6],
            intercepts=[1.0, -1.0],
        ),
        X,
    )


@pytest.mark.parametrize("transform", ["NONE", "SOFTMAX", "LOGISTIC"])
def test_linear_classifier_multiclass(transform: str) -> None:
    model = one_node(
        "LinearClassifier",
        [("label", TensorProto.INT64), ("scores", TensorProto.FLOAT)],
        classlabels_ints=[3, 5, 7],
        post_transform=transform,
        coefficients=[0.1, 0.2, 0.3, -0.4, 0.5, 0.6, 1.0, -1.0, 0.0],
        intercepts=[0.0, 0.5, -0.5],
    )
    check(model, X)


def test_linear_classifier_binary_strings() -> None:
    model = one_node(
        "LinearClassifier",
        [("label", TensorProto.STRING), ("scores", TensorProto.FLOAT)],
        classlabels_strings=["no", "yes"],
        coefficients=[0.3, -0.2, 0.1],
        intercepts=[0.1],
    )
    check(model, X)


def test_one_hot_encoder() -> None:
    model = one_node(
        "OneHotEncoder",
        [("y", TensorProto.FLOAT)],
        x_type=TensorProto.INT64,
        cats_int64s=[1, 4, 7],
        zeros=1,
    )
    check(model, np.array([[1, 7], [4, 2]], np.int64))
