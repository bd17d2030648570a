"""The profiler (``fusegrad/profiler.py``): a valid Chrome trace, kernel times that add up to
the time the kernels took, and nothing recorded or waited for when it is off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from numbers import Real
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import fusegrad
from fusegrad import Tensor, TinyJit, profiler
from fusegrad.engine import realize

#: what the trace event format requires of each phase used here, beyond name/ph/pid/tid
REQUIRED = {"X": ("ts", "dur"), "M": ("args",)}
METADATA_NAMES = ("process_name", "thread_name", "process_sort_index", "thread_sort_index")


def check_trace(trace: Any) -> list[dict[str, Any]]:
    """Assert ``trace`` is a JSON object in the Chrome trace event format; its complete events.

    Checked: the ``traceEvents`` list; per event the common keys and their types; per phase its
    required keys, numeric non-negative ``ts``/``dur``, object ``args``; metadata events naming a
    process or thread by a string; and every track an event lands on named by metadata."""
    assert isinstance(trace, dict) and isinstance(trace.get("traceEvents"), list)
    named_processes, named_threads, spans = set(), set(), []
    for event in trace["traceEvents"]:
        assert isinstance(event, dict), event
        assert isinstance(event.get("name"), str) and event["name"], event
        assert event.get("ph") in REQUIRED, f"unexpected phase in {event}"
        assert isinstance(event.get("pid"), int) and isinstance(event.get("tid"), int), event
        for key in REQUIRED[event["ph"]]:
            assert key in event, f"{event['ph']} event without {key}: {event}"
        if "args" in event:
            assert isinstance(event["args"], dict), event
        if event["ph"] == "M":
            assert event["name"] in METADATA_NAMES, event
            assert isinstance(event["args"].get("name"), str), event
            if event["name"] == "process_name":
                named_processes.add(event["pid"])
            else:
                named_threads.add((event["pid"], event["tid"]))
        else:
            for key in ("ts", "dur"):
                value = event[key]
                assert isinstance(value, Real) and not isinstance(value, bool), event
                assert value >= 0, f"negative {key} in {event}"
            assert isinstance(event.get("cat", ""), str), event
            spans.append(event)
    for event in spans:
        assert event["pid"] in named_processes, f"process of {event} has no process_name"
        assert (event["pid"], event["tid"]) in named_threads, f"thread of {event} has no name"
    return spans


def track_names(trace: dict[str, Any]) -> dict[tuple[int, int], tuple[str, str]]:
    """(pid, tid) -> (process name, thread name), from the metadata events."""
    processes = {
        e["pid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name"
    }
    return {
        (e["pid"], e["tid"]): (processes[e["pid"]], e["args"]["name"])
        for e in trace["traceEvents"]
        if e["name"] == "thread_name"
    }


def test_trace_validates_and_has_every_track(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    step = TinyJit(lambda x: (x @ x + 1).realize())
    x = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8) / 64, device="CPU")
    with fusegrad.profile(path):
        for _ in range(4):  # a first call, a capture, two replays
            out = step(x)
        values = out.numpy()
    np.testing.assert_allclose(values, (x.numpy() @ x.numpy()) + 1, rtol=1e-5)
    trace = json.loads(path.read_text())
    spans = check_trace(trace)
    tracks = track_names(trace)
    by_category: dict[str, list[dict[str, Any]]] = {}
    for event in spans:
        by_category.setdefault(event["cat"], []).append(event)
    kernels = by_category["kernel"]
    assert {tracks[(e["pid"], e["tid"])] for e in kernels} == {("CPU", "kernels")}
    matmul = [e for e in kernels if e["args"]["FLOPs"] > 0]
    assert len(matmul) >= 4  # each call launched it, replays included
    assert {"name", "global size", "GFLOP/s", "GB/s", "bytes"} <= set(matmul[0]["args"])
    assert {tracks[(e["pid"], e["tid"])] for e in by_category["copy"]} == {("CPU", "copies")}
    assert any(e["name"].startswith("copyout") for e in by_category["copy"])
    assert {tracks[(e["pid"], e["tid"])][0] for e in by_category["schedule"]} == {"fusegrad (host)"}
    jit = [e["name"] for e in by_category["jit"]]
    assert jit == [f"TinyJit {p} <lambda>" for p in ("first call", "capture", "replay", "replay")]


def test_compiles_are_traced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FUSEGRAD_DISABLE_CACHE", "1")
    fusegrad.reset_caches()
    with fusegrad.profile() as p:
        # a shape no other test uses, so that its kernels are new to this process
        Tensor.ones(3, 7, 11, device="CPU").sum(axis=1).exp().realize()
    compiles = [e for e in p.events if e.get("cat") == "compile"]
    assert compiles and all(e["args"]["device"] == "CPU" for e in compiles)
    assert sum(len(e["args"]["kernels"]) for e in compiles) >= 1
    assert any(e.get("cat") == "codegen" for e in p.events)


def test_kernel_durations_add_up_to_the_wall_time() -> None:
    """The kernel events of a realize of large kernels cover its wall time within 10%.

    The machine is shared and noisy: of several realizes the one whose times agree best counts
    (preemption between two kernels only makes the wall time longer)."""
    a = Tensor(np.random.default_rng(0).random((1024, 1024), dtype=np.float32), device="CPU")

    def graph() -> Tensor:
        h = (a @ a).relu()
        return (h @ a + h).sqrt()

    graph().realize()  # compiles, plans
    ratios = []
    with fusegrad.profile() as p:
        for _ in range(5):
            before = len(p.events)
            start = time.perf_counter()
            graph().realize()
            wall = time.perf_counter() - start
            kernels = [e for e in p.events[before:] if e.get("cat") == "kernel"]
            assert len(kernels) >= 2
            ratios.append(sum(e["dur"] for e in kernels) * 1e-6 / wall)
    assert max(ratios) <= 1.0 + 1e-6, ratios  # kernels run inside the realize, one at a time
    assert max(ratios) >= 0.9, f"kernel time / wall time per realize: {ratios}"


def test_profile_env_writes_the_trace_at_exit(tmp_path: Path) -> None:
    path = tmp_path / "env-trace.json"
    script = "from fusegrad import Tensor; print((Tensor([1.0, 2.0], device='CPU') + 1).tolist())"
    env = {**os.environ, "PROFILE": "1", "PROFILE_PATH": str(path)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[2.0, 3.0]"
    assert f"profile written to {path}" in done.stderr
    spans = check_trace(json.loads(path.read_text()))
    assert any(e["cat"] == "kernel" for e in spans)


def test_off_records_nothing_and_launches_without_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off (the default), a launch is the plain one: no waiting, no event, no profiler made."""
    assert profiler.ACTIVE is None
    waits: list[bool] = []
    launch = realize.Runner.__call__

    def spy(self: realize.Runner, handles: list[Any], wait: bool = False, vals: Any = ()) -> Any:
        waits.append(wait)
        return launch(self, handles, wait, vals)

    x = Tensor([1.0, 2.0, 3.0], device="CPU")
    (x * 5).realize()  # compiled before the spy
    monkeypatch.setattr(realize.Runner, "__call__", spy)
    assert (x * 5).tolist() == [5.0, 10.0, 15.0]
    with fusegrad.profile() as p:
        assert (x * 5).tolist() == [5.0, 10.0, 15.0]
    assert (x * 5).tolist() == [5.0, 10.0, 15.0]
    assert waits == [False, True, False]
    assert profiler.ACTIVE is None
    assert len([e for e in p.events if e.get("cat") == "kernel"]) == 1
