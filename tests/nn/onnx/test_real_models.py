"""Real ONNX models shipped inside pip packages, run through ``OnnxRunner`` on CPU and compared
with onnxruntime (outputs within 1e-4).

- rapidocr-onnxruntime: PP-OCRv4 text detection, recognition and the angle classifier
  (opsets 11/12: Conv, BatchNormalization, HardSigmoid, Resize, ConvTranspose, attention blocks).
- silero-vad: a voice-activity model in six exports (If subgraphs with LSTMs inside, an
  If-less opset-18 variant with Gemm cells, a sequence variant).
- onnx's own "light" models (AlexNet, DenseNet-121, Inception v1/v2, ResNet-50, ShuffleNet,
  SqueezeNet, VGG-19, ZFNet-512 with constant weights), against their stored outputs.

A package that is not installed skips its tests with the pip command that installs it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime", reason="pip install onnxruntime")

from fusegrad.nn.onnx import OnnxRunner  # noqa: E402

ATOL = 1e-4


def package_file(package: str, pip_name: str, relative: str) -> Path:
    """A data file inside an installed package, or a skip naming the pip command."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        pytest.skip(f"{package} is not installed: pip install {pip_name}")
    path = Path(spec.origin).parent / relative
    if not path.exists():
        pytest.skip(f"{path} is missing from this {pip_name} version")
    return path


def compare_with_onnxruntime(path: Path, feeds: dict[str, np.ndarray]) -> float:
    """Run ``path`` on ``feeds`` in both; assert equal shapes and values within ATOL; return the
    largest absolute difference."""
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    got = OnnxRunner(path)(feeds)
    assert list(got) == [o.name for o in session.get_outputs()]
    worst = 0.0
    for name, value, expected in zip(got, got.values(), want, strict=True):
        array = value.numpy()
        assert array.shape == expected.shape, f"{name}: shape {array.shape}, want {expected.shape}"
        assert array.dtype == expected.dtype, f"{name}: dtype {array.dtype}, want {expected.dtype}"
        np.testing.assert_allclose(array, expected, rtol=0, atol=ATOL, err_msg=name)
        worst = max(worst, float(np.abs(array.astype(np.float64) - expected).max()))
    return worst


# ---- PP-OCRv4 (rapidocr-onnxruntime) -------------------------------------------------------------

OCR_MODELS = {
    # name: (file, input shape); detection runs on 320x320 here (640x640 in the benchmark)
    "det": ("ch_PP-OCRv4_det_infer.onnx", (1, 3, 320, 320)),
    "rec": ("ch_PP-OCRv4_rec_infer.onnx", (1, 3, 48, 320)),
    "cls": ("ch_ppocr_mobile_v2.0_cls_infer.onnx", (1, 3, 48, 192)),
}


@pytest.mark.parametrize("name", sorted(OCR_MODELS))
def test_ppocr(name: str) -> None:
    file, shape = OCR_MODELS[name]
    path = package_file("rapidocr_onnxruntime", "rapidocr-onnxruntime", f"models/{file}")
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    compare_with_onnxruntime(path, {"x": x})


# ---- silero-vad ----------------------------------------------------------------------------------

SILERO_MODELS = [
    "silero_vad",
    "silero_vad_16k_op15",
    "silero_vad_half",
    "silero_vad_op18_ifless",
    "silero_vad_openvino_16k",
    "silero_vad_16k_sequence",
]


def silero_feeds(path: Path, batch: int, rate: int) -> dict[str, np.ndarray]:
    """Inputs matching the model's signature: a chunk of audio (512 samples at 16 kHz, 256 at
    8 kHz, plus 64 or 32 samples of context), the recurrent state and the sample rate."""
    rng = np.random.default_rng(1)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    samples = 576 if rate == 16000 else 288
    feeds = {}
    for spec in session.get_inputs():
        if spec.name == "sr":
            feeds["sr"] = np.array(rate, dtype=np.int64)
        elif spec.name == "input":
            fixed = [d for d in spec.shape if isinstance(d, int)]
            width = fixed[-1] if fixed and fixed[-1] > 1 else samples
            rows = spec.shape[0] if isinstance(spec.shape[0], int) else batch
            feeds["input"] = (rng.standard_normal((rows, width)) * 0.1).astype(np.float32)
        else:  # recurrent state: (2, batch, 128) or h/c of (1, 1, 128)
            dims = [d if isinstance(d, int) else batch for d in spec.shape]
            feeds[spec.name] = (rng.standard_normal(dims) * 0.1).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", SILERO_MODELS)
def test_silero_vad(name: str) -> None:
    path = package_file("silero_vad", "silero-vad", f"data/{name}.onnx")
    compare_with_onnxruntime(path, silero_feeds(path, batch=1, rate=16000))


@pytest.mark.parametrize("name", ["silero_vad", "silero_vad_16k_op15"])
def test_silero_vad_batch_and_8k(name: str) -> None:
    """The If subgraphs pick the 8 kHz branch (where the model has one) and a batch of 2."""
    path = package_file("silero_vad", "silero-vad", f"data/{name}.onnx")
    rate = 8000 if name == "silero_vad" else 16000
    compare_with_onnxruntime(path, silero_feeds(path, batch=2, rate=rate))


# ---- onnx's "light" models (real architectures with constant weights) -----------------------

LIGHT_MODELS = [
    "squeezenet",
    "shufflenet",
    "resnet50",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "bvlc_alexnet",
    "vgg19",
    "zfnet512",
]
#: the quickest, always run; the others are marked slow (20 s each, mostly compiling)
QUICK_LIGHT = {"squeezenet", "shufflenet"}


@pytest.mark.parametrize(
    "name",
    [n if n in QUICK_LIGHT else pytest.param(n, marks=pytest.mark.slow) for n in LIGHT_MODELS],
)
def test_onnx_light_model(name: str) -> None:
    """onnx's backend-test input (arange / size) against its stored expected output, with
    onnx's model-test tolerances (rtol 1e-3, atol 1e-7)."""
    light = package_file("onnx", "onnx", f"backend/test/data/light/light_{name}.onnx")
    model = onnx.load(light)
    graph_input = next(
        i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}
    )
    shape = tuple(d.dim_value or 1 for d in graph_input.type.tensor_type.shape.dim)
    size = int(np.prod(shape))
    x = (np.arange(size).reshape(shape) / size).astype(np.float32)
    expected = onnx.numpy_helper.to_array(
        onnx.load_tensor(str(light).replace(".onnx", "_output_0.pb"))
    )
    got = next(iter(OnnxRunner(model)({graph_input.name: x}).values())).numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-7)
