"""VIZ (``fusegrad/viz``): the recorder keeps every stage of every kernel and each realize's
schedule, costs nothing when off, writes a trace that ``fusegrad viz`` serves, and the page
shows it in a real browser (headless Chromium through Playwright)."""

from __future__ import annotations

import gc
import json
import linecache
import os
import pty
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import weakref
import zipfile
from pathlib import Path

import numpy as np
import pytest

import fusegrad
from fusegrad import Tensor
from fusegrad.__main__ import main
from fusegrad.codegen.kernel import DECOMPOSITION, SIMPLIFICATION
from fusegrad.engine import realize
from fusegrad.errors import FileFormatError, InvalidValue
from fusegrad.schedule.kernelize import Plan
from fusegrad.uop import pattern, symbolic
from fusegrad.viz import recorder, recording, server

ROOT = Path(__file__).resolve().parents[2]
#: where a test saves what a person should see (the page's screenshots), when set
ARTEFACTS = "FUSEGRAD_TEST_ARTEFACTS"
#: set to 1 to refresh docs/viz.md's screenshots from the browser test
UPDATE_DOCS = "FUSEGRAD_UPDATE_DOC_IMAGES"


def _programs() -> dict[str, int]:
    """Kernel name -> UOps of its linear program, for every kernel compiled in this process."""
    return {r.kernel.name: len(r.kernel.program) for r in realize._runners.values()}


def _record_matmul() -> tuple[dict, dict[str, int]]:
    fusegrad.reset_caches()
    with recording() as trace:
        a = Tensor.arange(16).reshape(4, 4).float().contiguous().realize()
        (a @ a).sum(1).tolist()
    return trace.to_json(), _programs()


def test_every_stage_of_a_kernel_is_recorded():
    data, programs = _record_matmul()
    by_name = {k["name"]: k for k in data["kernels"]}
    assert set(by_name) == set(programs)
    for name, k in by_name.items():
        titles = [s["title"] for s in k["stages"]]
        assert titles[:4] == ["kernel AST", "lowered", SIMPLIFICATION, DECOMPOSITION]
        assert titles[-1] == "linear program"
        assert len(k["stages"][-1]["ids"]) == programs[name]  # the program, node for node
        for stage in k["stages"]:  # every source of a node is a node listed before it
            seen: set[int] = set()
            for i in stage["ids"]:
                assert all(s in seen for s in k["nodes"][i][3])
                seen.add(i)
        assert "rules" in k["stages"][2] and "rules" not in k["stages"][1]
        assert k["source"].startswith("#include") and f"void {name}(" in k["source"]
    reduce = next(k for name, k in by_name.items() if name.startswith("r_4_4_"))
    assert "loops" in reduce["choices"]
    # the rewrite stage changed the lowered graph, and the rules that did it are named
    lowered, simplified = (set(s["ids"]) for s in reduce["stages"][1:3])
    assert simplified - lowered and reduce["stages"][2]["rules"]


def test_source_lines_link_to_program_uops():
    data, _ = _record_matmul()
    for k in data["kernels"]:
        program = set(k["stages"][-1]["ids"])
        lines = k["source"].split("\n")
        assert k["lines"] and all(i in program for i in k["lines"].values())
        written: dict[int, list[str]] = {}
        for number, uop in k["lines"].items():
            written.setdefault(uop, []).append(lines[int(number) - 1].strip())
        for uop, texts in written.items():
            op = k["nodes"][uop][0]
            if op == "STORE":
                assert texts == [texts[0]] and " = " in texts[0] and texts[0].endswith(";")
            if op == "RANGE":  # its loop, after any pragmas
                assert texts[-1].startswith("for (") and texts[-1].endswith("{")


