"""ONNX's own operator conformance cases (``onnx.backend.test``), run through ``OnnxRunner``.

The cases come from the installed onnx package (``collect_testcases``: each is a one-node model
with its inputs and expected outputs), so nothing is downloaded. ``run_case`` runs one and
raises ``AssertionError`` where fusegrad disagrees with onnx's rules (same dtype and shape;
floats within rtol 1e-3, atol 1e-5; everything else exact). The expected failures live in
``expected_failures.txt``, one case a line under a ``## reason`` heading; ``update_expected.py``
rewrites that file from a real run.
"""

from __future__ import annotations

import functools
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from fusegrad.nn.onnx import OnnxRunner, OnnxUnsupported
from fusegrad.nn.onnx import dtypes as onnx_dtypes
from fusegrad.nn.onnx.values import tensor_value
from fusegrad.tensor import Tensor

RTOL, ATOL = 1e-3, 1e-5
EXPECTED_FILE = Path(__file__).with_name("expected_failures.txt")


@functools.cache
def cases() -> dict[str, Any]:
    """name -> onnx TestCase, for every node case the installed onnx generates."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the case generators overflow casts on purpose
        return {case.name: case for case in collect_testcases()}


def op_type(name: str) -> str:
    """The op a case tests (its model's only node; an expanded function has many)."""
    nodes = cases()[name].model.graph.node
    return nodes[0].op_type if len(nodes) == 1 else "a function's expansion"


def expected_failures(path: Path = EXPECTED_FILE) -> dict[str, str]:
    """case name -> reason, from the file's ``## reason`` headings and ``name  # detail`` lines."""
    out: dict[str, str] = {}
    reason = "unknown"
    for line in path.read_text().splitlines() if path.exists() else []:
        if line.startswith("## "):
            reason = line[3:].strip()
        elif line.strip() and not line.startswith("#"):
            name, _, detail = line.partition("#")
            out[name.strip()] = f"{reason}: {detail.strip()}" if detail.strip() else reason
    return out


def host(value: Any) -> Any:
    """A case's input or expected value as the runner sees it (narrow types as uint8 codes)."""
    if isinstance(value, onnx.TensorProto):
        return tensor_value(value)
    if isinstance(value, onnx.SequenceProto | onnx.OptionalProto | onnx.MapProto):
        return (
            onnx.numpy_helper.to_python(value) if hasattr(onnx.numpy_helper, "to_python") else value
        )
    if isinstance(value, list):
        return [host(v) for v in value]
    if isinstance(value, np.ndarray) and value.dtype.kind in "SU":
        return value.astype(object)
    if isinstance(value, np.ndarray | np.generic):
        value = np.asarray(value)
        if _is_narrow(value):
            return onnx_dtypes.to_codes(value)
    return value


def _is_narrow(array: np.ndarray) -> bool:
    try:
        return onnx_dtypes.from_numpy_dtype(array.dtype) in onnx_dtypes.NARROW
    except Exception:
        return False


def run_case(name: str, device: str) -> None:
    """Run case ``name`` on ``device``; AssertionError naming the first output that differs."""
    case = cases()[name]
    graph = case.model.graph
    inits = {t.name for t in graph.initializer}
    names = [i.name for i in graph.input if i.name not in inits]
    for inputs, expected in case.data_sets:
        runner = OnnxRunner(case.model, device=device)
        got = runner({n: host(v) for n, v in zip(names, inputs)})
        assert list(got) == [o.name for o in graph.output], "outputs out of order"
        for out, want in zip(graph.output, expected):
            compare(out.name, got[out.name], host(want), out.type)


def compare(name: str, got: Any, want: Any, declared: onnx.TypeProto) -> None:
    """Compare one output with onnx's rules."""
    if isinstance(want, list):
        assert isinstance(got, list), f"output {name!r} should be a sequence, got {type(got)}"
        assert len(got) == len(want), f"output {name!r}: {len(got)} items, want {len(want)}"
        elem = declared.sequence_type.elem_type if declared.HasField("sequence_type") else declared
        for i, (g, w) in enumerate(zip(got, want)):
            compare(f"{name}[{i}]", g, w, elem)
        return
    if want is None:
        assert got is None, f"output {name!r} should be an empty optional, got {type(got)}"
        return
    while declared.HasField("optional_type"):
        declared = declared.optional_type.elem_type
    want = np.asarray(want)
    assert got is not None, f"output {name!r} is None, want shape {want.shape}"
    if want.dtype == object:
        got = np.asarray(got.tolist() if isinstance(got, Tensor) else got, dtype=object)
        assert got.shape == want.shape, f"output {name!r} shape {got.shape}, want {want.shape}"
        np.testing.assert_array_equal(got, want, err_msg=f"output {name!r}")
        return
    assert isinstance(got, Tensor), f"output {name!r} is {type(got).__name__}, not a Tensor"
    elem = declared.tensor_type.elem_type if declared.HasField("tensor_type") else 0
    want_dtype = onnx_dtypes.to_dtype(elem or onnx_dtypes.from_numpy_dtype(want.dtype))
    assert got.dtype == want_dtype, f"output {name!r} is {got.dtype.name}, want {want_dtype.name}"
    assert tuple(got.shape) == want.shape, f"output {name!r} shape {got.shape}, want {want.shape}"
    values = got.numpy()
    if want_dtype.is_float and elem not in onnx_dtypes.NARROW:
        rtol = max(RTOL, 2**-6) if want_dtype.name == "bfloat16" else RTOL
        np.testing.assert_allclose(
            values.astype(np.float64),
            want.astype(np.float64),
            rtol=rtol,
            atol=ATOL,
            err_msg=f"output {name!r}",
        )
    else:
        np.testing.assert_array_equal(values, want, err_msg=f"output {name!r}")


def classify(name: str, error: BaseException) -> tuple[str, str]:
    """(reason heading, detail) of a failing case, for expected_failures.txt."""
    text = " ".join(str(error).split())
    if isinstance(error, OnnxUnsupported):
        found = re.search(r"\((\w+)[,)]|: (\w+) \(opset|: (\w+) is (?:in|implemented)", text)
        op = next((g for g in found.groups() if g), "?") if found else op_type(name)
        return f"op not implemented: {op}", ""
    if isinstance(error, AssertionError):
        for what in ("shape", "is None", "should be", "items"):
            if what in text.split("\n")[0][:200]:
                return f"wrong output structure: {op_type(name)}", text[:100]
        if " is " in text[:120] and "want" in text[:160] and "Mismatch" not in text:
            return "wrong output dtype", text[:100]
        return f"wrong values: {op_type(name)}", ""
    return f"raises {type(error).__name__}: {op_type(name)}", text[:100]
