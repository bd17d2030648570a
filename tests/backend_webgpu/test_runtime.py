"""The WEBGPU runtime and renderer: adapter limits, refusals, timing, uniforms, compile errors."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Device, Tensor, dtypes
from fusegrad.codegen.kernel import generate
from fusegrad.device import Buffer
from fusegrad.engine.realize import get_runner
from fusegrad.errors import CompileError, UnsupportedOp
from fusegrad.helpers import context as flags
from fusegrad_webgpu.compiler import WGSLCompiler
from fusegrad_webgpu.device import WebGPUAllocator, WebGPUProgram, context
from fusegrad_webgpu.renderer import WGSLRenderer, dispatch_size


def run_with(renderer: WGSLRenderer, t: Tensor) -> np.ndarray:
    """Realize the one kernel of ``t`` rendered by ``renderer`` (inputs must be realized)."""
    (step,) = t.schedule()
    kernel = generate(step.ast, renderer)
    program = WebGPUProgram(kernel.name, WGSLCompiler().compile(kernel.source))
    inputs = [
        u.src[0].arg if u.op.name == "RESHAPE" else u.arg
        for u in t.uop.toposort()
        if u.op.name == "BUFFER"
    ]
    out = Buffer("WEBGPU", t.numel(), t.dtype)
    program(out.handle, *[b.handle for b in inputs], global_size=kernel.global_size)
    return out.numpy().reshape(t.shape)


@pytest.mark.parametrize(
    "threads, local, limit, expected",
    [
        (10, 64, 65535, (1, 1, 1)),
        (64 * 65535, 64, 65535, (65535, 1, 1)),
        (64 * 65536, 64, 65535, (65535, 2, 1)),
        (1000, 4, 10, (10, 10, 3)),
    ],
)
def test_dispatch_size_folds_into_more_dimensions(threads, local, limit, expected):
    assert dispatch_size(threads, local, limit) == expected
    x, y, z = expected
    assert x * y * z * local >= threads and max(expected) <= limit


def test_grid_over_the_limit_is_folded_and_guarded():
    ctx = context()
    renderer = WGSLRenderer(
        "WEBGPU",
        ctx.features,
        {**ctx.limits, "max-compute-workgroups-per-dimension": 3},
        ctx.adapter_name,
    )
    x = np.arange(1000, dtype=np.float32)
    t = Tensor(x, device="WEBGPU") * 2 + 1
    (step,) = t.schedule()
    source = generate(step.ast, renderer).source
    assert source.startswith("// dispatch 3 3 2\n") and "gid.z * " in source and "return;" in source
    np.testing.assert_array_equal(run_with(renderer, t), x * 2 + 1)


def test_limits_come_from_the_adapter():
    ctx, renderer = context(), Device["WEBGPU"].renderer
    assert renderer.global_max[0] == ctx.adapter.limits["max-compute-workgroups-per-dimension"]
    assert renderer.max_buffers == ctx.adapter.limits["max-storage-buffers-per-shader-stage"]
    assert renderer.local_size <= ctx.adapter.limits["max-compute-invocations-per-workgroup"]


def test_too_many_storage_buffers_is_refused():
    ctx = context()
    renderer = WGSLRenderer(
        "WEBGPU",
        ctx.features,
        {**ctx.limits, "max-storage-buffers-per-shader-stage": 3},
        ctx.adapter_name,
    )
    a, b, c = (Tensor([1.0, 2.0], device="WEBGPU") for _ in range(3))
    (step,) = (a + b + c).schedule()
    with pytest.raises(
        UnsupportedOp, match=r"needs 4 storage buffers, but the adapter .* allows 3"
    ):
        generate(step.ast, renderer)


def test_buffer_over_the_adapter_limit_is_refused(monkeypatch):
    allocator = WebGPUAllocator()
    monkeypatch.setattr(allocator, "largest", 1024)
    with pytest.raises(UnsupportedOp, match="cannot hold a 4096-byte buffer.*binds at most 1024"):
        allocator.alloc(4096)


def test_float16_without_shader_f16_names_adapter_and_dtype():
    renderer = WGSLRenderer("WEBGPU", frozenset(), None, "Test Adapter via Nothing")
    (step,) = (Tensor([1.0, 2.0], device="WEBGPU").half() * 2).schedule()
    with pytest.raises(
        UnsupportedOp, match=r"cannot hold float16.*Test Adapter via Nothing.*shader-f16"
    ):
        generate(step.ast, renderer)


@pytest.mark.parametrize(
    "dtype, reason",
    [
        (dtypes.int64, "Test Adapter.*lacks the shader-int64 feature"),
        (dtypes.float64, "WGSL has no float64"),
    ],
)
def test_64_bit_types_are_refused_without_their_feature(dtype, reason):
    renderer = WGSLRenderer("WEBGPU", frozenset({"shader-f16"}), None, "Test Adapter")
    (step,) = (Tensor([1, 2], device="WEBGPU", dtype=dtype) * 2).schedule()
    with pytest.raises(UnsupportedOp, match=f"cannot hold {dtype.name}.*{reason}"):
        generate(step.ast, renderer)


def test_kernel_time_is_measured():
    x = Tensor(np.ones(256, np.float32), device="WEBGPU")
    (step,) = (x * 3).schedule()
    out = Buffer("WEBGPU", 256, dtypes.float32)
    seconds = get_runner(step.ast, "WEBGPU")([out.handle, x._buffer().handle], wait=True)
    assert 0 < seconds < 5
    np.testing.assert_array_equal(out.numpy(), np.full(256, 3.0, np.float32))


def test_scalars_share_one_uniform_buffer():
    source = """// dispatch 1 1 1