def test_wgsl_source_lines_link_to_program_uops():
    """The WebGPU renderer says which op wrote each line of its kernel's body."""
    wgsl = pytest.importorskip("fusegrad_webgpu.renderer")
    from fusegrad.codegen.kernel import generate

    x = Tensor.arange(16).reshape(4, 4).float().contiguous().realize()
    (step,) = x.sum(1).schedule()
    with recording() as trace:
        generate(step.ast, wgsl.WGSLRenderer("WEBGPU", frozenset(), None, "Test Adapter"))
    (k,) = trace.to_json()["kernels"]
    assert k["renderer"] == "WGSLRenderer" and k["lines"]
    assert set(k["lines"].values()) <= set(k["stages"][-1]["ids"])
    lines = k["source"].split("\n")
    texts = {k["nodes"][u][0]: lines[int(n) - 1].strip() for n, u in k["lines"].items()}
    assert texts["RANGE"].startswith("for (") and "data0[" in texts["STORE"]


def test_each_realize_records_its_schedule_and_reuses_the_plan():
    fusegrad.reset_caches()
    with recording() as trace:
        for _ in range(3):
            x = Tensor.ones(8).contiguous().realize()
            (x * 2 + x.sum()).tolist()
    data = trace.to_json()
    assert len(data["realizes"]) == 6 and len(data["plans"]) == 2  # each structure once
    assert sorted(p["realizes"] for p in data["plans"]) == [3, 3]
    two = next(p for p in data["plans"] if len(p["steps"]) == 2)
    first, second = two["steps"]
    assert first["reason"] and first["writes"] and second["reads"]
    # the first kernel writes the slot the second reads
    assert first["writes"][0][0] in [s for s, _ in second["reads"]]
    assert all(s["kernel"] >= 0 for s in two["steps"])
    shapes = [row[4] for row in two["graph"]["nodes"]]
    assert "(8,)" in shapes
    # launch times come from the profile taken alongside, per kernel and per realize step
    for k in data["kernels"]:
        assert k["launches"] == 3 and k["launch_ms"] > 0 and k["compile_ms"] > 0
    assert all(ms is not None and ms > 0 for r in data["realizes"] for ms in r["step_ms"])


def test_nothing_is_recorded_or_called_when_off(monkeypatch):
    def called(*args, **kwargs):
        raise AssertionError("a VIZ hook ran with VIZ off")

    for hook in ("stage", "choices", "rendered", "planned"):
        monkeypatch.setattr(recorder.Trace, hook, called)
    # rule firings: graph_rewrite takes the matcher's plain rewrite, never the noting one
    monkeypatch.setattr(pattern.PatternMatcher, "rewrite_noting", called)
    monkeypatch.setattr(pattern.Fired, "note", called)
    assert recorder.ACTIVE is None
    fusegrad.reset_caches()
    idle = recorder.Trace()
    assert (Tensor([1.0, 2.0]).exp() * 3).sum().item() == pytest.approx(
        3 * (2.718281828 + 7.389056)
    )
    assert idle.to_json()["kernels"] == [] and idle.to_json()["plans"] == []


def _record_add_zero_mul_one() -> dict:
    """The trace of one kernel whose simplification removes ``+ 0`` and then ``* 1``: two
    rule firings."""
    fusegrad.reset_caches()
    with recording() as trace:
        ((Tensor([1.0, 2.0, 3.0, 4.0]) + 0) * 1 + 2).tolist()
    return trace.to_json()


def _rule_comment(place: str) -> str:
    """The comment on a rule's table row in ``uop/symbolic.py`` (``file.py:line``)."""
    file, line = place.split(":")
    assert file == "symbolic.py"
    return linecache.getline(symbolic.__file__, int(line)).split("#")[-1].strip()


