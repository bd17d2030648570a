"""Tiled matmuls on WEBGPU (llvmpipe here) (core's codegen/tiled.py), against numpy: odd sizes,
transposed and batched operands, fused bias and relu, each dtype the device has, and that the
tiled plan (register blocks in work-groups) is what ran."""

from __future__ import annotations

import numpy as np
import pytest
import tiled_cases as shared

from fusegrad import dtypes
from fusegrad.codegen.tiled import Tiles, default_sizes, plan_tiles
from fusegrad.device import Device
from fusegrad_webgpu.renderer import WGSLRenderer

WEBGPU = shared.GridDevice(
    "WEBGPU", local_index="local_invocation_id", global_index="global_invocation_id"
)


@pytest.mark.parametrize("case", shared.CASES)
def test_tiled_matmul_matches_numpy(case):
    shared.check_case(WEBGPU, case)


def test_bias_and_relu_fuse_into_the_tiled_kernel():
    shared.check_bias_and_relu(WEBGPU)


@pytest.mark.parametrize("dtype", [dtypes.float16])
def test_tiled_matmul_in_each_dtype_the_device_has(dtype):
    if dtype not in Device["WEBGPU"].renderer.supported_dtypes:
        pytest.skip(f"the adapter has no {dtype.name}")
    shared.check_dtype(WEBGPU, np.dtype(dtype.name))


def test_neighbouring_threads_read_neighbouring_columns():
    """llvmpipe runs neighbouring threads in SIMD lanes, as a GPU does: a thread's outputs lie a
    group's width apart (``Renderer.threads_in_lanes``). The register block is unrolled, each
    element of either operand read once per step of the sum."""
    renderer = Device["WEBGPU"].renderer
    ast, kernel = WEBGPU.kernel(
        WEBGPU.tensor(shared.normal(512, 512)) @ WEBGPU.tensor(shared.normal(512, 512))
    )
    threads, upcast, strided = default_sizes(renderer)
    assert strided and plan_tiles(ast, renderer) == Tiles(0, 1, threads, upcast, strided)
    body = kernel.source.split("for (var ridx", 1)[1]
    assert body.count("data1[") == upcast[0] and body.count("data2[") == upcast[1]


def test_a_software_adapter_takes_larger_register_blocks():
    """On the processor (llvmpipe) each read is a gather across the lanes: 32 x 32 outputs per
    thread (in groups of 4 x 4 threads, a block of 128 x 128); a GPU's registers hold 8 x 8."""
    assert WGSLRenderer(on_cpu=True).tile_upcast == (32, 32)
    assert WGSLRenderer().tile_upcast == (8, 8)


def test_noopt_keeps_one_work_item_per_output():
    assert "acc0[" not in shared.check_noopt(WEBGPU).source


def test_every_beam_candidate_computes_the_same():
    shared.check_beam_candidates(WEBGPU)


def test_an_integer_matmul_stays_one_thread_per_output():
    shared.check_integer_matmul_untiled(WEBGPU)
