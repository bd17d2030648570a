"""ONNX's operator conformance cases through ``OnnxRunner`` (see conformance.py).

Every case the installed onnx generates runs on CPU. A case listed in expected_failures.txt
is a strict xfail: when it starts passing the test fails, so the list stays true (regenerate
it with ``python tests/nn/onnx/update_expected.py``). On PYTHON (the interpreter, slow) a
deterministic subset runs: every ``PYTHON_STRIDE``-th case in name order, and only those
expected to pass on CPU (all of them would take about 5 minutes on 2 cores; a quarter takes
about 80 s, the CPU run about 100 s with ``-n 2``).

Run a part: ``pytest tests/nn/onnx/test_conformance.py -k "cpu and conv"``.
"""

from __future__ import annotations

import pytest

from tests.nn.onnx.conformance import cases, expected_failures, run_case

#: the PYTHON run takes every PYTHON_STRIDE-th case (name order)
PYTHON_STRIDE = 4

pytest.importorskip("onnx")


def _params(stride: int = 1) -> list:
    expected = expected_failures()
    out = []
    for i, name in enumerate(sorted(cases())):
        if i % stride:
            continue
        if name in expected:
            if stride > 1:
                continue
            mark = pytest.mark.xfail(strict=True, reason=expected[name])
            out.append(pytest.param(name, marks=mark, id=name))
        else:
            out.append(pytest.param(name, id=name))
    return out


@pytest.mark.parametrize("name", _params())
def test_cpu(name: str) -> None:
    run_case(name, "CPU")


@pytest.mark.parametrize("name", _params(PYTHON_STRIDE))
def test_python(name: str) -> None:
    run_case(name, "PYTHON")


def test_expected_failures_name_real_cases() -> None:
    """A stale entry (a renamed or removed case) would silently never run."""
    unknown = sorted(set(expected_failures()) - set(cases()))
    assert not unknown, (
        f"expected_failures.txt lists unknown cases {unknown}; rerun update_expected.py"
    )
