"""A cache of placed graphs: what placing a sharded graph did, replayed for the next graph of the
same structure.

Placing a graph on its devices (``engine/shard.py``) walks every node in Python, builds one graph
per device and realizes it in rounds (plans run on the devices, all-reduces between them). A
training loop places a graph of the same structure at every step, only on other buffers; that
walk cost more than the kernels of a small model. So the first placement of a structure is
recorded as a short program over buffer slots, like a ``Plan`` one level up:

- the slots are the graph's input buffers (numbered as ``abstract`` numbers them), then the
  outputs of each step in turn;
- a ``_Run`` step runs one plan per device (``realize.run_on_devices``) on its slots;
- an ``_AllReduce`` step all-reduces slots (``allreduce.all_reduce``);
- the results are small graphs of views of slots (a MULTI of reshaped buffers).

A graph whose structure was placed before (the key: its abstracted graph, the devices wanted and
its inputs' devices, as for the plan cache) replays the program on its own buffers: every step
makes new buffers as the first time, and no node is placed again. A placement that meets a buffer
the recording cannot name (made outside the steps), or a bound variable, is not cached; nor is
one while ``DEBUG=4`` or a viz trace shows every plan (``key``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from fusegrad import caches
from fusegrad.device import Buffer
from fusegrad.engine.allreduce import all_reduce
from fusegrad.engine.realize import Planned, plan_on_devices, run_on_devices
from fusegrad.helpers import Context
from fusegrad.schedule.kernelize import Plan, abstract
from fusegrad.uop.ops import Ops, UOp, substitute, toposort
from fusegrad.viz import recorder


@dataclass(frozen=True)
class _Run:
    """Plans run on their devices at once: (device, plan, the slots of its inputs) each."""

    plans: tuple[tuple[str, Plan, tuple[int, ...]], ...]


@dataclass(frozen=True)
class _AllReduce:
    """An all-reduce with ``op`` of the buffers in ``slots`` (one per device)."""

    op: Ops
    slots: tuple[int, ...]


@dataclass(frozen=True)
class Placement:
    """A recorded placement: its steps, and the results as graphs over slots (``PARAM(slot)``
    where a view reads a slot's buffer)."""

    steps: tuple[_Run | _AllReduce, ...]
    results: tuple[UOp, ...]

    def replay(self, inputs: list[Buffer]) -> list[UOp]:
        """Run the steps on ``inputs``; return the results' nodes over the new buffers."""
        slots = list(inputs)
        for step in self.steps:
            if isinstance(step, _AllReduce):
                slots.extend(all_reduce([slots[s] for s in step.slots], step.op))
                continue
            work: dict[str, Planned] = {
                device: (plan, [slots[s] for s in reads], {}) for device, plan, reads in step.plans
            }
            done = run_on_devices(work)
            for device, _, _ in step.plans:
                slots.extend(done[device])
        return [_bound(r, slots) for r in self.results]


_placements: dict[tuple, Placement] = {}
caches.register("placements", _placements.clear)


def key(roots: list[UOp], devices: list[tuple[str, ...]]) -> tuple[tuple | None, list[Buffer]]:
    """The cache key of placing ``roots`` on ``devices``, and the graph's input buffers in slot
    order. None, not cached: a graph that binds variables, and while ``DEBUG=4`` prints or a
    viz trace records every plan (a replay makes none)."""
    abstract_roots, inputs, values = abstract(roots)
    if values or Context.DEBUG >= 4 or recorder.ACTIVE is not None:
        return None, inputs
    return (abstract_roots, tuple(devices), tuple(b.device for b in inputs)), inputs


def lookup(cache_key: tuple) -> Placement | None:
    """The placement recorded under ``cache_key``, if any."""
    return _placements.get(cache_key)


class _Recorder:
    """Collects the steps of one placement, naming each buffer by its slot."""

    def __init__(self, inputs: list[Buffer]):
        self.buffers: list[Buffer] = []  # slot -> buffer; kept alive, so that ids stay unique
        self.slot_of: dict[int, int] = {}  # id(buffer) -> its first slot
        self.steps: list[_Run | _AllReduce] = []
        self.broken = False  # a buffer the slots do not name, or variables: not cacheable
        self._add(inputs)

    def _slots(self, buffers: list[Buffer]) -> tuple[int, ...]:
        found = tuple(self.slot_of.get(id(b), -1) for b in buffers)
        self.broken |= -1 in found
        return found

    def _add(self, buffers: list[Buffer]) -> None:
        for b in buffers:
            self.slot_of.setdefault(id(b), len(self.buffers))
            self.buffers.append(b)

    def ran(self, planned: dict[str, Planned], done: dict[str, list[Buffer]]) -> None:
        self.broken |= any(values for _, _, values in planned.values())
        plans = tuple((d, plan, self._slots(inputs)) for d, (plan, inputs, _) in planned.items())
        self.steps.append(_Run(plans))
        for device in planned:
            self._add(done[device])

    def reduced(self, buffers: list[Buffer], op: Ops, out: list[Buffer]) -> None:
        self.steps.append(_AllReduce(op, self._slots(buffers)))
        self._add(out)

    def placement(self, results: list[UOp]) -> Placement | None:
        """The recorded program with ``results`` over slots; None where it cannot be replayed."""
        templates = [
            substitute(
                r,
                {
                    u: UOp(Ops.PARAM, u.dtype, (), (self._slots([u.arg])[0], u.arg.size))
                    for u in toposort([r])
                    if u.op is Ops.BUFFER
                },
            )
            for r in results
        ]
        return None if self.broken else Placement(tuple(self.steps), tuple(templates))


_RECORDING: ContextVar[_Recorder | None] = ContextVar("fusegrad_placement", default=None)


@contextmanager
def recording(cache_key: tuple | None, inputs: list[Buffer]) -> Iterator[list[UOp]]:
    """Record the placement done in the ``with`` block, which puts its results in the yielded
    list, and cache it under ``cache_key`` (None: record nothing)."""
    results: list[UOp] = []
    if cache_key is None:
        yield results
        return
    steps = _Recorder(inputs)  # (not ``recorder``: that names the viz module here)
    token = _RECORDING.set(steps)
    try:
        yield results
    finally:
        _RECORDING.reset(token)
    if (placement := steps.placement(results)) is not None:
        _placements[cache_key] = placement


def realize_on_devices(work: dict[str, list[UOp]]) -> dict[str, list[Buffer]]:
    """``realize.realize_on_devices``, recorded as a step where a placement is recorded."""
    planned = plan_on_devices(work)
    done = run_on_devices(planned)
    if (recorder := _RECORDING.get()) is not None:
        recorder.ran(planned, done)
    return done


def all_reduced(buffers: list[Buffer], op: Ops) -> list[Buffer]:
    """``allreduce.all_reduce``, recorded as a step where a placement is recorded."""
    out = all_reduce(buffers, op)
    if (recorder := _RECORDING.get()) is not None:
        recorder.reduced(buffers, op, out)
    return out


def _bound(template: UOp, slots: list[Buffer]) -> UOp:
    """``template`` with each ``PARAM(slot)`` the view of that slot's buffer."""
    views = {
        u: UOp(Ops.BUFFER, u.dtype, (), slots[u.arg[0]])
        for u in toposort([template])
        if u.op is Ops.PARAM
    }
    return substitute(template, views)
