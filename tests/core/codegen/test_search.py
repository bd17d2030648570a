"""BEAM search: candidates are timed, the winner is cached on disk and reused."""

from __future__ import annotations

import numpy as np

from fusegrad import Device, Tensor
from fusegrad.codegen import search
from fusegrad.codegen.opt import heuristic_opts


def _matmul_ast():
    x, w = Tensor.rand(64, 32, device="CPU"), Tensor.rand(32, 48, device="CPU")
    return (x @ w).schedule()[0].ast, x, w


def test_beam_picks_a_timed_candidate_and_caches_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEGRAD_CACHE", str(tmp_path))
    ast, _, _ = _matmul_ast()
    timed = []
    real_time = search._time
    monkeypatch.setattr(
        search, "_time", lambda k, *a, **kw: timed.append(k.opts) or real_time(k, *a, **kw)
    )
    best = search.beam_search(ast, Device["CPU"], "CPU", width=2)
    assert heuristic_opts(ast, Device["CPU"].renderer) in timed  # the default is always a candidate
    assert best in timed and len(timed) > 3
    assert list((tmp_path / "beam").glob("*.json"))
    timed.clear()
    assert search.beam_search(ast, Device["CPU"], "CPU", width=2) == best
    assert timed == []  # the second search is a cache read


def test_kernels_from_every_candidate_compute_the_same(tmp_path, monkeypatch):
    from fusegrad.codegen.kernel import generate

    ast, x, w = _matmul_ast()
    expected = x.numpy() @ w.numpy()
    rt = Device["CPU"]
    for opts in [
        heuristic_opts(ast, Device["CPU"].renderer),
        *search._neighbours(heuristic_opts(ast, Device["CPU"].renderer), ast),
    ][:8]:
        kernel = generate(ast, rt.renderer, rt.rules, opts)
        program = rt.program(kernel.name, rt.compiler.compile_cached(kernel.source))
        out = np.zeros(64 * 48, np.float32)
        out_t = Tensor(out)
        program(out_t._buffer().handle, x._buffer().handle, w._buffer().handle, global_size=None)
        np.testing.assert_allclose(out_t._buffer().numpy().reshape(64, 48), expected, rtol=1e-5)


def test_a_far_slower_candidate_is_timed_once(monkeypatch):
    """Past ``give_up`` the warm-up's time is the answer: no repeats."""
    ast, _, _ = _matmul_ast()
    rt = Device["CPU"]
    from fusegrad.codegen.kernel import generate

    kernel = generate(ast, rt.renderer, rt.rules, heuristic_opts(ast, Device["CPU"].renderer))
    calls = []
    real_program = rt.program

    def counting(name, binary):
        program = real_program(name, binary)
        return lambda *a, **kw: calls.append(1) or program(*a, **kw)

    monkeypatch.setattr(rt, "program", counting)
    search._time(kernel, rt, "CPU", ast, give_up=0.0)
    assert len(calls) == 1
    calls.clear()
    search._time(kernel, rt, "CPU", ast)
    assert len(calls) == 1 + search.REPEATS


def test_a_cached_plan_loads_as_it_was_saved(tmp_path):
    """Every kind of plan BEAM can pick comes back from its cache file whole (a staged tile
    plan once came back unstaged)."""
    from fusegrad.codegen.tiled import Tiles

    for plan in (Tiles(1, 2, (8, 8), (4, 2), False, 16), Tiles(0, 1), None):
        path = str(tmp_path / "plan.json")
        search._save(path, plan)
        assert search._load(path) == plan
