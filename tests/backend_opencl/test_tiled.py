"""Tiled matmuls on a real OpenCL device (core's codegen/tiled.py), against numpy: odd sizes,
transposed and batched operands, fused bias and relu, each dtype the device has, and that the
tiled plan (register blocks in work-groups) is what ran (the shared cases: tests/tiled_cases.py)."""

from __future__ import annotations

import numpy as np
import pytest
import tiled_cases as shared

from fusegrad import dtypes
from fusegrad.codegen.kernel import generate
from fusegrad.codegen.tiled import Tiles, plan_tiles, tile_options
from fusegrad.device import Device
from fusegrad.helpers import context

OPENCL = shared.GridDevice("OPENCL", local_index="get_local_id(0)", global_index="get_global_id")


@pytest.mark.parametrize("case", shared.CASES)
def test_tiled_matmul_matches_numpy(cl_device, case):
    shared.check_case(OPENCL, case)


def test_bias_and_relu_fuse_into_the_tiled_kernel(cl_device):
    shared.check_bias_and_relu(OPENCL)


@pytest.mark.parametrize("dtype", [dtypes.float64, dtypes.float16])
def test_tiled_matmul_in_each_dtype_the_device_has(cl_device, dtype):
    if dtype not in Device["OPENCL"].renderer.supported_dtypes:
        pytest.skip(f"the OpenCL device has no {dtype.name}")
    shared.check_dtype(OPENCL, np.dtype(dtype.name))


def test_a_cpu_device_gives_each_work_item_neighbouring_columns(cl_device):
    """PoCL's work-items are loop trips on each core: a register block of neighbours, which
    its compiler loads as vectors (``Renderer.threads_in_lanes``)."""
    renderer = Device["OPENCL"].renderer
    ast, _ = OPENCL.kernel(
        OPENCL.tensor(shared.normal(256, 256)) @ OPENCL.tensor(shared.normal(256, 256))
    )
    tiles = plan_tiles(ast, renderer)
    assert tiles is not None
    assert tiles.strided == renderer.threads_in_lanes == (not cl_device.is_cpu)


def test_noopt_keeps_one_work_item_per_output(cl_device):
    assert "uidx" not in shared.check_noopt(OPENCL).source


def test_every_beam_candidate_computes_the_same(cl_device):
    shared.check_beam_candidates(OPENCL)


def test_beam_search_times_tile_sizes_and_caches_the_fastest(cl_device, tmp_path, monkeypatch):
    from fusegrad.codegen import search

    monkeypatch.setenv("FUSEGRAD_CACHE", str(tmp_path))
    ast, _ = OPENCL.kernel(
        OPENCL.tensor(shared.normal(64, 64)) @ OPENCL.tensor(shared.normal(64, 64))
    )
    timed = []
    real_time = search._time
    monkeypatch.setattr(
        search, "_time", lambda k, *a, **kw: timed.append(k) or real_time(k, *a, **kw)
    )
    best = search.beam_search(ast, Device["OPENCL"], "OPENCL", width=2)
    assert isinstance(best, Tiles) and len(timed) == len(
        tile_options(ast, Device["OPENCL"].renderer)
    )
    assert all(k.local_size is not None for k in timed)  # every candidate is a tiled launch
    timed.clear()
    assert search.beam_search(ast, Device["OPENCL"], "OPENCL", width=2) == best and timed == []


def test_an_integer_matmul_stays_one_thread_per_output(cl_device):
    shared.check_integer_matmul_untiled(OPENCL)


def test_a_matmul_past_two_to_the_31_products_is_tiled(cl_device):
    shared.check_past_two_to_the_31_products(OPENCL)


def test_beam_runs_when_a_matmul_is_realized_on_the_grid_device(cl_device, tmp_path, monkeypatch):
    """``BEAM=1`` searches a grid device's matmul as it is realized (once it searched only on
    loop devices: the tile sizes and tensor-core plans were never timed outside the tests)."""
    from fusegrad import reset_caches
    from fusegrad.codegen import search

    monkeypatch.setenv("FUSEGRAD_CACHE", str(tmp_path))
    searched = []
    real_search = search.beam_search
    monkeypatch.setattr(
        "fusegrad.engine.realize.beam_search",
        lambda ast, *a: searched.append(ast) or real_search(ast, *a),
    )
    reset_caches()
    a, b = shared.normal(64, 48), shared.normal(48, 80)
    with context(BEAM=1):
        got = (OPENCL.tensor(a) @ OPENCL.tensor(b)).numpy()
        assert len(searched) == 1
        OPENCL.tensor(a).exp().numpy()  # elementwise: nothing to search on a grid device
    assert len(searched) == 1
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def test_beam_passes_over_a_candidate_the_device_refuses_to_launch(
    cl_device, tmp_path, monkeypatch
):
    """A plan that compiles but cannot launch (on an H200, a tensor-core plan needing more
    registers than its group allows) is never chosen; once it ended the search and the realize."""
    from fusegrad.codegen import search

    monkeypatch.setenv("FUSEGRAD_CACHE", str(tmp_path))
    ast, _ = OPENCL.kernel(
        OPENCL.tensor(shared.normal(64, 64)) @ OPENCL.tensor(shared.normal(64, 64))
    )
    renderer = Device["OPENCL"].renderer
    default = tile_options(ast, renderer)[0]
    real_time = search._time

    def refuse_the_default(kernel, *args, **kwargs):
        if kernel.source == generate(ast, renderer, Device["OPENCL"].rules, default).source:
            raise RuntimeError("too many resources requested for launch")
        return real_time(kernel, *args, **kwargs)

    monkeypatch.setattr(search, "_time", refuse_the_default)
    best = search.beam_search(ast, Device["OPENCL"], "OPENCL", width=2)
    assert isinstance(best, Tiles) and best != default
