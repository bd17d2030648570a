"""The VIZ recorder: what the compiler did, kept as plain data for the viewer (``viz/static``).

While a ``Trace`` is ``ACTIVE``, the compiler reports to it:

- each realize's plan (``engine/realize.py``): the tensor graph, its kernels, the buffers
  (slots) each writes and reads, and why the scheduler cut the graph there;
- each kernel it generates (``codegen/kernel.py``): every stage's graph (the kernel AST,
  lowered, each rewriting stage with the rules that fired, the linear program), each rule
  firing of a rewriting stage (the node replaced and its replacement, up to ``firings_kept``),
  the optimiser's choices, the rendered source and which lines each UOp of the program wrote.

A graph is kept as a table of nodes ``[op, dtype, arg text, [source ids]]`` per kernel. UOps are
hash-consed, so a node that a stage leaves alone is the same object in the next stage and keeps
its id: what a stage changed is exactly the ids that are new in it. Launch and compile times
come from a profile (``fusegrad/profiler.py``) recorded alongside, and so do the TinyJit
replays (which make no realize) with their launches.

Off (``ACTIVE is None``, the usual case), each hook costs one check of ``ACTIVE``.
"""

from __future__ import annotations

import bisect
import math
import os
import threading
import time
import weakref
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from fusegrad import profiler
from fusegrad.errors import InvalidValue
from fusegrad.profiler import Profiler
from fusegrad.renderer import Renderer
from fusegrad.uop.ops import Ops, UOp, toposort
from fusegrad.uop.pattern import Fired, rule_name, rule_place

#: the longest arg text kept for a node (a constant table would fill the page)
ARG_CHARS = 120
#: the most rule firings kept per stage unless ``VIZ_FIRINGS`` says otherwise (each costs the
#: nodes it adds to the kernel's table): the rest are counted only, and the page says so
DEFAULT_FIRINGS = 20_000
#: ... the limit in force without ``VIZ_FIRINGS`` (read when a recording starts)
FIRINGS_KEPT = DEFAULT_FIRINGS


def firings_kept(environ: dict[str, str] | os._Environ[str] = os.environ) -> int:
    """``VIZ_FIRINGS`` (a positive number of rule firings kept per stage), else ``FIRINGS_KEPT``.
    Read when a recording starts, so that a bad value stops ``VIZ=1``, not ``import fusegrad``."""
    text = environ.get("VIZ_FIRINGS", "")
    if not text:
        return FIRINGS_KEPT
    if not text.isdigit() or int(text) < 1:
        raise InvalidValue(
            f"VIZ_FIRINGS={text!r}: give a positive number of rule firings to keep per stage "
            f"(default {DEFAULT_FIRINGS}), or unset it"
        )
    return int(text)


#: the version of the trace file's layout; the viewer refuses another
FORMAT_VERSION = 1


def arg_text(u: UOp) -> str:
    """A node's arg as the viewer shows it: its repr, cut to ``ARG_CHARS``."""
    text = "" if u.arg is None else repr(u.arg)
    return text if len(text) <= ARG_CHARS else text[: ARG_CHARS - 1] + "…"


class NodeTable:
    """Ids for the UOps of one graph family (a kernel's stages, a plan's tensor graph)."""

    def __init__(self, shapes: bool = False) -> None:
        self.ids: dict[UOp, int] = {}
        self.rows: list[list[Any]] = []
        self.shapes = shapes

    def add(self, order: list[UOp]) -> list[int]:
        """The ids of ``order`` (sources before users), adding the nodes not seen before."""
        ids, out = self.ids, []
        for u in order:
            if (i := ids.get(u)) is None:
                i = ids[u] = len(self.rows)
                row = [u.op.name, u.dtype.name, arg_text(u), [ids.get(s, -1) for s in u.src]]
                if self.shapes:
                    row.append(_shape_text(u))
                self.rows.append(row)
            out.append(i)
        return out

    def add_node(self, root: UOp) -> int:
        """The id of ``root``, adding it and the nodes below it not seen before (only those are
        walked: a rule firing adds the few nodes it made, not its whole graph again)."""
        ids, order, seen, stack = self.ids, [], set(), [(root, False)]
        while stack:
            u, ready = stack.pop()
            if ready:
                order.append(u)  # after the nodes below it: sources come first in the table
            elif u not in ids and u not in seen:
                seen.add(u)
                stack.append((u, True))
                stack.extend((s, False) for s in u.src if s not in ids and s not in seen)
        self.add(order)
        return ids[root]


