"""Tensors sharded across devices of one process (engine/shard.py, Tensor.shard): every op family
gives the unsharded result on 2 and 3 CPU devices (and OpenCL + CPU where PoCL is here), the
all-reduce matches numpy, and an MLP trained data-parallel loses what it loses on one device."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import fusegrad
from fusegrad import Tensor, nn
from fusegrad.device import Buffer, Device
from fusegrad.dtype import dtypes
from fusegrad.engine import allreduce, placement_cache, shard
from fusegrad.engine import realize as engine
from fusegrad.errors import (
    DeviceNotFound,
    FusegradError,
    InvalidArgument,
    ShapeError,
    StateDictError,
)
from fusegrad.jit import TinyJit
from fusegrad.nn import optim
from fusegrad.nn.state import get_parameters, shard_model
from fusegrad.uop.ops import Ops

CPUS = ("CPU", "CPU:1", "CPU:2", "CPU:3", "CPU:4", "CPU:5", "CPU:6", "CPU:7")
SETS = [CPUS[:2], CPUS[:3]]


@pytest.fixture(autouse=True, scope="module")
def eight_cpu_devices():
    """Eight CPU devices for this module; the opened devices are forgotten afterwards, so that
    other tests see the one CPU device again."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CPU_DEVICES", "8")
        yield
    fusegrad.reset_caches()


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def check(t: Tensor, expected: np.ndarray, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(t.numpy(), expected, rtol=1e-5, atol=atol)


# ---- the CPU devices ------------------------------------------------------------------------


def test_cpu_devices_come_from_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("CPU_THREADS", "3")
    fusegrad.reset_caches()
    pragma = Device["CPU:2"].renderer.loop_pragmas
    assert any("num_threads(3)" in line for line in pragma.values())
    with pytest.raises(DeviceNotFound, match="CPU has 8 device"):
        Device["CPU:8"]
    monkeypatch.setenv("CPU_DEVICES", "two")
    with pytest.raises(InvalidArgument, match="CPU_DEVICES='two'"):
        Device.specs()["CPU"].instances()
    monkeypatch.undo()
    fusegrad.reset_caches()


def test_a_device_is_a_device():
    x = Tensor(rand(5), device="CPU:1")
    assert x.device == "CPU:1"
    check((x * 2).to("CPU:2"), rand(5) * 2)


# ---- op families, sharded vs unsharded ----------------------------------------------------------


@pytest.mark.parametrize("devices", SETS, ids=len)
@pytest.mark.parametrize("axis", [0, 1, None])
def test_elementwise(devices, axis):
    a, b = rand(7, 5), rand(7, 5, seed=1)
    x = Tensor(a, device="CPU").shard(devices, axis)
    y = Tensor(b, device="CPU").shard(devices)  # replicated, cut to x's pieces where used
    assert x.device == devices
    check((x * 2 + y.exp()).relu(), np.maximum(a * 2 + np.exp(b), 0))
    check((x > y).where(x, 0.5), np.where(a > b, a, 0.5))
    check(x + Tensor(b[0], device="CPU").shard(devices), a + b[0])  # broadcast of a row
    check((x.cast(dtypes.int32) % 3).cast(dtypes.float32), np.mod(a.astype(np.int32), 3))


@pytest.mark.parametrize("devices", SETS, ids=len)
def test_operands_sharded_along_different_axes(devices):
    a, b = rand(6, 4), rand(6, 4, seed=1)
    x = Tensor(a, device="CPU").shard(devices, 0)
    y = Tensor(b, device="CPU").shard(devices, 1)
    check(x * y, a * b)


@pytest.mark.parametrize("devices", SETS, ids=len)
@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("over", [0, 1, None, (0, 1)])
def test_reductions(devices, axis, over):
    a = rand(7, 5)
    x = Tensor(a, device="CPU").shard(devices, axis)
    check(x.sum(over), a.sum(over), 1e-4)
    check(x.max(over), a.max(over))
    check(x.mean(over, keepdim=True), a.mean(over, keepdims=True), 1e-5)
    check(x.softmax(1), np.exp(a) / np.exp(a).sum(1, keepdims=True))


def test_reduction_over_the_sharded_axis_is_replicated():
    x = Tensor(rand(6, 4), device="CPU").shard(CPUS[:3], 0).sum(0).realize()
    assert x.uop.op is Ops.MULTI and x.uop.arg == (CPUS[:3], None)


@pytest.mark.parametrize("devices", SETS, ids=len)
def test_matmul_both_ways(devices):
    a, w = rand(7, 6), rand(6, 5, seed=1)
    expected = a @ w
    rows = Tensor(a, device="CPU").shard(devices, 0)  # the batch: no communication
    check(rows @ Tensor(w, device="CPU").shard(devices), expected, 1e-4)
    inner = Tensor(a, device="CPU").shard(devices, 1)  # the contracting axis: an all-reduce
    out = inner @ Tensor(w, device="CPU").shard(devices, 0)
    check(out, expected, 1e-4)
    assert out.realize().uop.arg[1] is None
    columns = Tensor(a, device="CPU").shard(devices) @ Tensor(w, device="CPU").shard(devices, 1)
    check(columns, expected, 1e-4)
    assert columns.realize().uop.arg[1] == 1


@pytest.mark.parametrize("devices", SETS, ids=len)
@pytest.mark.parametrize("axis", [0, 1])
def test_movement(devices, axis):
    a = rand(6, 4)
    x = Tensor(a, device="CPU").shard(devices, axis)
    check(x.reshape(24), a.reshape(24))
    check(x.reshape(3, 8), a.reshape(3, 8))  # crosses the boundaries of 3 pieces: gathered
    check(x.reshape(6, 2, 2), a.reshape(6, 2, 2))
    check(x.T, a.T)
    check(x.permute(1, 0).reshape(2, 12), a.T.reshape(2, 12))
    check(x.pad(((1, 2), (0, 1))), np.pad(a, ((1, 2), (0, 1))))
    check(x[1:5, 1:3], a[1:5, 1:3])
    check(x[::-1], a[::-1])
    check(x.flip(1), a[:, ::-1])
    check(x.reshape(6, 1, 4).expand(6, 3, 4), np.broadcast_to(a.reshape(6, 1, 4), (6, 3, 4)))


@pytest.mark.parametrize("devices", SETS, ids=len)
def test_cat_and_indexing(devices):
    a, b = rand(6, 4), rand(3, 4, seed=1)
    x = Tensor(a, device="CPU").shard(devices, 0)
    y = Tensor(b, device="CPU").shard(devices, 0)
    check(x.cat(y, dim=0), np.concatenate([a, b]))
    check(x.cat(x, dim=1), np.concatenate([a, a], 1))
    check(x[2], a[2])
    index = Tensor(np.array([5, 0, 3]), device="CPU").shard(devices)
    check(x[index], a[[5, 0, 3]])
    check(
        x.gather(1, Tensor(np.zeros((6, 2), np.int32), device="CPU").shard(devices, 0)),
        np.take_along_axis(a, np.zeros((6, 2), np.int64), 1),
    )


@pytest.mark.parametrize("devices", SETS, ids=len)
def test_network_and_scan_families(devices):
    torch = pytest.importorskip("torch")
    functional = torch.nn.functional
    rng = np.random.default_rng(0)
    images, weight = rand(6, 3, 8, 8), rand(4, 3, 3, 3, seed=1)
    x = Tensor(images, device="CPU").shard(devices, 0)  # a batch of images
    w = Tensor(weight, device="CPU").shard(devices)
    ti, tw = torch.tensor(images), torch.tensor(weight)
    check(x.conv2d(w, padding=1), functional.conv2d(ti, tw, padding=1).numpy(), 1e-4)
    check(x.max_pool2d(2), functional.max_pool2d(ti, 2).numpy())
    check(x.layernorm(axis=-1), functional.layer_norm(ti, (8,)).numpy(), 1e-4)
    rows = rng.standard_normal((7, 5)).astype(np.float32)
    y, ty = Tensor(rows, device="CPU").shard(devices, 0), torch.tensor(rows)
    for axis in (0, 1):  # along the sharded axis and across it
        check(y.cumsum(axis), torch.cumsum(ty, axis).numpy(), 1e-5)
        check(y.argmax(axis), torch.argmax(ty, axis).numpy())
        check(y.sort(axis)[0], torch.sort(ty, axis)[0].numpy())
    q = rand(6, 2, 4, 8, seed=2)
    tq, sq = torch.tensor(q), Tensor(q, device="CPU").shard(devices, 0)
    expected = functional.scaled_dot_product_attention(tq, tq, tq).numpy()
    check(sq.scaled_dot_product_attention(sq, sq), expected, 1e-5)


def test_to_gathers_and_shard_reshards():
    a = rand(7, 3)
    x = Tensor(a, device="CPU").shard(CPUS[:3], 0)
    moved = x.to("CPU:5")
    assert moved.device == "CPU:5"
    check(moved, a)
    check(x.shard(CPUS[:2], 1), a)
    assert x.shard(CPUS[:2], 1).realize().uop.arg == (CPUS[:2], 1)
    check(Tensor(a, device="CPU").to(CPUS[:2]), a)
    assert [p.shape for p in x.realize().uop.src] == [(3, 3), (2, 3), (2, 3)]
    made = Tensor(a, device=CPUS[:2])  # made on several devices: a copy on each
    assert made.device == CPUS[:2] and made.uop.arg == (CPUS[:2], None)
    check(made + Tensor.full((7, 3), 2.0, device=CPUS[:2]), a + 2)


def test_bad_placements_are_refused():
    x = Tensor(rand(2, 3), device="CPU")
    with pytest.raises(ShapeError, match="length 2 over 3 devices"):
        x.shard(CPUS[:3], 0)
    with pytest.raises(InvalidArgument, match="device twice"):
        x.shard(("CPU", "CPU"))
    with pytest.raises(FusegradError, match="cannot be combined"):
        x.shard(CPUS[:2]) + x.shard(CPUS[1:3])
    with pytest.raises(InvalidArgument, match="several devices"):
        x.shard(CPUS[:2]).schedule()


def test_gradient_of_a_tensor_sharded_from_one_device():
    a = rand(6, 3)
    x = Tensor(a, device="CPU", requires_grad=True)
    (x.shard(CPUS[:3], 0) * x.shard(CPUS[:3], 0)).sum().backward()
    assert x.grad is not None and x.grad.device == "CPU"
    check(x.grad, 2 * a)
    check(x.grad.to("CPU:1"), 2 * a)


def test_shard_model_places_a_state_dict():
    first, second = nn.Linear(4, 6), nn.Linear(6, 2)
    state = shard_model([first, second], CPUS[:2], {"0.weight": 0})
    assert first.weight.uop.arg == (CPUS[:2], 0) and second.weight.uop.arg == (CPUS[:2], None)
    assert sorted(state) == ["0.bias", "0.weight", "1.bias", "1.weight"]
    with pytest.raises(StateDictError, match="no tensors named"):
        shard_model(first, CPUS[:2], {"nothing": 0})


def test_gradients_are_all_reduced_in_one_bucket(monkeypatch):
    calls = []
    all_reduce = placement_cache.all_reduce
    monkeypatch.setattr(
        placement_cache, "all_reduce", lambda b, op: calls.append(op) or all_reduce(b, op)
    )
    features = rand(6, 10)
    expected = []
    for devices in (None, CPUS[:2]):
        Tensor.manual_seed(1)
        first, second = nn.Linear(10, 16), nn.Linear(16, 3)
        params = get_parameters([first, second])
        x = Tensor(features, device="CPU")
        if devices:
            for p in params:
                p.shard_(devices)
            x = x.shard(devices, 0)
        second(first(x).relu()).square().sum().backward()
        tensors = [p.grad for p in params]
        Tensor.realize(*tensors)  # all together, as an optimizer's step does
        grads = [g.numpy() for g in tensors]  # type: ignore[union-attr]
        if devices is None:
            expected, calls[:] = grads, []
    assert calls == [Ops.ADD]  # every weight's and bias's partial sums, at once
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("destination", ["CPU:1", "PYTHON"])  # a direct copy, through the host
def test_tinyjit_replays_copies_between_devices(destination):
    a = rand(4, 2)
    step = TinyJit(lambda t: (t.to(destination) * 2).realize())
    for i in range(4):
        check(step(Tensor(a + i, device="CPU")), (a + i) * 2)
    assert step.calls == 2
    assert any(isinstance(launch.runner, engine.CopyRunner) for launch in step.launches)


def test_tinyjit_tells_placements_apart():
    """Another axis or other devices of a sharded input capture again (their pieces differ);
    each placement's replays read their new inputs."""
    step = TinyJit(lambda t: (t * 2).sum(0).realize())
    for devices, axis in [(CPUS[:2], 0), (CPUS[:2], 1), (CPUS[:3], 0), (CPUS[:2], None)]:
        for i in range(4):
            a = rand(6, 2, seed=i)
            check(step(Tensor(a, device="CPU").shard(devices, axis)), (a * 2).sum(0))
        assert step.calls == 2


# ---- mixed backends -----------------------------------------------------------------------------


@pytest.mark.parametrize("devices", [("CPU", "PYTHON"), ("PYTHON", "CPU:1", "CPU:2")], ids=len)
def test_cpu_and_the_python_interpreter_together(devices):
    a = rand(5, 4)
    x = Tensor(a, device="CPU").shard(devices, 0)
    check(x.exp().sum(1), np.exp(a).sum(1), 1e-4)
    check(x.sum(0), a.sum(0), 1e-5)
    check(x.T @ x, a.T @ a, 1e-4)


@pytest.mark.skipif("OPENCL" not in Device.specs(), reason="the OpenCL backend is not installed")
def test_opencl_and_cpu_together():
    if (why := Device.specs()["OPENCL"].unavailable()) is not None:
        pytest.skip(f"OpenCL unavailable: {why}")
    devices = ("OPENCL", "CPU:1")
    a, w = rand(7, 6), rand(6, 5, seed=1)
    x = Tensor(a, device="CPU").shard(devices, 0)
    check((x * 2).relu().sum(1), np.maximum(a * 2, 0).sum(1), 1e-4)
    check(x.sum(0), a.sum(0), 1e-4)
    check(x @ Tensor(w, device="CPU").shard(devices), a @ w, 1e-4)
    check(
        Tensor(a, device="CPU").shard(devices, 1) @ Tensor(w, device="CPU").shard(devices, 0),
        a @ w,
        1e-4,
    )


# ---- the all-reduce -----------------------------------------------------------------------------


def _values(dtype, size: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == dtypes.bool:
        return rng.integers(0, 2, size).astype(bool)
    if dtype.is_int:
        return rng.integers(0, 20, size).astype(dtype.np)
    if dtype == dtypes.bfloat16:  # bits of float32 values rounded to bfloat16
        return (rng.standard_normal(size).astype(np.float32).view(np.uint32) >> 16).astype(
            np.uint16
        )
    return rng.standard_normal(size).astype(dtype.np)


def _as_float(dtype, array: np.ndarray) -> np.ndarray:
    if dtype == dtypes.bfloat16:
        return (array.astype(np.uint32) << 16).view(np.float32)
    return array.astype(np.float64)


@pytest.mark.parametrize("dtype", dtypes.all(), ids=lambda d: d.name)
@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("algorithm", ["ring", "tree"])
def test_all_reduce_matches_numpy(dtype, n, algorithm):
    size = 37  # odd: the ring's chunks differ in length
    arrays = [_values(dtype, size, seed) for seed in range(n)]
    buffers = [Buffer(d, size, dtype).copyin(a) for d, a in zip(CPUS[:n], arrays)]
    ops = [Ops.MAX] if dtype == dtypes.bool else [Ops.ADD, Ops.MAX]
    for op in ops:
        out = allreduce.all_reduce(buffers, op, algorithm)
        assert [b.device for b in out] == list(CPUS[:n])
        as_float = [_as_float(dtype, a) for a in arrays]
        if op is Ops.MAX:
            expected = np.maximum.reduce(as_float)
        else:
            expected = np.add.reduce(as_float)
        for b in out:
            got = _as_float(dtype, b.numpy())
            if dtype.is_float:
                tolerance = {dtypes.float16: 1e-2, dtypes.bfloat16: 3e-2}.get(dtype, 1e-6)
                np.testing.assert_allclose(got, expected, rtol=tolerance, atol=tolerance)
            else:
                np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("n", [3, 8])
def test_long_all_reduce_takes_the_ring(n, monkeypatch):
    monkeypatch.setattr(allreduce, "RING_MIN", 64)
    size = 67
    arrays = [_values(dtypes.float32, size, seed) for seed in range(n)]
    buffers = [Buffer(d, size, dtypes.float32).copyin(a) for d, a in zip(CPUS[:n], arrays)]
    taken = []
    for name in ("_ring", "_tree"):
        original = getattr(allreduce, name)
        monkeypatch.setattr(
            allreduce, name, lambda *a, f=original, name=name: taken.append(name) or f(*a)
        )
    for b in allreduce.all_reduce(buffers):
        np.testing.assert_allclose(b.numpy(), np.add.reduce(arrays), rtol=1e-5, atol=1e-5)
    short = [Buffer(d, 7, dtypes.float32).copyin(np.ones(7, np.float32)) for d in CPUS[:n]]
    assert allreduce.all_reduce(short)[-1].numpy().tolist() == [n] * 7
    assert taken == ["_ring", "_tree"]


def test_all_reduce_refuses_mismatched_buffers():
    with pytest.raises(ShapeError, match="one size and dtype"):
        allreduce.all_reduce([Buffer("CPU", 3, dtypes.float32), Buffer("CPU:1", 4, dtypes.float32)])


def test_copies_between_cpu_devices_take_the_direct_path(monkeypatch):
    calls = []
    allocator = type(Device["CPU:1"].allocator)
    original = allocator.transfer
    monkeypatch.setattr(
        allocator, "transfer", lambda self, *a: calls.append(1) or original(self, *a)
    )
    check(Tensor(rand(9), device="CPU").to("CPU:1"), rand(9))
    assert calls


def test_devices_run_at_the_same_time(monkeypatch):
    """Each device's plan waits for the other's to start: run one after the other, they
    would never meet and the barrier would break."""
    barrier, met = threading.Barrier(2, timeout=30), []
    run_plan = engine.run_plan

    def meeting(*args, **kwargs):
        if threading.current_thread().name.startswith("fusegrad-device"):
            barrier.wait()
            met.append(threading.current_thread().name)
        return run_plan(*args, **kwargs)

    monkeypatch.setattr(engine, "run_plan", meeting)
    a = rand(8, 4)
    check((Tensor(a, device="CPU").shard(CPUS[:2], 0) * 3).sum(1), (a * 3).sum(1))
    assert len(set(met)) == 2


# ---- training -----------------------------------------------------------------------------------


def _train(
    devices, steps: int = 20, opt: type = optim.Adam, model_parallel: bool = False, jit=None
):
    """Per-step losses of a small MLP; its parameters replicated on ``devices`` (the first
    layer's weight sharded along its outputs with ``model_parallel``), the batch sharded. With
    ``jit`` (a list), each step is a TinyJit's call, the TinyJit appended to the list."""
    Tensor.manual_seed(0)
    first, second = nn.Linear(10, 16), nn.Linear(16, 3)
    params = get_parameters([first, second])
    if devices:
        for p in params:
            p.shard_(devices)
        if model_parallel:
            first.weight.shard_(devices, 0)
    optimizer = opt(params, lr=0.05)
    losses = []
    if model_parallel:  # the optimizer's state of the sharded weight is sharded alike
        assert [m.uop.arg for m in optimizer.m[:1]] == [(devices, 0)]

    def step(x: Tensor, y: Tensor) -> Tensor:
        loss = second(first(x).relu()).sparse_categorical_crossentropy(y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step(loss)
        return loss

    if jit is not None:
        jit.append(step := TinyJit(step))
    for i in range(steps):  # three batches in turn (a replay must read the new one)
        rng = np.random.default_rng(i % 3)
        features, labels = rng.standard_normal((24, 10)).astype(np.float32), rng.integers(0, 3, 24)
        x, y = Tensor(features, device="CPU"), Tensor(labels, device="CPU")
        if devices:
            x, y = x.shard(devices, 0), y.shard(devices, 0)
        losses.append(step(x, y).item())
    return np.array(losses), params


@pytest.fixture(scope="module")
def one_device_losses():
    return _train(None)[0]


def test_data_parallel_training_matches_one_device(one_device_losses):
    losses, params = _train(CPUS[:2])
    np.testing.assert_allclose(losses, one_device_losses, rtol=0, atol=1e-5)
    assert losses[-1] < losses[0]
    for p in params:  # the gradients are placed like their parameters
        assert p.uop.arg == (CPUS[:2], None)
        assert p.grad is not None and p.grad.realize().uop.arg == (CPUS[:2], None)


def test_model_parallel_training_matches_one_device(one_device_losses):
    losses, params = _train(CPUS[:2], steps=5, model_parallel=True)
    np.testing.assert_allclose(losses, one_device_losses[:5], rtol=0, atol=1e-5)
    assert params[0].uop.arg == (CPUS[:2], 0)
    assert params[0].grad is not None and params[0].grad.realize().uop.arg == (CPUS[:2], 0)


def test_jitted_data_parallel_training_matches_unjitted(one_device_losses):
    """The copies between devices and the all-reduces' kernels are captured and replayed."""
    jitted: list = []
    losses, params = _train(CPUS[:2], steps=10, jit=jitted)
    np.testing.assert_allclose(losses, one_device_losses[:10], rtol=0, atol=1e-5)
    (step,) = jitted
    assert step.calls == 2 and len(step.launches) > 0  # steps 3 to 10 were replays
    assert any(isinstance(launch.runner, engine.CopyRunner) for launch in step.launches)
    assert all(p.uop.arg == (CPUS[:2], None) for p in params)


def test_placements_are_cached_by_structure(monkeypatch):
    """A training loop's second step places nothing: it replays the first step's placement."""
    fusegrad.reset_caches()
    placed = []
    placed_graph = shard._placed_graph
    monkeypatch.setattr(
        shard, "_placed_graph", lambda roots: placed.append(1) or placed_graph(roots)
    )
    _train(CPUS[:2], steps=2)
    first = len(placed)
    losses, _ = _train(CPUS[:2], steps=3)
    assert first > 0 and len(placed) == first  # same structures, other buffers: all replayed
    fusegrad.reset_caches()
    np.testing.assert_allclose(losses, _train(CPUS[:2], steps=3)[0], rtol=0, atol=0)
    assert len(placed) > first
