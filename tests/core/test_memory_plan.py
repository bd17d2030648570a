"""The memory planner: dead intermediate buffers are reused within a plan."""

from __future__ import annotations

import numpy as np

from fusegrad import Tensor, caches
from fusegrad.device import Buffer, Device, _pool
from fusegrad.dtype import dtypes
from fusegrad.engine import realize
from fusegrad.engine.realize import plan_for


def test_dead_intermediates_share_memory(device):
    x = Tensor(np.arange(16, dtype=np.float32).reshape(4, 4), device=device)
    y = x
    for _ in range(4):  # each step: a reduce (own buffer) broadcast back: a chain of kernels
        y = (y - y.max(0, keepdim=True)).contiguous()
    plan = plan_for([y.uop], [device])
    assert len(plan.steps) == 8
    assert len(set(plan.memory)) < len(plan.memory)  # some slots share memory
    expected = x.numpy()
    for _ in range(4):
        expected = expected - expected.max(0, keepdims=True)
    np.testing.assert_allclose(y.numpy(), expected)


def test_a_step_never_writes_what_it_reads():
    x = Tensor(np.ones((8, 8), np.float32))
    y = x
    for _ in range(3):
        y = (y * 2).contiguous().sum(0, keepdim=True).expand(8, 8).contiguous()
    plan = plan_for([y.uop], ["CPU"])
    for step in plan.steps:
        written = plan.memory[step.slots[0] - plan.n_inputs]
        read = {plan.memory[s - plan.n_inputs] for s in step.slots[1:] if s >= plan.n_inputs}
        assert written not in read
    assert y.numpy()[0, 0] == 2 * 8 * 2 * 8 * 2 * 8


class _Handle:
    """A device handle with a finalizer of its own (a wgpu buffer releases itself)."""

    def __del__(self) -> None:
        pass


def test_a_pooled_handle_the_collector_finalized_is_not_reused():
    """A Buffer collected with a reference cycle pools its handle (its ``__del__``) while the
    same collection runs the handle's finalizer: that handle is dead and must not be reused."""
    import gc

    from fusegrad import device

    kept = []

    class Holder:
        def __del__(self) -> None:
            kept.append(self.handle)  # resurrects the handle, as Buffer.__del__ pools it

    holder = Holder()
    holder.handle, holder.me = _Handle(), holder
    del holder
    gc.collect()
    (handle,) = kept
    assert gc.is_finalized(handle) and device._reusable(handle) is None
    fresh = _Handle()
    assert device._reusable(fresh) is fresh


def test_released_pool_memory_goes_back_to_the_allocator():
    """``release_pooled_memory`` frees what the pool keeps (a loaded model's staging copies),
    counts its bytes, and buffers allocated afterwards work as before."""
    from fusegrad import device
    from fusegrad.device import Device, release_pooled_memory

    allocator = Device["CPU"].allocator
    freed: list[int] = []
    original = allocator.free
    allocator.free = lambda handle, nbytes: (freed.append(nbytes), original(handle, nbytes))
    try:
        release_pooled_memory()
        freed.clear()
        staged = Tensor(np.arange(12345, dtype=np.float32), device="CPU").realize()
        del staged  # its buffer goes to the pool
        assert 12345 * 4 in device._pool(allocator)
        assert release_pooled_memory() >= 12345 * 4
        assert 12345 * 4 in freed and not device._pool(allocator)
        assert device._POOLED[0] == 0
    finally:
        del allocator.free
    again = Tensor(np.arange(12345, dtype=np.float32), device="CPU") * 2
    np.testing.assert_array_equal(again.numpy(), np.arange(12345, dtype=np.float32) * 2)