def test_each_rule_firing_of_a_stage_is_recorded_with_its_nodes():
    (kernel,) = _record_add_zero_mul_one()["kernels"]
    nodes = kernel["nodes"]
    stage = next(s for s in kernel["stages"] if s["title"] == SIMPLIFICATION)
    firings = stage["firings"]
    assert firings["total"] == 2 and firings["kept"] == recorder.FIRINGS_KEPT
    rules = [firings["rules"][r] for r, _, _ in firings["steps"]]
    assert [_rule_comment(place) for _, place in rules] == ["x + 0 -> x", "x * 1 -> x"]
    assert all(name == place for name, place in rules)  # lambdas are named by their place
    (_, add, load), (_, mul, load_again) = firings["steps"]
    assert load == load_again and nodes[load][0] == "LOAD"
    # the ADD of the stage's first graph; the MUL exists only between the first and the last
    assert nodes[add][0] == "ADD" and load in nodes[add][3] and add in kernel["stages"][1]["ids"]
    assert nodes[mul][0] == "MUL" and nodes[mul][3][0] == load
    assert not any(mul in s["ids"] for s in kernel["stages"])
    assert all(src < i for i, row in enumerate(nodes) for src in row[3])  # sources first
    assert sum(n for _, n in stage["rules"]) == 2


def test_rule_firings_are_kept_up_to_the_cap(monkeypatch):
    monkeypatch.setattr(recorder, "FIRINGS_KEPT", 1)
    stage = next(
        s
        for s in _record_add_zero_mul_one()["kernels"][0]["stages"]
        if s["title"] == SIMPLIFICATION
    )
    assert len(stage["firings"]["steps"]) == 1 and stage["firings"]["total"] == 2


def test_firings_kept_per_stage_come_from_viz_firings():
    assert recorder.firings_kept({}) == recorder.DEFAULT_FIRINGS == 20_000
    assert recorder.firings_kept({"VIZ_FIRINGS": "50"}) == 50
    for bad in ("0", "-3", "many"):
        with pytest.raises(InvalidValue, match="VIZ_FIRINGS"):
            recorder.firings_kept({"VIZ_FIRINGS": bad})


def test_the_emulations_of_the_decomposition_stage_are_recorded_as_firings():
    """On the CPU a float16 kernel is rewritten by the float emulation (no pattern table):
    each node it changed is a firing of ``emulated_float``, the half load among them."""
    fusegrad.reset_caches()
    x = Tensor(np.ones(8, np.float16), device="CPU").realize()
    with recording() as trace:
        (x * 2).tolist()
    (kernel,) = trace.to_json()["kernels"]
    stage = next(s for s in kernel["stages"] if s["title"] == DECOMPOSITION)
    assert dict(stage["rules"]).get("emulated_float", 0) >= 3  # param, load, mul, store...
    names = [stage["firings"]["rules"][r][0] for r, _, _ in stage["firings"]["steps"]]
    assert set(names) == {"emulated_float"}
    nodes = kernel["nodes"]
    replaced = {nodes[node][0] for _, node, _ in stage["firings"]["steps"]}
    assert {"LOAD", "MUL", "STORE"} <= replaced


def test_a_plan_that_dies_is_not_kept_alive_by_the_trace():
    """A long VIZ run keeps each plan's record, not the plan: its id may be the next plan's."""
    trace = recorder.Trace()
    roots = [Tensor([1.0, 2.0]).uop]
    plan = Plan([], [], [], 0)
    trace.planned(roots, plan, [])
    trace.planned(roots, plan, [])
    alive = weakref.ref(plan)
    del plan
    gc.collect()
    assert alive() is None and not trace._live
    (record,) = trace.plans
    assert record.realizes == 2 and len(trace.to_json()["plans"]) == 1


def _record_jit_replays(calls: int = 5) -> dict:
    fusegrad.reset_caches()

    @fusegrad.TinyJit
    def step(x: Tensor) -> Tensor:
        return (x * 2 + 1).sum().realize()

    with recording() as trace:
        for i in range(calls):
            step(Tensor([1.0, 2.0, float(i)]).realize())
    return trace.to_json()


def test_tinyjit_replays_are_entries_with_their_launches():
    data = _record_jit_replays()
    (kernel,) = data["kernels"]
    replays = data["replays"]
    assert len(replays) == 3  # the first call runs, the second captures, the rest replay
    for replay in replays:
        assert replay["name"] == "step" and replay["ms"] > 0
        ((index, name, ms),) = replay["launches"]
        assert index == 0 and name == kernel["name"] and 0 < ms <= replay["ms"]
    # a kernel's runs: those of its two realizes, and those of the replays
    assert kernel["launches"] == 5


