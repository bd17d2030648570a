"""Eager runs keep the outputs of a plan's constant steps (a weight's layout copy) from one run
to the next while the inputs they read are the same, unwritten buffers (engine/realize.py
``_reuse_constants``; schedule/kernelize.py ``constant_steps``)."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import GlobalCounters, Tensor, nn
from fusegrad.dtype import dtypes
from fusegrad.schedule.kernelize import PRIVATE_BYTES, KernelStep, constant_steps
from fusegrad.uop.ops import Ops, UOp


def _conv_reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """A 3x3 convolution with padding 1, batch 1, in float64."""
    xp = np.pad(x[0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    h, v = x.shape[2:]
    out = np.zeros((w.shape[0], h, v))
    for i in range(3):
        for j in range(3):
            out += np.einsum("oc,chw->ohw", w[:, :, i, j], xp[:, i : i + h, j : j + v])
    return out[None]


def _counted(fn) -> tuple[np.ndarray, int]:  # noqa: ANN001
    GlobalCounters.reset()
    out = fn()
    return out, GlobalCounters.kernel_count


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_a_weights_layout_copy_runs_until_kept_then_is_skipped(device):
    """The convolution's weight copy (and the padded copy of its unchanged input) run in the
    first two calls, then are kept: one kernel a call; values the same throughout. PYTHON's
    launches go one by one, the CPU's as one batch with launches switched off."""
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((1, 16, 5, 5)).astype(np.float32)
    w_np = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    x, w = Tensor(x_np, device=device).realize(), Tensor(w_np, device=device).realize()
    want = _conv_reference(x_np, w_np)
    counts = []
    for _ in range(4):
        out, kernels = _counted(lambda: x.conv2d(w, padding=1).numpy())
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
        counts.append(kernels)
    assert counts[0] == counts[1] > 1
    assert counts[2] == counts[3] == 1


def test_a_weight_written_in_place_is_copied_again():
    """After ``assign`` writes into the weight's buffer (its version moves on), the next call
    copies it again: the kept copy of the old values is not used."""
    rng = np.random.default_rng(1)
    x_np = rng.standard_normal((1, 8, 4, 4)).astype(np.float32)
    w_np = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    x, w = Tensor(x_np).realize(), Tensor(w_np).realize()
    for _ in range(3):
        x.conv2d(w, padding=1).realize()
    new = rng.standard_normal(w_np.shape).astype(np.float32)
    w.assign(Tensor(new)).realize()
    np.testing.assert_allclose(
        x.conv2d(w, padding=1).numpy(), _conv_reference(x_np, new), rtol=1e-4, atol=1e-4
    )
    w.assign(w * 2).realize()
    for _ in range(3):
        np.testing.assert_allclose(
            x.conv2d(w, padding=1).numpy(), _conv_reference(x_np, 2 * new), rtol=1e-4, atol=1e-4
        )


def _conv_case(seed: int) -> tuple[Tensor, np.ndarray, np.ndarray]:
    """An input (1, 16, 5, 5), realized, its array, and a weight (16, 16, 3, 3) array: a
    convolution that copies its weight into panels on every target."""
    rng = np.random.default_rng(seed)
    x_np = rng.standard_normal((1, 16, 5, 5)).astype(np.float32)
    return Tensor(x_np).realize(), x_np, rng.standard_normal((16, 16, 3, 3)).astype(np.float32)


def _copied(x: Tensor, w: Tensor) -> int:
    """Kernels of ``x.conv2d(w)`` when nothing is kept."""
    from fusegrad.helpers import context

    with context(KEEP_COPIES=0):
        return _counted(lambda: x.conv2d(w, padding=1).numpy())[1]


def test_another_weight_of_the_same_shape_is_not_mistaken_for_the_kept_one():
    x, x_np, _ = _conv_case(2)
    rng = np.random.default_rng(2)
    ws = [rng.standard_normal((16, 16, 3, 3)).astype(np.float32) for _ in range(3)]
    tensors = [Tensor(w).realize() for w in ws]
    for _ in range(3):
        for w, t in zip(ws, tensors, strict=True):  # (each call another weight: copied again)
            out, kernels = _counted(lambda t=t: x.conv2d(t, padding=1).numpy())
            assert kernels >= 2  # (the weight's copy and the product; x's padded copy may be kept)
            np.testing.assert_allclose(out, _conv_reference(x_np, w), rtol=1e-4, atol=1e-4)


