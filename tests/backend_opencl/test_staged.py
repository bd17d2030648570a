"""Tiled matmuls that stage their operands in shared memory (core's codegen/staged.py) on a
real OpenCL device, against numpy: odd sizes, transposed, batched and broadcast operands, a
prologue; and BEAM choosing between staged and unstaged tiles (tests/tiled_cases.py). PoCL
keeps the unstaged plan by default (staging ran slower there), so these turn staging on."""

from __future__ import annotations

import pytest
import tiled_cases as shared

from fusegrad.device import Device

OPENCL = shared.GridDevice("OPENCL", local_index="get_local_id(0)", global_index="get_global_id")
BARRIER = "barrier(CLK_LOCAL_MEM_FENCE);"


@pytest.mark.parametrize(
    "case", ["odd sizes", "left transposed", "batched", "broadcast batch", "prologue", "one row"]
)
def test_staged_matmul_matches_numpy(cl_device, case):
    shared.check_staged_case(OPENCL, case, BARRIER)


def test_a_cpu_device_does_not_stage_by_default(cl_device):
    assert Device["OPENCL"].renderer.stage_tiles is False


def test_beam_picks_a_valid_plan_among_staged_and_unstaged(cl_device, tmp_path, monkeypatch):
    shared.check_beam_picks_a_correct_plan(OPENCL, tmp_path, monkeypatch)