def _shape_text(u: UOp) -> str:
    """A tensor-graph node's shape, ``(4, 4)``; empty for a node of no array."""
    try:
        return str(tuple(u.shape))
    except Exception:  # a node of no array (a SINK) has no shape to show
        return ""


@dataclass
class KernelRecord:
    """What one ``generate`` call did for one kernel AST."""

    ast: UOp
    renderer: str
    nodes: NodeTable = field(default_factory=NodeTable)
    stages: list[dict[str, Any]] = field(default_factory=list)
    choices: dict[str, str] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)
    last: float = field(default_factory=time.perf_counter)

    def stage(self, title: str, graph: UOp | list[UOp], fired: Fired | None) -> None:
        """Add a stage: its nodes' ids, the ms since the last stage, the rules that fired."""
        now = time.perf_counter()
        order = graph if isinstance(graph, list) else toposort([graph])
        entry: dict[str, Any] = {
            "title": title,
            "linear": isinstance(graph, list),
            "ids": self.nodes.add(order),
            "ms": round((now - self.last) * 1e3, 3),
        }
        if fired is not None:
            names: Counter[str] = Counter()
            for fn, n in fired.items():
                names[rule_name(fn)] += n
            entry["rules"] = names.most_common()
            if fired.steps:
                entry["firings"] = self.firings(fired.steps, sum(fired.values()), fired.keep)
        self.stages.append(entry)
        self.last = time.perf_counter()  # the recording's own time is not the next stage's

    def firings(self, steps: list[tuple[Any, UOp, Any]], total: int, kept: int) -> dict[str, Any]:
        """A stage's rule firings in order: ``steps`` rows ``[rule, node id, replacement id]``
        (rules indexing ``rules``, ``[name, file:line]``), and the ``total`` fired (more than
        the rows where ``kept`` cut them). Nodes of the graphs between the stage's first
        and last are added to the table: a firing's node may exist only there."""
        rules: dict[Any, int] = {}
        rows = []
        for fn, node, replacement in steps:
            if not isinstance(replacement, UOp):
                continue
            r = rules.setdefault(fn, len(rules))
            rows.append([r, self.nodes.add_node(node), self.nodes.add_node(replacement)])
        names = [[rule_name(fn), rule_place(fn)] for fn in rules]
        return {"rules": names, "steps": rows, "total": total, "kept": kept}

    def to_json(self) -> dict[str, Any]:
        """The kernel as the viewer reads it (launch and compile times are added by Trace)."""
        return {
            "name": self.source.get("name", ""),
            "renderer": self.renderer,
            "nodes": self.nodes.rows,
            "stages": self.stages,
            "choices": self.choices,
            **{k: self.source.get(k) for k in ("global_size", "local_size", "flops", "bytes")},
            "source": self.source.get("text", ""),
            "lines": self.source.get("lines", {}),
        }


@dataclass
class PlanRecord:
    """A plan (a graph structure's schedule) and the tensor graph first realized with it."""

    index: int
    graph: dict[str, Any]
    steps: list[dict[str, Any]]
    asts: list[UOp | None]
    realizes: int = 0


