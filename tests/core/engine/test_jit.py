"""TinyJit: capture on the second call, replay with new inputs after that."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from fusegrad import GlobalCounters, Tensor, TinyJit
from fusegrad.engine import realize
from fusegrad.jit import JitError


def test_replay_uses_the_new_inputs(device):
    f = TinyJit(lambda a, b: ((a + b) * 2 - a.exp()).sum(0).realize())
    rng = np.random.default_rng(0)
    for _ in range(5):
        x, y = rng.standard_normal((3, 4), np.float32), rng.standard_normal((3, 4), np.float32)
        got = f(Tensor(x, device=device), Tensor(y, device=device)).numpy()
        np.testing.assert_allclose(got, ((x + y) * 2 - np.exp(x)).sum(0), rtol=1e-5, atol=1e-6)
    assert f.calls == 2 and len(f.launches) == 1


def test_replay_builds_no_graph_and_schedules_nothing(monkeypatch):
    f = TinyJit(lambda a: (a * 3).realize())
    a = Tensor([1.0, 2.0])
    f(a), f(a)
    plans = len(realize._plans)
    monkeypatch.setattr(realize, "make_plan", lambda *_: pytest.fail("replay scheduled"))
    GlobalCounters.reset()
    assert f(Tensor([5.0, 6.0])).tolist() == [15.0, 18.0]
    assert GlobalCounters.kernel_count == 1 and GlobalCounters.compiles == 0
    assert len(realize._plans) == plans


def test_a_new_shape_captures_again():
    f = TinyJit(lambda a: (a + 1).realize())
    for n in (2, 2, 2, 3, 3, 3):
        assert f(Tensor([1.0] * n)).tolist() == [2.0] * n
    assert f.signature is not None and f.signature[0][0] == (3,)


def test_weights_outside_the_inputs_are_captured():
    w = Tensor([[1.0, 2.0], [3.0, 4.0]])
    f = TinyJit(lambda x: (x @ w).relu().realize())
    for v in ([1.0, 0.0], [0.0, 1.0], [-1.0, 1.0]):
        np.testing.assert_allclose(f(Tensor([v])).numpy(), np.maximum(np.array([v]) @ w.numpy(), 0))


def test_a_function_that_assigns_replays_with_the_latest_values():
    w = Tensor([1.0, 2.0]).realize()

    def step(x: Tensor) -> Tensor:
        w.assign(w * 2 + x)
        return (w * 10).realize(w)

    f = TinyJit(step)
    expected = np.array([1.0, 2.0])
    for i in range(5):
        out = f(Tensor([float(i), 1.0]))
        expected = expected * 2 + np.array([float(i), 1.0])
        np.testing.assert_allclose(w.numpy(), expected)
        np.testing.assert_allclose(out.numpy(), expected * 10)
    assert f.launches  # replayed, not run
    w.assign(Tensor([0.0, 0.0])).realize()  # changed from outside: the replay starts from it
    f(Tensor([1.0, 1.0]))
    np.testing.assert_allclose(w.numpy(), [1.0, 1.0])


def test_assigning_a_tensor_left_unrealized_is_refused():
    w = Tensor([1.0, 2.0]).realize()

    def step(x: Tensor) -> Tensor:
        w.assign(w + x)  # never realized inside
        return (x * 2).realize()

    f = TinyJit(step)
    f(Tensor([1.0, 1.0]))
    with pytest.raises(JitError, match="unrealized"):
        f(Tensor([1.0, 1.0]))


def test_a_jitted_training_step_matches_the_eager_one():
    from fusegrad import nn
    from fusegrad.nn.state import get_parameters

    def run(jit: bool) -> list[float]:
        Tensor.manual_seed(0)
        model = [nn.Linear(4, 8), nn.BatchNorm(8), nn.Linear(8, 3)]
        opt = nn.optim.Adam(get_parameters(model), lr=0.01)

        def step(x: Tensor, y: Tensor) -> Tensor:
            with Tensor.train():
                opt.zero_grad()
                h = model[1](model[0](x).reshape(-1, 8, 1)).reshape(-1, 8).relu()
                loss = model[2](h).sparse_categorical_crossentropy(y)
                loss.backward()
                opt.step()
                return loss.realize()

        f = TinyJit(step) if jit else step
        rng = np.random.default_rng(0)
        losses = []
        for _ in range(6):
            x, y = rng.standard_normal((16, 4), np.float32), rng.integers(0, 3, 16).astype(np.int32)
            losses.append(f(Tensor(x), Tensor(y)).item())
        return losses + [float(model[1].running_mean.numpy().sum())]

    np.testing.assert_allclose(run(True), run(False), rtol=1e-5)


def _attention_like(x, w):
    """Scores over a sequence of any length: a matmul, a softmax over the sequence, a mean."""
    scores = (x @ w).softmax(0)
    return (scores * x.sum(1, keepdim=True)).mean(0).realize()


def _attention_like_reference(a, w):
    s = a @ w
    e = np.exp(s - s.max(0, keepdims=True))
    scores = e / e.sum(0, keepdims=True)
    return (scores * a.sum(1, keepdims=True)).mean(0)


def test_a_symbolic_length_replays_every_length_without_compiling(device, monkeypatch):
    from fusegrad.uop.ops import Variable

    seq = Variable("seq", 1, 32)
    w = np.random.default_rng(1).standard_normal((6, 4)).astype(np.float32)
    wt = Tensor(w, device=device).realize()
    calls = []
    f = TinyJit(lambda x: (calls.append(1), _attention_like(x, wt))[1])
    rng = np.random.default_rng(0)
    lengths = (5, 9, 2, 32, 9, 1, 5)
    for i, n in enumerate(lengths):
        if i == 2:  # captured at 5 and 9: from here on nothing compiles or schedules
            GlobalCounters.reset()
            monkeypatch.setattr(realize, "make_plan", lambda *_: pytest.fail("replay scheduled"))
        a = rng.standard_normal((n, 6)).astype(np.float32)
        out = f(Tensor(a, device=device).reshape(seq.bind(n), 6))
        np.testing.assert_allclose(
            out.numpy(), _attention_like_reference(a, w), rtol=1e-4, atol=1e-5
        )
    assert len(calls) == 2 and GlobalCounters.compiles == 0
    assert GlobalCounters.kernel_count == len(f.launches) * (len(lengths) - 2)


def test_a_symbolic_output_takes_the_shape_of_each_call():
    from fusegrad.uop.ops import Variable

    seq = Variable("seq", 1, 16)
    f = TinyJit(lambda x: (x * 2).realize())
    for n in (3, 4, 7, 2):
        out = f(Tensor(np.arange(n * 2, dtype=np.float32)).reshape(seq.bind(n), 2))
        assert repr(out.shape) == f"(seq={n}, 2)"
        np.testing.assert_array_equal(
            out.numpy(), np.arange(n * 2, dtype=np.float32).reshape(n, 2) * 2
        )
    assert f.calls == 2


def test_a_variable_bound_inside_the_function_is_refused():
    from fusegrad.uop.ops import Variable

    seq = Variable("seq", 1, 16)
    f = TinyJit(lambda x: (x.reshape(seq.bind(x.shape[0]), 2) + 1).realize())
    f(Tensor.ones(3, 2))
    with pytest.raises(JitError, match="bound inside the function"):
        f(Tensor.ones(3, 2))


def test_threads_calling_one_jitted_function_each_get_their_own_results():
    f = TinyJit(lambda a, b: (a * b + a).sum(1).realize())
    rng = np.random.default_rng(0)
    pairs = [rng.standard_normal((2, 3, 4), np.float32) for _ in range(4)]
    wrong: list[int] = []
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        for i in range(300):
            x, y = pairs[k][0] + i, pairs[k][1]
            try:
                got = f(Tensor(x), Tensor(y)).numpy()
            except Exception as e:  # a thread's exception would not fail the test by itself
                errors.append(e)
                continue
            if not np.allclose(got, (x * y + x).sum(1), rtol=1e-5, atol=1e-4):
                wrong.append(i)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert wrong == [], f"{len(wrong)} of 1200 calls from 4 threads returned wrong results"


def test_a_launch_that_reads_only_weights_runs_once(device):
    """A kernel of weights alone (here the sum of ``w``; in a model, the layout pass's weight
    copies) computes the same at every replay: replays skip it."""
    w = Tensor([1.0, 2.0, 3.0], device=device).realize()
    f = TinyJit(lambda x: (x + w.sum()).realize())
    counts = []
    for i in range(5):
        GlobalCounters.kernel_count = 0
        assert f(Tensor([float(i)] * 3, device=device)).tolist() == [i + 6.0] * 3
        counts.append(GlobalCounters.kernel_count)
    assert len(f.launches) == 2 and [launch.constant for launch in f.launches] == [True, False]
    assert counts[2:] == [1, 1, 1]


def test_a_weight_written_in_place_runs_its_constant_launches_again(device):
    w = Tensor([1.0, 2.0, 3.0], device=device).realize()
    f = TinyJit(lambda x: (x + w.sum()).realize())
    for _ in range(3):
        f(Tensor([0.0] * 3, device=device))
    w._buffer().copyin(np.array([5.0, 6.0, 7.0], np.float32))  # what loading weights does
    assert f(Tensor([1.0] * 3, device=device)).tolist() == [19.0] * 3
    assert f(Tensor([0.0] * 3, device=device)).tolist() == [18.0] * 3


def test_launches_that_read_an_input_or_what_the_call_computes_are_never_constant(device):
    w = Tensor([1.0, 2.0], device=device).realize()
    f = TinyJit(lambda x: (x.sum() + w).realize())
    for i in range(4):
        assert f(Tensor([float(i), 1.0], device=device)).tolist() == [i + 2.0, i + 3.0]
    assert not any(launch.constant for launch in f.launches)


# ---- tensors the function reads from its closure, given another value outside it ---------------


def closure_eval() -> tuple[Tensor, Tensor, TinyJit]:
    """A weight, an input, and a jitted product that reads the weight from its closure, replayed."""
    w = Tensor(np.ones((4, 3), np.float32), requires_grad=True).realize()
    x = Tensor(np.arange(8, dtype=np.float32).reshape(2, 4)).realize()
    evaluate = TinyJit(lambda x: (x @ w).realize())
    for _ in range(3):
        evaluate(x)
    assert evaluate.calls == 2
    return w, x, evaluate


def test_a_replay_sees_weights_an_eager_optimizer_step_changed():
    """Once a silent stale result: ``assign`` gives the weight a new buffer, the replay read the
    old one."""
    from fusegrad.nn.optim import SGD

    w, x, evaluate = closure_eval()
    optimizer = SGD([w], lr=0.1)
    with Tensor.train():
        for _ in range(2):
            optimizer.zero_grad()
            (x @ w).sum().backward()
            optimizer.step()
            np.testing.assert_allclose(evaluate(x).numpy(), x.numpy() @ w.numpy(), rtol=1e-6)
    for _ in range(3):  # it captured again and replays again
        np.testing.assert_allclose(evaluate(x).numpy(), x.numpy() @ w.numpy(), rtol=1e-6)
    assert evaluate.calls == 2


def test_a_replay_sees_an_assign_a_setitem_and_a_loaded_state_dict():
    from fusegrad.nn.state import load_state_dict

    w, x, evaluate = closure_eval()
    w.assign(Tensor(np.full((4, 3), 2, np.float32)))
    np.testing.assert_allclose(evaluate(x).numpy(), x.numpy() @ np.full((4, 3), 2))
    w[0] = Tensor(np.zeros(3, np.float32))  # (left unrealized: the capture computes it)
    np.testing.assert_allclose(evaluate(x).numpy(), x.numpy() @ [[0, 0, 0], *[[2, 2, 2]] * 3])
    load_state_dict({"w": w}, {"w": Tensor(np.full((4, 3), -1, np.float32))})
    np.testing.assert_allclose(evaluate(x).numpy(), x.numpy() @ np.full((4, 3), -1))


def test_a_buffer_let_go_of_before_the_capture_does_not_capture_again():
    """A detached copy keeps the buffer its tensor let go of: replays of a function reading the
    copy stay replays."""
    w = Tensor(np.ones(4, np.float32)).realize()
    kept = w.detach()
    w.assign(w * 2).realize()
    f = TinyJit(lambda x: (x + kept).realize())
    for _ in range(4):
        np.testing.assert_allclose(f(Tensor(np.zeros(4, np.float32))).numpy(), np.ones(4))
    assert f.calls == 2


def test_a_jitted_training_step_and_a_jitted_evaluation_take_turns():
    from fusegrad.nn.optim import SGD

    w, x, evaluate = closure_eval()
    optimizer = SGD([w], lr=0.01)

    @TinyJit
    def step(x: Tensor) -> Tensor:
        with Tensor.train():
            optimizer.zero_grad()
            loss = (x @ w).square().mean()
            loss.backward()
            optimizer.step()
        return loss.realize()

    for _ in range(5):
        step(x)
        np.testing.assert_allclose(evaluate(x).numpy(), x.numpy() @ w.numpy(), rtol=1e-5)
    assert step.calls == 2


# ---- arguments that are no tensors, and tensors inside lists -----------------------------------


def test_another_number_or_flag_captures_again():
    """Once a silent stale result: a replay ran the kernels with the captured call's number."""
    x = Tensor(np.ones(4, np.float32)).realize()
    scaled = TinyJit(lambda x, s: (x * s).realize())
    for s in (2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0):
        assert scaled(x, s).tolist() == [s] * 4
    assert scaled.calls == 2  # the new number captured once, then replayed
    shifted = TinyJit(lambda x, up=False: (x + 1 if up else x - 1).realize())
    for up in (False, False, False, True, 1):  # True and 1 are kept apart by type
        assert shifted(x, up=up).tolist() == [2.0 if up else 0.0] * 4


def test_the_same_object_argument_replays():
    class Scale:
        factor = 3.0

    x, scale = Tensor(np.ones(2, np.float32)).realize(), Scale()
    f = TinyJit(lambda x, scale: (x * scale.factor).realize())
    for _ in range(4):
        assert f(x, scale).tolist() == [3.0, 3.0]
    assert f.calls == 2


def test_tensors_inside_lists_and_dicts_are_inputs():
    f = TinyJit(lambda pair, extra: (pair[0] + pair[1] * extra["w"]).realize())
    for i in range(5):
        a, b = Tensor([float(i)]), Tensor([1.0])
        assert f([a, b], {"w": Tensor([2.0])}).tolist() == [i + 2.0]
    assert f.calls == 2