def test_small_outputs_of_steps_reading_only_inputs_keep_their_memory():
    """A step reading only the plan's inputs (a weight's layout copy) keeps a small output in
    memory of its own, so that TinyJit can skip it (tests/nn/onnx/test_runner.py); a large one
    (a language model's dequantized panel) shares memory, as any slot does."""
    from fusegrad.dtype import dtypes
    from fusegrad.schedule.kernelize import PRIVATE_BYTES, KernelStep, plan_memory

    for size, shared in ((1024, False), (PRIVATE_BYTES // 4 + 1, True)):
        steps = [
            KernelStep(None, (3, 0), "CPU"),  # copy of weight 0 (a leaf)
            KernelStep(None, (4, 1, 3), "CPU"),  # uses it with input 1
            KernelStep(None, (5, 2), "CPU"),  # copy of weight 2: slot 3 is dead by now
            KernelStep(None, (6, 4, 5), "CPU"),
        ]
        slot = (size, dtypes.float32, "CPU")
        memory = plan_memory(steps, [slot] * 4, 3, {6})
        assert (memory[5 - 3] == memory[3 - 3]) == shared, size
        assert memory[5 - 3] != memory[4 - 3]  # (read by the step after it: never shared)


def test_large_copies_of_inputs_keep_their_memory():
    """A large output of a step reading only inputs keeps memory of its own when it is no larger
    than what the step reads (a weight's layout copy: PP-OCR's 1x1 convolutions' weights ran
    their copies at every TinyJit call); one larger than its source (a dequantized panel of
    4-bit weights) shares memory."""
    from fusegrad.dtype import dtypes
    from fusegrad.schedule.kernelize import PRIVATE_BYTES, KernelStep, plan_memory
    from fusegrad.uop.ops import Ops, UOp

    size = PRIVATE_BYTES  # floats: four times PRIVATE_BYTES in bytes

    def copy(slot: int, source: int, dtype) -> KernelStep:
        params = (
            UOp(Ops.PARAM, dtypes.float32, (), (0, size)),
            UOp(Ops.PARAM, dtype, (), (1, size)),
        )
        return KernelStep(UOp(Ops.SINK, dtypes.void, params), (slot, source), "CPU")

    for dtype, shared in ((dtypes.float32, False), (dtypes.uint8, True)):
        steps = [
            copy(3, 0, dtype),
            KernelStep(None, (4, 1, 3), "CPU"),
            copy(5, 2, dtype),  # slot 3 is dead by now
            KernelStep(None, (6, 4, 5), "CPU"),
        ]
        memory = plan_memory(steps, [(size, dtypes.float32, "CPU")] * 4, 3, {6})
        assert (memory[5 - 3] == memory[3 - 3]) == shared, dtype


def test_each_run_of_a_plan_gives_its_intermediate_the_same_memory(monkeypatch):
    """A plan run again takes back, for each piece of memory, the handle that piece had in its
    last run (``Plan.handles``, ``Buffer.prefer``), while the outputs of earlier runs are still
    held. Taking whatever was freed last swapped a matmul's panel copy and its output from one
    run to the next (the output then written where the panel both cores had just read was)."""
    seen: list[list[int]] = []
    original = realize.run_plan

    def recording(plan, inputs, *args, **kwargs):
        buffers = original(plan, inputs, *args, **kwargs)
        seen.append([id(b.handle) for b in buffers[plan.n_inputs :]])
        return buffers

    monkeypatch.setattr(realize, "run_plan", recording)
    caches.reset()
    xn = np.arange(64 * 64, dtype=np.float32).reshape(64, 64)
    x = Tensor(xn)
    outs = []
    for _ in range(4):  # the user keeps each output: the next run's output needs new memory
        outs.append(((x + 1).contiguous() * 2).realize())
        if len(outs) > 1:
            outs.pop(0)  # ... then lets the one before go: its memory goes back to the pool
    np.testing.assert_allclose(outs[-1].numpy(), (xn + 1) * 2)
    plan_runs = [run for run in seen if len(run) == 2]
    assert len(plan_runs) == 4
    intermediate = {run[0] for run in plan_runs}
    assert len(intermediate) == 1, "the intermediate moved to other memory between runs"


def test_a_preferred_handle_is_taken_from_the_pool_when_it_is_there():
    allocator = Device["CPU"].allocator
    nbytes = 4 * 1000
    first, second = Buffer("CPU", 1000, dtypes.float32), Buffer("CPU", 1000, dtypes.float32)
    a, b = first.handle, second.handle
    del first, second  # both pooled: first's, then second's (the last freed is taken first)
    pooled = _pool(allocator)[nbytes]
    assert pooled[-2:] == [a, b]
    asking = Buffer("CPU", 1000, dtypes.float32)
    asking.prefer = id(a)
    assert asking.handle is a
    plain = Buffer("CPU", 1000, dtypes.float32)
    plain.prefer = 12345  # nothing pooled has that id: the last freed, as without a preference
    assert plain.handle is b