def test_a_recording_ends_with_its_block():
    with recording() as outer:
        with recording() as inner:
            assert recorder.ACTIVE is inner
        assert recorder.ACTIVE is outer
    assert recorder.ACTIVE is None


def test_trace_files_load_and_bad_ones_say_why(tmp_path):
    data, _ = _record_matmul()
    path = server.write(data, tmp_path / "t.json")
    assert server.load(path) == json.loads(Path(path).read_text())
    chrome = tmp_path / "profile.json"  # a profiler's trace opens as a timeline
    chrome.write_text(json.dumps({"traceEvents": data["profile"]}))
    assert server.load(chrome)["profile"] == data["profile"]
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(FileFormatError, match="is not a JSON trace"):
        server.load(tmp_path / "bad.json")
    (tmp_path / "old.json").write_text(json.dumps({"format": "fusegrad-viz", "version": 0}))
    with pytest.raises(FileFormatError, match="record it again"):
        server.load(tmp_path / "old.json")
    with pytest.raises(FileFormatError, match="run a program with VIZ=1"):
        server.load(tmp_path / "missing.json")


def test_served_page_and_trace(tmp_path):
    data, _ = _record_matmul()
    srv = server.start_server(data)
    try:
        url = server.url_of(srv)
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url + "trace.json") as r:
            assert json.loads(r.read()) == json.loads(json.dumps(data))
        with urllib.request.urlopen(url) as r:
            assert b"viz.js" in r.read()
        with urllib.request.urlopen(url + "vendor/dagre.min.js") as r:
            assert b"dagre" in r.read()
    finally:
        srv.shutdown()


#: a small training step: a two-layer MLP, its loss, backward and one SGD step
TRAINING_STEP = """
import json
from fusegrad import Tensor, nn
from fusegrad.engine import realize
from fusegrad.errors import InvalidValue
Tensor.manual_seed(0)
l1, l2 = nn.Linear(8, 16), nn.Linear(16, 4)
opt = nn.optim.SGD([l1.weight, l1.bias, l2.weight, l2.bias], lr=0.1)
x, y = Tensor.randn(32, 8), Tensor.randn(32, 4)
with Tensor.train():
    loss = ((l2(l1(x).relu()) - y) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(loss.item())
print(json.dumps({r.kernel.name: len(r.kernel.program) for r in realize._runners.values()}))
"""


