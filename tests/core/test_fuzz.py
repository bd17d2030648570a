"""The differential fuzzer: fixed-seed short runs find nothing, and it shrinks what it finds."""

from __future__ import annotations

import io
import random

import pytest

from fusegrad.device import Device
from fusegrad.dtype import dtypes
from fusegrad.testing import fuzz


def available(name: str) -> bool:
    return name in Device.specs() and Device.specs()[name].unavailable() is None


@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_short_run_finds_nothing(device: str) -> None:
    out = io.StringIO()
    counts = fuzz.fuzz(device, 30, seed=0, out=out)
    assert counts["graphs"] == 30
    assert (counts["mismatches"], counts["crashes"]) == (0, 0), out.getvalue()


@pytest.mark.parametrize("device", ["OPENCL", "WEBGPU"])
def test_short_run_on_other_backends(device: str) -> None:
    if not available(device):
        pytest.skip(f"{device} is not available here")
    out = io.StringIO()
    counts = fuzz.fuzz(device, 15, seed=0, out=out)
    assert (counts["mismatches"], counts["crashes"]) == (0, 0), out.getvalue()


def broken_mul() -> dict[str, fuzz.OpSpec]:
    """The op table with ``mul`` computing an addition: a device that is wrong for one op."""
    table = dict(fuzz.OPS)
    table["mul"] = fuzz.OpSpec("({0} + {1})", *list(vars(fuzz.OPS["mul"]).values())[1:])
    return table


def test_an_injected_bug_is_found_and_shrunk_to_one_step() -> None:
    out = io.StringIO()
    counts = fuzz.fuzz("PYTHON", 40, seed=1, table=broken_mul(), grads=False, out=out)
    assert counts["mismatches"] > 0
    for block in out.getvalue().split("graph ")[1:]:
        steps = [line for line in block.splitlines() if line.startswith("    v")]
        assert len(steps) <= 2, block
        assert any(" * " in line for line in steps), block


def test_shrink_keeps_a_failing_program() -> None:
    held = [dtypes.float32, dtypes.int32]
    program = next(
        p
        for i in range(200)
        if len((p := fuzz.Generator(random.Random(i), held, 6).generate()).steps) >= 4
        and any(s.op == "mul" for _, s in p.steps)
    )
    table = broken_mul()

    def fails(p: fuzz.Program) -> bool:
        return fuzz.check(p, "PYTHON", False, table).kind == "mismatch"

    if not fails(program):
        pytest.skip("this program's mul does not reach the output distinguishably")
    small = fuzz.shrink(program, fails)
    assert fails(small) and len(small.steps) <= 2
    assert small.steps[-1][1].op == "mul"


def test_repro_code_runs_and_prints_both_results(capsys: pytest.CaptureFixture[str]) -> None:
    program = fuzz.Generator(random.Random(3), [dtypes.float32], 4).generate()
    code = fuzz.repro(program, "CPU")
    exec(compile(code, "<repro>", "exec"), {})
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed and "def build(device):" in code


def test_cli_exit_status_and_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert fuzz.main(["--device", "PYTHON", "--graphs", "3", "--seed", "5"]) == 0
    assert "PYTHON: graphs 3, mismatches 0, crashes 0" in capsys.readouterr().out
