"""The differential fuzzer: fixed-seed short runs find nothing, and it shrinks what it finds."""

from __future__ import annotations

import io
import random

import numpy as np
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


def test_an_injected_fault_shrinks_to_that_op_alone_on_the_smallest_input() -> None:
    """A fake comparison failing whenever a flip is present: the shrinker must drop every other
    step and input, cut the input to one element and its values to 0."""
    held = [dtypes.float32, dtypes.bfloat16, dtypes.int32, dtypes.bool]
    program = next(
        p
        for i in range(500)
        if len((p := fuzz.Generator(random.Random(i), held, 6).generate()).steps) >= 4
        and any(s.op == "flip" for _, s in p.steps[:-1])
    )

    def fails(p: fuzz.Program) -> bool:
        return any(s.op == "flip" for _, s in p.steps)

    small = fuzz.shrink(program, fails)
    assert [s.op for _, s in small.steps] == ["flip"]
    ((array, _),) = small.inputs.values()
    assert array.size == 1 and (array == 0).all()
    assert ".flip(" in fuzz.repro(small, "CPU")


def test_generated_programs_cover_every_op_and_dtype_with_nan_and_inf() -> None:
    """Over a few hundred programs every op, every held dtype and nan, inf and -inf inputs
    appear: a generator change that silently drops one fails here."""
    held = sorted(fuzz.held_dtypes("CPU") & fuzz.held_dtypes("PYTHON"), key=lambda d: d.priority)
    ops, seen, special = set(), set(), set()
    for i in range(400):
        program = fuzz.Generator(random.Random(i), held, 5).generate()
        ops.update(s.op for _, s in program.steps)
        for array, dtype in program.inputs.values():
            seen.add(dtype)
            if dtype.is_float:
                special.update(str(v) for v in array.flat if not np.isfinite(v))
    assert set(fuzz.OPS) - ops == set()
    assert set(held) - seen == set()
    assert special == {"nan", "inf", "-inf"}


def test_no_nan_or_inf_inputs_where_the_device_does_not_promise_them() -> None:
    held = [dtypes.float32]
    for i in range(100):
        program = fuzz.Generator(random.Random(i), held, 3, specials=False).generate()
        assert all(np.isfinite(a).all() for a, _ in program.inputs.values())


def test_integer_floor_division_and_remainder_by_zero_are_zero_as_in_numpy() -> None:
    """fusegrad defines x // 0 = x % 0 = 0 for integers (tests/core/test_former_crashes.py);
    numpy does too, so the fuzzer may divide by any small integer, 0 included."""
    program = fuzz.Program(
        {
            "x0": (np.array([-7, 7, 5, -3, 4]), dtypes.int32),
            "x1": (np.array([2, 0, -2, -2, 0]), dtypes.int32),
        },
        [("v0", fuzz.Step("floordiv", ("x0", "x1"))), ("v1", fuzz.Step("mod", ("v0", "x1")))],
    )
    assert fuzz.check(program, "CPU").kind == "ok"
    assert fuzz.check(fuzz.Program(program.inputs, program.steps[:1]), "CPU").kind == "ok"


def test_repro_of_nan_bfloat16_and_gradients_runs(capsys: pytest.CaptureFixture[str]) -> None:
    program = fuzz.Program(
        {
            "x0": (np.array([1.0, np.nan, -np.inf, 0.25]), dtypes.bfloat16),
            "x1": (np.array([0.5, 2.0, 1.0, -1.0]), dtypes.float32),
        },
        [("v0", fuzz.Step("maximum", ("x0", "x1")))],
    )
    code = fuzz.repro(program, "CPU")
    exec(compile(code, "<repro>", "exec"), {})
    printed = capsys.readouterr().out
    assert "CPU [1.0, nan, 1.0, 0.25]" in printed and "d(sum)/dx1" in printed
    assert "fusegrad.testing" not in code  # the public API only


def test_repro_code_runs_and_prints_both_results(capsys: pytest.CaptureFixture[str]) -> None:
    program = fuzz.Generator(random.Random(3), [dtypes.float32], 4).generate()
    code = fuzz.repro(program, "CPU")
    exec(compile(code, "<repro>", "exec"), {})
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed and "def build(device):" in code


def test_cli_exit_status_and_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert fuzz.main(["--device", "PYTHON", "--graphs", "3", "--seed", "5"]) == 0
    assert "PYTHON: graphs 3, mismatches 0, crashes 0" in capsys.readouterr().out