def run_training_step(folder: Path) -> tuple[Path, dict[str, int], str]:
    """Run ``TRAINING_STEP`` with ``VIZ=1`` in a fresh process (not at a terminal: it writes the
    trace and says how to view it); its trace, its kernels' program sizes and its stderr."""
    path = folder / "trace.json"
    env = {**os.environ, "VIZ": "1", "VIZ_NO_OPEN": "1", "VIZ_PATH": str(path)}
    env.pop("PROFILE", None)
    done = subprocess.run(
        [sys.executable, "-c", TRAINING_STEP],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return path, json.loads(done.stdout.splitlines()[-1]), done.stderr


def test_viz_env_writes_the_trace_at_exit(tmp_path):
    path, programs, stderr = run_training_step(tmp_path)
    assert f"VIZ trace written to {path}" in stderr
    assert f"fusegrad viz {path}" in stderr  # not at a terminal: how to view it, no server
    data = server.load(path)
    assert {k["name"] for k in data["kernels"]} == set(programs)
    assert data["realizes"] and data["profile"]


def test_viz_env_at_a_terminal_serves_until_ctrl_c(tmp_path):
    """At a terminal the program's end serves the page (no browser: VIZ_NO_OPEN=1) until
    Ctrl-C, and then exits cleanly."""
    path = tmp_path / "trace.json"
    env = {**os.environ, "VIZ": "1", "VIZ_NO_OPEN": "1", "VIZ_PATH": str(path)}
    program = "from fusegrad import Tensor; print((Tensor([1.0, 2.0]) * 2).tolist())"
    terminal, stdin = pty.openpty()
    child = subprocess.Popen(
        [sys.executable, "-c", program], env=env, stdin=stdin, stderr=subprocess.PIPE, text=True
    )
    os.close(stdin)
    try:
        assert child.stderr is not None
        lines = [child.stderr.readline() for _ in range(2)]
        assert lines[0].startswith(f"fusegrad: VIZ trace written to {path}")
        url = re.search(r"serving on (http://127\.0\.0\.1:\d+/)", lines[1]).group(1)  # type: ignore[union-attr]
        with urllib.request.urlopen(url + "trace.json", timeout=30) as r:
            assert json.loads(r.read())["kernels"][0]["name"] == "E_2"
        child.send_signal(signal.SIGINT)
        assert child.wait(timeout=60) == 0
    finally:
        child.kill()
        os.close(terminal)


def test_viz_command_refuses_a_missing_trace(tmp_path, capsys):
    assert main(["viz", str(tmp_path / "none.json")]) == 1
    assert "no VIZ trace at" in capsys.readouterr().err


def _save(shot: bytes, name: str) -> None:
    """A screenshot for a person: into the test artefacts, and docs/images when asked."""
    assert shot.startswith(b"\x89PNG")
    for folder in (os.environ.get(ARTEFACTS), os.environ.get(UPDATE_DOCS) and ROOT / "docs/images"):
        if folder:
            os.makedirs(folder, exist_ok=True)
            Path(folder, name).write_bytes(shot)


def _chromium() -> str:
    sync_api = pytest.importorskip("playwright.sync_api")
    del sync_api
    found = next(
        (p for n in ("chromium", "chromium-browser", "google-chrome") if (p := shutil.which(n))),
        None,
    )
    if found is None:
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    return found


def test_the_page_in_chromium(tmp_path):
    _chromium()  # (skips before the training step where there is no chromium)
    path, programs, _ = run_training_step(tmp_path)
    data = server.load(path)
    _open_page(data, lambda page: drive_page(page, data, programs))


def node_count(page) -> int:
    return page.locator("#graph g.node").count()


def drive_page(page, data: dict, programs: dict[str, int]) -> None:
    """The kernel list, a graph node for node, the stepper, search, a node's details."""
    page.wait_for_selector("#graph g.node")
    rows = page.locator("#kernels tr.row")
    assert rows.count() == len(data["kernels"]) == len(programs) > 3
    # the biggest kernel that still draws whole: its graph has one node per UOp of its program
    order = sorted(range(len(data["kernels"])), key=lambda i: -programs[data["kernels"][i]["name"]])
    index = next(i for i in order if programs[data["kernels"][i]["name"]] <= 400)
    kernel = data["kernels"][index]
    rows.nth(index).click()
    assert page.inner_text("#kernel-name") == kernel["name"]
    assert node_count(page) == programs[kernel["name"]]
    _save(page.screenshot(), "viz-kernel.png")
    # the stepper walks back through every stage, each drawn whole, then forward again
    stages = kernel["stages"]
    for s in reversed(range(len(stages) - 1)):
        page.click("#prev")
        assert page.get_attribute("#stage-title", "data-stage") == str(s)
        assert node_count(page) == len(stages[s]["ids"])
        assert stages[s]["title"] in page.inner_text("#stage-title")
    assert page.is_disabled("#prev")
    page.click("#next")
    page.click("#next")  # lowered -> simplified: a stage that changes the graph
    new = set(stages[2]["ids"]) - set(stages[1]["ids"])
    assert page.locator("#graph g.node.new").count() == len(new) > 0
    page.click("[data-side=diff]")
    diff = page.inner_text("#diff")
    assert f"{len(new)} added" in diff and "+ %" in diff
    _save(page.screenshot(), "viz-stages.png")
    # a node's details, and the source line that links to it
    page.click("#next")
    while not page.is_disabled("#next"):
        page.click("#next")
    page.click("[data-side=source]")
    page.locator("#source .line.linked").first.click()
    assert "sources" in page.inner_text("#node") and page.locator("g.node.selected").count() == 1
    # search: a kernel by part of its name, then an op
    other = data["kernels"][order[-1]]["name"]
    page.fill("#search", other[2:])
    assert page.locator("#results div").filter(has_text=other).count() >= 1
    page.press("#search", "Enter")
    assert page.inner_text("#kernel-name") == other
    page.fill("#search", "store")
    assert page.locator("#results div").filter(has_text="STORE").count() == len(data["kernels"])
    page.locator("#results div").first.click()
    assert page.locator("#graph g.node.match").count() >= 1
    # a realize: its schedule and its tensor graph
    page.click("[data-tab=realizes]")
    page.locator("#realizes tr.row").first.click()
    assert "why the graph was cut here" in page.inner_text("#head")
    assert node_count(page) == min(400, len(data["plans"][0]["graph"]["ids"]))
    _save(page.screenshot(), "viz-realize.png")
    page.click("[data-tab=timeline]")
    assert page.locator("#timeline .bar").count() > 0


def _open_page(data: dict, drive) -> None:
    """Serve ``data`` and let ``drive(page)`` work the page in headless Chromium; no errors."""
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    srv = server.start_server(data)
    errors: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1500, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(server.url_of(srv))
            page.wait_for_selector("#graph g.node")
            drive(page)
            browser.close()
    finally:
        srv.shutdown()
    assert errors == []


def _marked(page, cls: str) -> list[int]:
    return [
        int(i)
        for i in page.locator(f"#graph g.node.{cls}").evaluate_all(
            "els => els.map(e => e.dataset.id)"
        )
    ]


def test_the_page_steps_through_a_stages_rule_firings():
    data = _record_add_zero_mul_one()
    (kernel,) = data["kernels"]
    simplified = next(i for i, s in enumerate(kernel["stages"]) if s["title"] == SIMPLIFICATION)
    steps = kernel["stages"][simplified]["firings"]["steps"]

    def drive(page):
        while page.get_attribute("#stage-title", "data-stage") != str(simplified):
            page.keyboard.press("ArrowLeft")
        assert not page.is_hidden("#firing-stepper")
        assert page.get_attribute("#firing-title", "data-firing") == "-1"
        for i, (_, node, replacement) in enumerate(steps):
            page.keyboard.press("Shift+ArrowRight")
            assert page.get_attribute("#firing-title", "data-firing") == str(i)
            assert _marked(page, "replaced") == [node] and _marked(page, "replacement") == [
                replacement
            ]
            assert "symbolic.py:" in page.inner_text("#firing-info")
            if i == 0:
                _save(page.screenshot(), "viz-firing.png")
        assert page.is_disabled("#fnext")
        page.click("#fprev")
        assert page.get_attribute("#firing-title", "data-firing") == str(len(steps) - 2)
        page.keyboard.press("Escape")  # back to the whole stage, drawn whole
        assert page.get_attribute("#firing-title", "data-firing") == "-1"
        assert node_count(page) == len(kernel["stages"][simplified]["ids"])
        assert _marked(page, "replaced") == []
        page.keyboard.press("ArrowRight")  # the stage stepper still works; no firings there
        assert page.get_attribute("#stage-title", "data-stage") == str(simplified + 1)

    _open_page(data, drive)


def test_the_page_lists_tinyjit_replays():
    data = _record_jit_replays()

    def drive(page):
        page.click("[data-tab=realizes]")
        assert page.locator("#replays tr.row").count() == 3
        page.locator("#replays tr.row").nth(1).click()
        assert "TinyJit replay of step: 1 launches" in page.inner_text("#replay-name")
        page.locator("#head a[data-kernel]").first.click()
        assert page.inner_text("#kernel-name") == data["kernels"][0]["name"]

    _open_page(data, drive)


def big_trace(n: int = 20000) -> dict:
    """A kernel of ``n`` UOps in two stages (a long sum of loads), as the recorder writes one."""
    nodes: list[list] = [["PARAM", "float32", "(1, 20000)", []]]
    nodes += [["CONST", "int32", str(i), []] for i in range(n // 4)]
    loads = []
    for i in range(n // 4):
        nodes.append(["INDEX", "float32", "", [0, 1 + i]])
        nodes.append(["LOAD", "float32", "", [len(nodes) - 1]])
        loads.append(len(nodes) - 1)
    acc = loads[0]
    for load in loads[1:]:
        nodes.append(["ADD", "float32", "", [acc, load]])
        acc = len(nodes) - 1
    nodes.append(["STORE", "void", "", [acc]])
    first = list(range(len(nodes)))
    nodes.append(["STORE", "void", "", [loads[0]]])  # the second stage swaps the store
    second = first[:-1] + [len(nodes) - 1]
    firings = {
        "rules": [["swap_store", "rules.py:1"]],
        "steps": [[0, len(nodes) - 2, len(nodes) - 1]],  # the first store -> the second
        "total": 2500,  # as if the recorder had cut them (at 1, for the test)
        "kept": 1,
    }
    stages = [
        {"title": "kernel AST", "linear": False, "ids": first, "ms": 1.0},
        {"title": "rewritten", "linear": False, "ids": second, "ms": 1.0, "rules": [["r", 1]]},
    ]
    stages[1]["firings"] = firings
    kernel = {"name": "E_big", "renderer": "", "nodes": nodes, "stages": stages, "choices": {}}
    kernel.update(source="", lines={})
    return {
        "format": "fusegrad-viz",
        "version": 1,
        "kernels": [kernel],
        "plans": [],
        "realizes": [],
    }


def test_a_graph_of_20000_uops_stays_small_on_the_page():
    executable = _chromium()
    from playwright.sync_api import sync_playwright

    data = big_trace()
    total = len(data["kernels"][0]["stages"][1]["ids"])
    srv = server.start_server(data)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1500, "height": 900})
            start = time.perf_counter()
            page.goto(server.url_of(srv))
            page.wait_for_selector("#graph g.node")
            print(f"a {total}-UOp kernel's page drawn in {time.perf_counter() - start:.2f} s")
            _save(page.screenshot(), "viz-20000-uops.png")
            assert node_count(page) == 400
            assert f"showing 400 of {total} UOps" in page.inner_text("#graph-note")
            page.locator("[data-expand]").first.dispatch_event("click")  # "+" brings in sources
            assert node_count(page) > 400
            assert "1 added, 1 removed" in page.inner_text("#diff")  # the swapped store
            start = time.perf_counter()
            page.keyboard.press("Shift+ArrowRight")  # its one rule firing: a neighbourhood
            assert page.get_attribute("#firing-title", "data-firing") == "0"
            print(f"its rule firing drawn in {time.perf_counter() - start:.2f} s")
            assert 2 <= node_count(page) <= 40
            assert _marked(page, "replaced") == [len(data["kernels"][0]["nodes"]) - 2]
            assert "the first 1 of 2500 kept: VIZ keeps 1 per stage" in page.inner_text(
                "#firing-info"
            )
            page.keyboard.press("Escape")
            page.click("#prev")
            assert page.get_attribute("#stage-title", "data-stage") == "0"
            browser.close()
    finally:
        srv.shutdown()


def test_the_wheel_ships_the_page(tmp_path):
    """The page's files (and the layout library's licences) are package data of the wheel."""
    pytest.importorskip("hatchling")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", tmp_path]
        + [str(ROOT / "core")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("fusegrad-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    static = "fusegrad/viz/static/"
    for name in ("index.html", "viz.js", "viz.css", "vendor/dagre.min.js", "vendor/LICENSE-dagre"):
        assert static + name in names
