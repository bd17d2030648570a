"""The device itself: memory round trips, launch sizes, the four objects' contracts, errors,
and local memory with barriers (grouped reductions) where the renderer declares them."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad.codegen.kernel import generate
from fusegrad.device import Buffer, Device
from fusegrad.dtype import DType, dtypes
from fusegrad.engine.realize import get_runner
from fusegrad.errors import DeviceNotFound, UnsupportedOp
from fusegrad.plugin.manager import plugins
from fusegrad.tensor import Tensor
from fusegrad.testing.oracle import (
    ALL_DTYPES,
    ORACLE,
    held_dtypes,
    random_array,
    require_dtypes,
)
from fusegrad.uop.ops import Ops

NUMPY_DTYPES = [d for d in ALL_DTYPES if d.np is not None]


@pytest.mark.parametrize("size", [0, 1, 3, 1000])
@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=[d.name for d in NUMPY_DTYPES])
def test_copy_round_trip(conformance_device, dtype: DType, size: int):
    """Bytes copied in come back out unchanged, through the allocator alone (no kernel)."""
    require_dtypes(conformance_device, dtype)
    x = random_array(dtype, (size,), -100, 100).astype(dtype.np)
    buf = Buffer(conformance_device, size, dtype).copyin(x)
    np.testing.assert_array_equal(buf.numpy(), x)


@pytest.mark.parametrize("size", [0, 1, 513])
def test_copy_between_devices(conformance_device, size: int):
    """To the oracle and back, including a view that must be made contiguous first."""
    x = np.arange(size * 2, dtype=np.float32).reshape(size, 2)
    here = Tensor(x, device=conformance_device)
    there = here.T.to(ORACLE)
    assert there.device == ORACLE
    np.testing.assert_array_equal(there.numpy(), x.T)
    back = (there.to(conformance_device) + 1).numpy()
    np.testing.assert_array_equal(back, x.T + 1)


def large_size(renderer) -> int:
    """A size past what one launch of the widest grid dimension covers, within 64 MiB."""
    if renderer.grid_dims is None:
        return (1 << 22) + 3
    return min(max(renderer.global_max[0] * max(renderer.local_size, 1) + 1, 1 << 22), 1 << 24)


@pytest.mark.parametrize("size", [1, 2, 3, 31, 255, 256, 257, 1023, 1025, 65535, 65537, "large"])
def test_launch_size(conformance_device, conformance_renderer, size):
    """Elementwise kernels cover exactly their output, at sizes around common group sizes."""
    renderer = conformance_renderer
    n = large_size(renderer) if size == "large" else size
    x = np.arange(n, dtype=np.int32)
    got = (Tensor(x, device=conformance_device) * 3 + 1).numpy()
    np.testing.assert_array_equal(got, x * 3 + 1)


@pytest.mark.parametrize("shape", [(1, 1), (1, 1025), (1025, 1), (129, 257), (3, 5, 7, 11)])
def test_launch_shape(conformance_device, shape: tuple[int, ...]):
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    got = (Tensor(x, device=conformance_device).flip(0) - 1).numpy()
    np.testing.assert_array_equal(got, np.flip(x, 0) - 1)


def test_size_zero(conformance_device):
    """Empty tensors compute without launching anything that touches memory."""
    out = Tensor(np.zeros((0, 3), np.float32), device=conformance_device) + 1
    assert out.numpy().shape == (0, 3)


def test_program_reports_time(conformance_device):
    """A program called with ``wait=True`` returns how long the kernel took, in seconds."""
    x = Tensor(np.ones(64, np.float32), device=conformance_device)
    step = (x + 1).schedule()[0]
    runner = get_runner(step.ast, conformance_device)
    out = Buffer(conformance_device, 64, dtypes.float32)
    seconds = runner([out.handle, x._buffer().handle], wait=True)
    assert isinstance(seconds, float) and seconds >= 0
    np.testing.assert_array_equal(out.numpy(), np.full(64, 2, np.float32))


def test_compiler_is_deterministic(conformance_device):
    """The same source compiles to the same bytes, and the compiler names itself for the cache."""
    runtime = Device[conformance_device]
    x = Tensor(np.ones(8, np.float32), device=conformance_device)
    source = generate((x * 2).schedule()[0].ast, runtime.renderer, runtime.rules).source
    assert isinstance(runtime.compiler.identity, str) and runtime.compiler.identity
    assert runtime.compiler.compile(source) == runtime.compiler.compile(source)


def test_device_is_opened_by_its_spec(conformance_device):
    """The plugin's ``DeviceSpec.open`` builds all four parts for the instance asked for, and
    core records which plugin supplied each (another plugin's override is named there)."""
    base = conformance_device.partition(":")[0]
    owner = next(i for i in plugins().infos if base in i.devices)
    spec = plugins().device_specs()[base]
    assert spec.open is not None, f"plugin {owner.name} offers {base} without DeviceSpec.open"
    runtime = Device[conformance_device]
    assert runtime.name == Device.canonicalize(conformance_device)
    assert set(runtime.suppliers) == {"allocator", "renderer", "compiler", "program"}
    for part, plugin in runtime.suppliers.items():
        assert getattr(runtime, part) is not None, f"{base} opened without its {part}"
        assert plugin == owner.name or plugins().has_plugin(plugin), (part, plugin)


def test_unsupported_dtype_is_refused(conformance_device):
    """A dtype the device cannot hold raises UnsupportedOp naming the device and the dtype."""
    missing = [d for d in NUMPY_DTYPES if d not in held_dtypes(conformance_device)]
    if not missing:
        pytest.skip("the device holds every dtype, so no dtype can be refused")
    for dtype in missing:
        x = Tensor(np.ones(4, dtype.np), device=conformance_device)
        with pytest.raises(UnsupportedOp, match=conformance_device.partition(":")[0]) as caught:
            (x + x).numpy()
        assert dtype.name in str(caught.value)


def test_device_index_out_of_range(conformance_device):
    base = conformance_device.partition(":")[0]
    count = Device.specs()[base].instances()
    with pytest.raises(DeviceNotFound, match=base):
        Device[f"{base}:{count}"]


#: reductions core runs as one group of threads per output: (shape, axis, op)
GROUPED_CASES = [
    ((100_003,), None, "sum"),
    ((7, 5000), 1, "max"),
    ((5000, 3), 0, "sum"),
    ((33, 2049), 1, "softmax"),
]


def _reduce(x, axis, op: str):
    """``op`` over ``axis`` of a Tensor or a numpy array (float64 for numpy's sums)."""
    if op == "softmax" and isinstance(x, Tensor):
        return x.softmax(axis)
    if op == "softmax":
        e = np.exp(x - x.max(axis, keepdims=True))
        return e / e.sum(axis, keepdims=True)
    return getattr(x, op)(axis)


def test_locals_and_barriers(conformance_device, conformance_renderer):
    """Shared (local) memory and barriers, where the renderer declares them: a long reduction
    becomes one group per output (DEFINE_LOCAL, BARRIER, IF/ENDIF), and computes what numpy does."""
    renderer = conformance_renderer
    if not getattr(renderer, "has_local", False) or renderer.grid_dims is None:
        pytest.skip(
            "the renderer declares no local memory (has_local); core generates "
            "DEFINE_LOCAL and BARRIER only for renderers that do"
        )
    x = np.random.default_rng(5).standard_normal(100_003).astype(np.float32) - 10
    step = Tensor(x, device=conformance_device).max().schedule()[-1]
    ops = [u.op for u in generate(step.ast, renderer, Device[conformance_device].rules).program]
    assert {Ops.DEFINE_LOCAL, Ops.BARRIER, Ops.IF, Ops.ENDIF} <= set(ops)
    assert ops.index(Ops.BARRIER) < ops.index(Ops.IF) < ops.index(Ops.ENDIF)
    assert Tensor(x, device=conformance_device).max().numpy() == x.max()  # all below 0
    for shape, axis, op in GROUPED_CASES:
        a = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
        got = _reduce(Tensor(a, device=conformance_device), axis, op).numpy()
        want = _reduce(a.astype(np.float64), axis, op)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{op} {shape}")