@group(0) @binding(0) var<storage, read_write> data0: array<i32>;
@group(0) @binding(1) var<uniform> vals: array<vec4<i32>, 1>;

@compute @workgroup_size(4)
fn scaled(@builtin(global_invocation_id) gid: vec3<u32>) {
  data0[gid.x] = i32(gid.x) * vals[0].x + vals[0].y;
}
"""
    program = WebGPUProgram("scaled", WGSLCompiler().compile(source))
    out = Buffer("WEBGPU", 4, dtypes.int32)
    for vals in [(3, 1), (10, -5)]:
        program(out.handle, vals=vals)
        np.testing.assert_array_equal(out.numpy(), np.arange(4) * vals[0] + vals[1])
    first = program.vals_buffer
    program(out.handle, vals=(1, 2))
    assert program.vals_buffer is first  # one buffer, rewritten: none per scalar or per call


def test_invalid_wgsl_is_a_compile_error_showing_the_source():
    with pytest.raises(CompileError, match=r"(?s)rejected by .*   1 \| fn broken"):
        WGSLCompiler().compile("fn broken( {")


def test_special_float_constants():
    x = Tensor([1.0, -1.0, 0.0], device="WEBGPU")
    got = (x / 0.0).numpy()  # inf, -inf, nan from kernels, and as constants below
    assert got[0] == np.inf and got[1] == -np.inf and np.isnan(got[2])
    assert (x.maximum(float("-inf")) + float("inf")).numpy().tolist() == [np.inf] * 3


@pytest.mark.parametrize("shape, axis", [((100_003,), None), ((3, 300, 300), (1, 2))])
def test_long_loops_are_unrolled_under_the_adapters_limit(shape, axis):
    """llvmpipe ends a thread's loops after 65535 trips in all: longer ones must still count."""
    x = np.random.default_rng(1).integers(0, 3, shape).astype(np.int32)
    got = Tensor(x, device="WEBGPU").sum(axis)
    np.testing.assert_array_equal(got.numpy(), x.sum(axis))


def test_bitcast_between_float16_and_16_bit_integers():
    if dtypes.float16 not in Device["WEBGPU"].renderer.supported_dtypes:
        pytest.skip("this adapter has no shader-f16")
    bits = np.array([0x3C00, 0xC000, 0x7BFF, 0x0001, 0x8000], np.uint16)
    t = Tensor(bits, device="WEBGPU")
    np.testing.assert_array_equal(t.bitcast(dtypes.float16).numpy(), bits.view(np.float16))
    back = Tensor(bits.view(np.float16), device="WEBGPU").bitcast(dtypes.int16)
    np.testing.assert_array_equal(back.numpy(), bits.view(np.int16))


LONG = 65535 * 64 * 2 + 1  # past what 64 unrolled copies of one thread's loop could cover


@pytest.mark.parametrize("dtype", [np.float32, np.int32])
def test_a_sum_too_long_for_one_thread_runs_as_a_workgroup(dtype):
    """llvmpipe ends a thread's loops after 65535 trips and the renderer unrolls at most 64
    times, so one thread cannot sum 2**23 elements (refused with NOOPT); a workgroup of 64
    threads, each summing a strided share, can."""
    x = np.random.default_rng(3).integers(-3, 4, LONG).astype(dtype)
    t = Tensor(x, device="WEBGPU").sum()
    (step,) = t.schedule()
    kernel = generate(step.ast, Device["WEBGPU"].renderer)
    assert "var<workgroup> shared0: array<" in kernel.source
    assert "workgroupBarrier();" in kernel.source
    assert kernel.local_size == (64,) and kernel.global_size == (64,)
    if "llvmpipe" in Device["WEBGPU"].renderer.adapter:
        with flags(NOOPT=1), pytest.raises(UnsupportedOp, match="ends a thread's loops"):
            generate(step.ast, Device["WEBGPU"].renderer)
    assert t.numpy() == x.sum(dtype=np.float64 if dtype == np.float32 else np.int64)


def test_workgroups_reduce_each_row_and_each_column():
    x = np.random.default_rng(4).standard_normal((300, 2000)).astype(np.float32)
    t = Tensor(x, device="WEBGPU")
    np.testing.assert_allclose(t.sum(1).numpy(), x.sum(1), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(t.max(0).numpy(), x.max(0))
    e = np.exp(x - x.max(1, keepdims=True))
    want = e / e.sum(1, keepdims=True)
    np.testing.assert_allclose(t.softmax(1).numpy(), want, rtol=1e-4, atol=1e-9)


CYCLE = """
import gc, numpy as np
from fusegrad import Tensor, dtypes
from fusegrad.device import Buffer

class Holder:
    pass

for _ in range(3):  # a buffer in a reference cycle, collected with its wgpu buffer
    b = Buffer("WEBGPU", 64, dtypes.float32)
    b.copyin(np.arange(64, dtype=np.float32))
    h = Holder(); h.me = h; h.b = b
    del b, h
    gc.collect()
    x = Tensor(np.ones(64, np.float32), device="WEBGPU")  # the same size: the pool's handle
    print((x * 2).sum().numpy())
"""


def test_a_buffer_collected_in_a_reference_cycle_leaves_no_dead_handle_in_the_pool():
    """The collector ran the wgpu buffer's release and put its handle in the pool in one go;
    the next buffer of its size got the dead handle: a TypeError, or wgpu-native aborting the
    process (found after an exception inside export_webgpu left such a cycle)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", CYCLE], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["128.0"] * 3
