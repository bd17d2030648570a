"""The memory planner: dead intermediate buffers are reused within a plan."""

from __future__ import annotations

import numpy as np

from fusegrad import Tensor
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