class Trace:
    """Everything recorded while this trace was ``ACTIVE``; ``to_json`` makes the file."""

    def __init__(self, profile: Profiler | None = None) -> None:
        #: the profile recorded alongside (launch and compile times), read when it is written
        self.profile = profile
        self.kernels: dict[UOp, KernelRecord] = {}
        self.plans: list[PlanRecord] = []
        #: the records of the plans still alive, by ``id``: a plan that dies leaves (its id may
        #: be another's next), so a long run does not keep every plan it ever made
        self._live: dict[int, PlanRecord] = {}
        self.realizes: list[dict[str, Any]] = []
        self._current = threading.local()
        #: rule firings kept per codegen stage (``firings_kept``)
        self.firings_kept = firings_kept()

    # ---- hooks the compiler calls ----------------------------------------------------------

    def stage(self, title: str, graph: UOp | list[UOp], fired: Fired | None = None) -> None:
        """A codegen stage's result; ``kernel AST`` starts the record of a new kernel."""
        if title == "kernel AST" and isinstance(graph, UOp):
            self._current.kernel = self.kernels[graph] = KernelRecord(graph, "")
        if (record := getattr(self._current, "kernel", None)) is not None:
            record.stage(title, graph, fired)

    def choices(self, **chosen: object) -> None:
        """The optimiser's choices for the kernel being generated (loops, groups, tiles)."""
        if (record := getattr(self._current, "kernel", None)) is not None:
            record.choices = {k: str(v) for k, v in chosen.items() if v is not None}

    def rendered(
        self,
        name: str,
        source: str,
        program: list[UOp],
        renderer: Renderer,
        global_size: tuple[int, ...] | None,
        local_size: tuple[int, ...] | None,
        flops: int,
    ) -> None:
        """The kernel's source and launch sizes, and for each line of the source the UOp of
        the program that wrote it. Ends the kernel's record."""
        if (record := getattr(self._current, "kernel", None)) is None:
            return
        record.renderer = type(renderer).__name__
        ids = record.nodes.ids
        lines = source_lines(name, program, renderer)
        record.source = {
            "name": name,
            "text": source,
            "lines": {str(n): ids[u] for n, u in lines.items() if u in ids},
            "global_size": list(global_size) if global_size else None,
            "local_size": list(local_size) if local_size else None,
            "flops": flops,
            # the buffers it reads or writes, each once (as the engine's Runner.mem_bytes)
            "bytes": sum(u.arg[1] * u.dtype.itemsize for u in program if u.op is Ops.PARAM),
        }
        self._current.kernel = None

    def planned(self, roots: list[UOp], plan: Any, inputs: list[Any]) -> None:
        """A realize of ``roots`` with ``plan`` (``schedule/kernelize.py``); ``inputs`` are the
        buffers in its first slots. A plan seen before is counted, not recorded again."""
        key = id(plan)
        if (record := self._live.get(key)) is None:
            record = self._live[key] = self._plan_record(roots, plan, inputs)
            self.plans.append(record)
            weakref.finalize(plan, self._live.pop, key, None)
        record.realizes += 1
        self.realizes.append({"plan": record.index, "start": time.perf_counter()})

    def _plan_record(self, roots: list[UOp], plan: Any, inputs: list[Any]) -> PlanRecord:
        table = NodeTable(shapes=True)
        graph = {"ids": table.add(toposort(roots)), "nodes": table.rows}
        graph["roots"] = [table.ids[r] for r in roots]
        slot_text = [f"input {i}: {b!r}" for i, b in enumerate(inputs)]
        slot_text += [f"{dtype.name}[{size}] on {dev}" for size, dtype, dev in plan.new_slots]
        rows, asts = [], []
        for step in plan.steps:
            if hasattr(step, "ast"):
                writes, reads = step.slots[: step.writes], step.slots[step.writes :]
                rows.append(
                    {
                        "kind": "kernel",
                        "device": step.device,
                        "writes": [[s, slot_text[s]] for s in writes],
                        "reads": [[s, slot_text[s]] for s in reads],
                        "reason": step.reason,
                    }
                )
                asts.append(step.ast)
            else:
                rows.append({"kind": "copy", "writes": [[step.dest, slot_text[step.dest]]]})
                rows[-1]["reads"] = [[step.source, slot_text[step.source]]]
                asts.append(None)
        return PlanRecord(len(self.plans), graph, rows, asts)

    # ---- the file ----------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The trace as the viewer reads it (``viz/static/viz.js``)."""
        kernels = list(self.kernels.values())
        index = {k.ast: i for i, k in enumerate(kernels)}
        events = list(self.profile.events) if self.profile is not None else []
        clock = self.profile.start if self.profile is not None else 0.0
        plans = [
            {
                "graph": p.graph,
                "steps": [
                    row if ast is None else {**row, "kernel": index.get(ast, -1)}
                    for row, ast in zip(p.steps, p.asts)
                ],
                "realizes": p.realizes,
            }
            for p in self.plans
        ]
        realizes = _realize_times(self.realizes, plans, kernels, events, clock)
        out = [k.to_json() for k in kernels]
        replays = _jit_replays(events, {k["name"]: i for i, k in enumerate(out)})
        _add_times(out, plans, realizes, replays, events)
        return {
            "format": "fusegrad-viz",
            "version": FORMAT_VERSION,
            "kernels": out,
            "plans": plans,
            "realizes": realizes,
            "replays": replays,
            "profile": events,
        }