def test_a_training_loop_keeps_nothing():
    """Weights written at every step: no step is skipped, and the loss is torch-free SGD's."""
    rng = np.random.default_rng(3)
    layer = nn.Linear(24, 16)
    w0, b0 = layer.weight.numpy().copy(), layer.bias.numpy().copy()
    opt = nn.optim.SGD([layer.weight, layer.bias], lr=0.1)
    x_np = rng.standard_normal((8, 24)).astype(np.float32)
    x = Tensor(x_np).realize()
    counts = []
    for _ in range(4):
        GlobalCounters.reset()
        with Tensor.train():
            opt.zero_grad()
            loss = (layer(x) ** 2).mean()
            loss.backward()
            opt.step()
            loss.realize()
        counts.append(GlobalCounters.kernel_count)
        # the same step in numpy
        y = x_np @ w0.T + b0
        dy = 2 * y / y.size
        w0, b0 = w0 - 0.1 * dy.T @ x_np, b0 - 0.1 * dy.sum(0)
    assert len(set(counts)) == 1, counts
    np.testing.assert_allclose(layer.weight.numpy(), w0, rtol=1e-4, atol=1e-5)


def test_constant_steps_are_copies_of_inputs_no_larger_than_them():
    """Steps reading only inputs and writing their own slots, small or no larger than what
    they read; not one whose output is a root, written by another step too, or larger than
    its source (a dequantized panel, several times its 4-bit weight)."""
    size = PRIVATE_BYTES  # floats: four times PRIVATE_BYTES in bytes

    def copy(slot: int, source: int, dtype) -> KernelStep:  # noqa: ANN001
        params = (
            UOp(Ops.PARAM, dtypes.float32, (), (0, size)),
            UOp(Ops.PARAM, dtype, (), (1, size)),
        )
        return KernelStep(UOp(Ops.SINK, dtypes.void, params), (slot, source), "CPU")

    slot = (size, dtypes.float32, "CPU")
    steps = [
        copy(3, 0, dtypes.float32),  # a layout copy: constant
        copy(4, 1, dtypes.uint8),  # four times what it reads: not
        KernelStep(None, (5, 3, 4), "CPU"),  # reads a computed slot: not
        copy(6, 2, dtypes.float32),  # its output is a root: not
    ]
    assert constant_steps(steps, [slot] * 4, 3, {6}) == [0]
    twice = [copy(3, 0, dtypes.float32), KernelStep(None, (3, 3, 1), "CPU")]  # (also written)
    assert constant_steps(twice, [slot], 3, {3 + 1}) == []


def test_keep_copies_0_copies_at_every_run():
    from fusegrad.helpers import context

    x, _, w_np = _conv_case(5)
    w = Tensor(w_np).realize()
    with context(KEEP_COPIES=0):
        counts = [_counted(lambda: x.conv2d(w, padding=1).numpy())[1] for _ in range(4)]
    assert len(set(counts)) == 1 and counts[0] > 1, counts


def test_a_kept_copy_goes_with_its_weight():
    """Deleting the weight frees the copy kept of it (the plan stays cached)."""
    import gc
    import weakref

    from fusegrad.engine import realize
    from fusegrad.engine.realize import _Kept
    from fusegrad.tensor.movement import buffer_of

    x, _, w_np = _conv_case(6)
    w = Tensor(w_np).realize()
    for _ in range(3):
        x.conv2d(w, padding=1).realize()
    buffer = buffer_of(w.uop)
    kept = [
        k
        for k in gc.get_objects()
        if isinstance(k, _Kept) and k.outputs and any(s() is buffer for s in k.sources)
    ]
    assert len(kept) == 1
    copies = [weakref.ref(out) for out in kept[0].outputs]
    del w, buffer, kept
    realize._recent.clear()  # (the last graphs realized hold their input buffers)
    gc.collect()
    assert copies and all(c() is None for c in copies)


def test_a_run_stopped_halfway_keeps_nothing(monkeypatch):
    """Outputs are kept once the run that computes them has run its launches: a run that
    fails first (here the batch raises) leaves no unwritten buffer to be taken later."""
    from fusegrad.engine import realize

    x, x_np, w_np = _conv_case(7)
    w = Tensor(w_np).realize()
    full = _copied(x, w)
    x.conv2d(w, padding=1).numpy()  # (the first run on these inputs: noted)
    real = realize._run_batched

    def stopped(*args, **kwargs):  # noqa: ANN002, ANN003
        raise RuntimeError("stopped")

    monkeypatch.setattr(realize, "_run_batched", stopped)
    with pytest.raises(RuntimeError, match="stopped"):
        x.conv2d(w, padding=1).numpy()
    monkeypatch.setattr(realize, "_run_batched", real)
    counts = []
    for _ in range(2):
        out, kernels = _counted(lambda: x.conv2d(w, padding=1).numpy())
        np.testing.assert_allclose(out, _conv_reference(x_np, w_np), rtol=1e-4, atol=1e-4)
        counts.append(kernels)
    assert counts == [full, 1] and full > 1