def _add_times(
    kernels: list[dict[str, Any]],
    plans: list[dict[str, Any]],
    realizes: list[dict[str, Any]],
    replays: list[dict[str, Any]],
    events: list[dict[str, Any]],
) -> None:
    """Give each kernel its launches and their total ms (from the realizes' steps, as names are
    not unique, and the TinyJit replays' launches), and its codegen and compile ms (from the
    profile, by name)."""
    for k in kernels:
        k["launches"], k["launch_ms"] = 0, 0.0
    launched = [
        (step.get("kernel", -1), ms)
        for r in realizes
        for step, ms in zip(plans[r["plan"]]["steps"], r["step_ms"])
    ]
    launched += [(i, ms) for replay in replays for i, _, ms in replay["launches"]]
    for i, ms in launched:
        if ms is not None and i >= 0:
            kernels[i]["launches"] += 1
            kernels[i]["launch_ms"] += ms
    by_name: dict[str, dict[str, float]] = {}
    for e in events:
        if e.get("ph") != "X":
            continue
        names = e.get("args", {}).get("kernels")
        if e.get("cat") == "compile" and names:
            for name in names:  # a batch's time, shared out as the engine does
                by_name.setdefault(name, {})["compile_ms"] = e["dur"] / 1e3 / len(names)
        elif e.get("cat") == "codegen" and e["name"].startswith("codegen "):
            by_name.setdefault(e["name"][len("codegen ") :], {})["codegen_ms"] = e["dur"] / 1e3
    for k in kernels:
        k.update(by_name.get(k["name"], {}))


#: how the profile names a TinyJit call that replays its captured kernels (``jit.py``)
JIT_REPLAY = "TinyJit replay "


def _launches(events: list[dict[str, Any]]) -> tuple[list[tuple[float, str, float]], list[float]]:
    """The profile's kernel launches as ``(start, name, ms)`` in time order, and their starts."""
    launches = sorted(
        (e["ts"], e["name"], e["dur"] / 1e3)
        for e in events
        if e.get("ph") == "X" and e.get("cat") == "kernel"
    )
    return launches, [t for t, _, _ in launches]


def _jit_replays(events: list[dict[str, Any]], kernels: dict[str, int]) -> list[dict[str, Any]]:
    """Each TinyJit replay in the profile, with the kernel launches that began during it:
    ``[kernel index (-1: a kernel not generated while recording), name, ms]``. A replay makes no
    realize, so without this its launches would belong to nothing. Launches of another thread
    running at the same time are counted in too (the profile does not say whose they are)."""
    spans = sorted(
        (e for e in events if e.get("ph") == "X" and e.get("cat") == "jit"), key=lambda e: e["ts"]
    )
    launches, times = _launches(events)
    out = []
    for e in spans:
        if not e["name"].startswith(JIT_REPLAY):
            continue
        end = e["ts"] + e["dur"]
        inside = launches[bisect.bisect_left(times, e["ts"]) : bisect.bisect_right(times, end)]
        out.append(
            {
                "name": e["name"][len(JIT_REPLAY) :],
                "at_ms": round(e["ts"] / 1e3, 3),
                "ms": round(e["dur"] / 1e3, 3),
                "launches": [[kernels.get(n, -1), n, round(ms, 4)] for _, n, ms in inside],
            }
        )
    return out


def _realize_times(
    realizes: list[dict[str, Any]],
    plans: list[dict[str, Any]],
    kernels: list[KernelRecord],
    events: list[dict[str, Any]],
    clock: float,
) -> list[dict[str, Any]]:
    """Each realize with the ms of each of its kernel steps: the profile's launches that began
    after it and before the next realize, matched to its steps by kernel name, in order.
    ``clock`` is the profile's start (``perf_counter``), from which its times count."""
    launches, times = _launches(events)
    out = []
    for i, r in enumerate(realizes):
        steps = plans[r["plan"]]["steps"]
        names = [
            kernels[s["kernel"]].source.get("name") if s.get("kernel", -1) >= 0 else None
            for s in steps
        ]
        begin = (r["start"] - clock) * 1e6
        end = (realizes[i + 1]["start"] - clock) * 1e6 if i + 1 < len(realizes) else math.inf
        ms: list[float | None] = [None] * len(steps)
        for t, name, dur in launches[bisect.bisect_left(times, begin) :]:
            if t >= end:
                break
            j = next((j for j, n in enumerate(names) if n == name and ms[j] is None), None)
            if j is not None:
                ms[j] = dur
        out.append({"plan": r["plan"], "at_ms": round(begin / 1e3, 3), "step_ms": ms})
    return out


def source_lines(name: str, program: list[UOp], renderer: Renderer) -> dict[int, UOp]:
    """The UOp of ``program`` that wrote each line of its source (numbered from 1), as the
    renderer says (``Renderer.line_owners``: the C-family ones and WGSL do)."""
    try:
        return renderer.line_owners(name, program)
    except Exception:  # a renderer that fails to say: no links, nothing worse
        return {}


#: the trace being recorded, or None (the usual case: the hooks do nothing)
ACTIVE: Trace | None = None


@contextmanager
def recording() -> Iterator[Trace]:
    """Record what the ``with`` block compiles and runs; launch times come from the running
    profile (``PROFILE=1``, ``fusegrad.profile``) or else from one started for the block.

    Kernels generated before the block (their compiled programs are kept per process) are not
    generated again: call ``fusegrad.reset_caches()`` first to see them.

    >>> import fusegrad
    >>> from fusegrad.viz import recording
    >>> fusegrad.reset_caches()
    >>> with recording() as trace:
    ...     _ = (fusegrad.Tensor([1.0, 2.0]) * 3).tolist()
    >>> [stage["title"] for stage in trace.to_json()["kernels"][0]["stages"]][:2]
    ['kernel AST', 'lowered']
    """
    global ACTIVE
    with ExitStack() as stack:
        profile = profiler.ACTIVE or stack.enter_context(profiler.profile())
        outer, ACTIVE = ACTIVE, Trace(profile)
        trace = ACTIVE
        try:
            yield trace
        finally:
            ACTIVE = outer


def start() -> Trace:
    """Record until the process ends (``VIZ=1``); return the trace."""
    stack = ExitStack()
    trace = stack.enter_context(recording())
    _FOREVER.append(stack)  # never closed: the recording lasts as long as the process
    return trace


_FOREVER: list[ExitStack] = []
