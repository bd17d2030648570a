"""TinyJit: run a function's kernels again without running the function.

The first call runs the function normally (kernels get compiled). The second call runs it again
while recording every kernel launch and the buffers it used. From the third call on, the
recorded kernels are replayed with the new inputs' buffers put in place of the recorded ones:
no graph is built, nothing is scheduled, only kernels are launched.

Replays write their results into the same buffers every time, so a returned tensor holds the
result of the latest call. A change of input shape, dtype or device captures again.

A launch that reads only weights (a copy of a weight into another layout, a dequantized
table) computes the same at every replay: replays skip it, and run it again only after a buffer
it reads was written (``Buffer.version`` counts the writes into a buffer).

A function whose work depends on values it reads back (an ONNX ``If`` on a computed
condition, an output length) can say so with ``capture.active().read_back(buffer, values)``: the
capture keeps it as a guard, a replay reads the buffer again after its kernels, and a call that
reads other values runs the function anew (its result is right; only that call is slow).

A function may assign to tensors that live outside it (an optimizer step updates weights and
moments). The capture logs each assign: the buffer the kernels read the old value from and the
buffer they write the new value to. A replay first copies the tensor's current value into the
read buffer, runs the kernels, and points the tensor at the written buffer again. Plain Python
values the function reads (a learning rate as a float) are baked into the kernels: what should
change between calls must be a tensor. Its arguments are compared: tensors (also inside lists,
tuples and dicts) are inputs, replaced at each replay; another number, string or flag, or
another object, than the captured call's makes it capture again (a value that changes at every
call runs the function every call: pass it as a tensor).

A tensor the function reads from outside (a model's weight) may be given a new value between
calls (an eager optimizer step, a loaded state dict, ``w[0] = ...``): that gives it another
buffer, and marks the one it let go of (``Buffer.mark_replaced``); a replay that would read a
marked buffer captures again instead. (Not seen: a tensor that was unrealized when captured,
then realized, then given a new value: the capture read the buffers its graph read.)

A size that changes between calls (a sequence length) can be a ``Variable`` bound in the shape
of an input, ``x.reshape(seq.bind(n), 64)``: calls whose inputs differ only in the variables'
values are one capture. Its kernels take the values as arguments (nothing compiles again), its
buffers are allocated for the variables' largest values, and a replay reads the new values from
the inputs' shapes and gives the outputs their new shapes.

Tensors sharded across devices (``Tensor.shard``, ``engine/shard.py``) are inputs and assigned
tensors like any other, one buffer per piece; a change of their devices or sharded axis captures
again. The copies between devices (``realize.copy_buffer``: those of the placement and of the
all-reduces) are recorded with the kernels, as ``CopyRunner`` launches, and replayed in order;
a replay runs the devices' launches one after the other, not at the same time.

Threads: each thread that calls a TinyJit gets a capture of its own (its first two calls run the
function; the compiled kernels are shared), so the buffers a replay returns are that thread's,
and another thread's call does not overwrite them. A lock per TinyJit runs one call at a time:
replays that assign to shared tensors (an optimizer's weights) apply one after another.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusegrad import profiler
from fusegrad.device import Buffer
from fusegrad.engine import capture, realize
from fusegrad.errors import JitError  # re-exported: fusegrad.jit.JitError
from fusegrad.tensor import Tensor, bounds, buffer_of
from fusegrad.tensor.autograd import replace_value
from fusegrad.uop.ops import Ops, UOp, is_symbolic, rebind, unbind


@dataclass
class _Assigned:
    """A tensor the function assigns to: the kernels read ``before`` and write ``after``."""

    tensor: Any
    before: list[Buffer]  # one, or a sharded tensor's pieces (one per device)
    after: Any  # the node the tensor points at after a call (a BUFFER, or a MULTI of them)


@dataclass
class _Guard:
    """A value the captured call read back and branched on: replays check it reads the same."""

    buffer: Buffer
    input: int | None  # which input the buffer was, if it was one (a replay reads the new one)
    values: Any  # the numpy array read in the captured call


@dataclass
class _Launch:
    """One recorded kernel: its runner, the handles it was given, and which were inputs."""

    runner: Any
    handles: list[Any]
    patches: list[tuple[int, int]]  # (argument position, input number)
    buffers: list[Buffer]  # kept alive: the handles belong to them
    symbolic: bool = False  # whether the kernel takes variables' values
    #: computes the same at every replay (see ``_constant_launches``): replays skip it
    constant: bool = False


class _PerThread:
    """An attribute of ``TinyJit`` of which each thread sees its own value (see ``_Captured``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, jit: Any, owner: type | None = None) -> Any:
        return self if jit is None else getattr(jit._captured, self.name)

    def __set__(self, jit: Any, value: Any) -> None:
        setattr(jit._captured, self.name, value)


class _Captured(threading.local):
    """One thread's capture: each thread starts with none (``__init__`` runs once per thread)."""

    def __init__(self) -> None:
        self.calls = 0
        self.signature: tuple | None = None
        self.launches: list[_Launch] = []
        self.assigned: list[_Assigned] = []
        self.outputs: Any = None
        #: the input shapes with variables free, when they hold any (else None)
        self.free_signature: tuple | None = None
        self.values: dict = {}  # the variables' values of the latest call
        self.checks: list = []  # the index checks recorded with the kernels (tensor/bounds.py)
        #: the buffers the constant launches read, with their versions when they last ran
        self.sources: list[tuple[Buffer, int]] = []
        self.written: list[Buffer] = []  # the buffers the replayed launches write
        self.guards: list[_Guard] = []  # the values read back in the captured call
        #: the arguments that are no tensors, as ``_plain`` keeps them (a change captures again)
        self.plain: tuple = ()
        #: the buffers the launches read from outside the call (``_external_reads``), and
        #: ``Buffer.replacements`` when none of them had been let go of by its tensor
        self.external: list[Buffer] = []
        self.seen = Buffer.replacements
        #: all launches as one call, where the device's program type offers it (``_batched``)
        self.batch: Any = None
        #: kernels and bytes a replay adds to the counters, by whether constant launches rerun
        self.counted: dict[bool, tuple[int, int]] = {}


class TinyJit:
    """Decorate a function of tensors; its third and later calls replay its kernels.

    Safe to call from several threads: each thread captures and replays on its own buffers,
    one call at a time (a lock per TinyJit), so results never mix (see the module docstring).

    >>> from fusegrad import Tensor
    >>> from fusegrad.jit import TinyJit
    >>> double_plus_one = TinyJit(lambda x: (x * 2 + 1).realize())
    >>> results = [double_plus_one(Tensor([float(i)] * 3)).tolist() for i in range(4)]
    >>> results.pop()
    [7.0, 7.0, 7.0]
    """

    calls = _PerThread()
    signature = _PerThread()
    launches = _PerThread()
    assigned = _PerThread()
    outputs = _PerThread()
    free_signature = _PerThread()
    values = _PerThread()
    checks = _PerThread()
    sources = _PerThread()
    written = _PerThread()
    guards = _PerThread()
    external = _PerThread()
    seen = _PerThread()
    plain = _PerThread()
    batch = _PerThread()
    counted = _PerThread()

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        self._captured = _Captured()
        self._lock = threading.RLock()  # re-entrant: the function may call itself
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def reset(self) -> None:
        """Forget this thread's capture; its next two calls run the function again."""
        self.calls, self.signature, self.launches, self.assigned, self.outputs = (
            0,
            None,
            [],
            [],
            None,
        )
        self.free_signature, self.values, self.checks = None, {}, []
        self.sources, self.written, self.guards, self.external = [], [], [], []
        self.seen = Buffer.replacements
        self.batch, self.counted = None, {}

    def _read_replaced_buffers(self) -> bool:
        """Whether a buffer the captured kernels read from outside (a weight in the function's
        closure) was let go of by its tensor since the capture (an ``assign`` outside the
        function, a loaded state dict: ``Buffer.mark_replaced``)."""
        if Buffer.replacements == self.seen:
            return False  # nothing was replaced anywhere: one comparison per call
        if any(b.replaced_at > self.seen for b in self.external):
            return True
        self.seen = Buffer.replacements
        return False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if (active := profiler.ACTIVE) is None:
                return self._call(args, kwargs)
            phase = "replay" if self.calls >= 2 else "capture" if self.calls == 1 else "first call"
            name = getattr(self.fn, "__name__", "function")
            with active.timed(f"TinyJit {phase} {name}", "jit", "TinyJit"):
                return self._call(args, kwargs)

    def _call(self, args: tuple, kwargs: dict) -> Any:
        leaves = list(_leaves((args, kwargs)))
        tensors = [a for a in leaves if isinstance(a, Tensor)]
        buffers = [b for t in tensors for b in _buffers(t)]  # realizes lazy inputs into buffers
        signature = tuple((t.shape, t.dtype, _placement(t)) for t in tensors)
        plain = tuple(_plain(a) for a in leaves if not isinstance(a, Tensor))
        values = None
        if self.signature is not None and plain != self.plain:
            self.reset()  # another number, flag or object: the captured kernels have the old one
        if self.signature is not None and signature != self.signature:
            free, values = _unbound_signature(signature)
            if free is None or free != self.free_signature:
                self.reset()  # new shapes or dtypes: capture again
            else:
                self.signature = signature  # the same capture, with new values of its variables
        if self.calls >= 2 and self._read_replaced_buffers():
            self.reset()  # a tensor it reads holds another buffer now: run and capture again
        if self.calls >= 2:
            if capture.active() is not None:  # inside another capture: run, so it sees the kernels
                return _realized(self.fn(*args, **kwargs))
            out = self._replay(buffers, values)
            if out is _UNGUARDED:  # it read other values back than the captured call: run it
                return _realized(self.fn(*args, **kwargs))
            return out
        self.calls += 1
        if self.calls == 1:
            self.signature, self.free_signature = signature, _unbound_signature(signature)[0]
            self.plain = plain
            return _realized(self.fn(*args, **kwargs))
        return self._capture(buffers, signature, args, kwargs)

    def _capture(self, inputs: list[Buffer], signature: tuple, args: tuple, kwargs: dict) -> Any:
        start = bounds.mark()
        with capture.capturing() as recorded:
            out = _realized(self.fn(*args, **kwargs))
            # the call's index checks (tensor/bounds.py) run with its kernels, so replays check
            self.checks = checks = bounds.taken_since(start)
            if checks:
                checks[0].found.realize(*(c.found for c in checks[1:]))
        bounds.queue(checks)
        self.assigned = _assigned(recorded.assigns)
        position = {id(b): i for i, b in enumerate(inputs)}
        self.guards = [_Guard(b, position.get(id(b)), values) for b, values in recorded.reads]
        self.launches = [
            _Launch(
                runner,
                [b.handle for b in bufs],
                [(k, position[id(b)]) for k, b in enumerate(bufs) if id(b) in position],
                bufs,
                isinstance(runner, realize.Runner) and bool(runner.kernel.variables),
            )
            for runner, bufs in recorded.launches
        ]
        self.sources, self.written = _constant_launches(self.launches, inputs, self.assigned)
        self.external = _external_reads(self.launches, inputs, self.assigned)
        self.seen = Buffer.replacements
        self.signature, self.outputs = signature, out
        self.free_signature, self.values = _unbound_signature(signature)
        for launch in (launch for launch in self.launches if launch.symbolic):
            if missing := [
                v.arg[0] for v in launch.runner.kernel.variables if v not in self.values
            ]:
                self.reset()
                raise JitError(
                    f"TinyJit: variable {missing[0]!r} is bound inside the function, so a replay "
                    "cannot know its value; bind it in the shape of an input instead"
                )
        self.batch = _batched(self.launches, self.values)
        self.counted = {}
        return out

    def _replay(self, inputs: list[Buffer], values: dict | None) -> Any:
        for a in self.assigned:  # the kernels read the value the tensor has now
            for before, current in zip(a.before, _buffers(a.tensor)):
                if current is not before:
                    realize.copy_buffer(before, current)
        if values and values != self.values:
            self.values = values
            _rebind_outputs(self.outputs, values)
        handles = [b.handle for b in inputs]
        rerun = any(b.version != version for b, version in self.sources)
        if rerun:  # a buffer the constant launches read was written since they last ran
            self.sources = [(b, b.version) for b, _ in self.sources]
        active = profiler.ACTIVE
        if self.batch is not None and active is None:  # profiled: each launch, timed
            self.batch.replay(handles, rerun, self.values)
        else:
            for launch in self.launches:
                if launch.constant and not rerun:
                    continue
                args = launch.handles
                if launch.patches:
                    args = list(args)
                    for k, i in launch.patches:
                        args[k] = handles[i]
                vals = launch.runner.vals(self.values) if launch.symbolic else ()
                if active is None:
                    launch.runner(args, vals=vals)
                else:
                    launch.runner.profiled(active, args, vals)
        for b in self.written:
            b.version += 1
        for guard in self.guards:
            now = inputs[guard.input] if guard.input is not None else guard.buffer
            if not np.array_equal(now.numpy(), guard.values):
                return _UNGUARDED  # assigned tensors keep their values: the `after`s stay unused
        if (counted := self.counted.get(rerun)) is None:  # (the same at every replay: once)
            ran = [
                launch
                for launch in self.launches
                if (rerun or not launch.constant) and isinstance(launch.runner, realize.Runner)
            ]
            counted = self.counted[rerun] = (len(ran), sum(x.runner.mem_bytes for x in ran))
        realize.GlobalCounters.kernel_count += counted[0]
        realize.GlobalCounters.global_mem += counted[1]
        for a in self.assigned:
            replace_value(a.tensor, a.after)
            a.tensor._graph = None
        bounds.queue(self.checks)  # rewritten by the replayed kernels: read at the next read
        return self.outputs


#: what ``_replay`` returns when a value the captured call read back came back different
_UNGUARDED = object()


def _constant_launches(
    launches: list[_Launch], inputs: list[Buffer], assigned: list[_Assigned]
) -> tuple[list[tuple[Buffer, int]], list[Buffer]]:
    """Mark the launches that compute the same at every replay, and return the buffers they read
    (with their versions now) and the buffers the other launches write.

    A launch is constant when it takes no input and no variable, reads only buffers that no other
    launch of the call writes (weights, and what constant launches made of them: the layout
    pass's weight copies, a dequantized table), and is the only launch writing its outputs (so
    the memory plan reuses none of them). Its result is still in place from the captured call,
    so replays skip it; a replay whose sources were written since (``Buffer.version``: a
    ``copyin``, another plan's kernel) runs them again first."""
    varying = {id(b) for b in inputs} | {id(b) for a in assigned for b in a.before}
    writers: dict[int, int] = {}
    for launch in launches:
        for k in launch.runner.written:
            writers[id(launch.buffers[k])] = writers.get(id(launch.buffers[k]), 0) + 1
    constant = [bool(launch.runner.written) for launch in launches]
    changed = True
    while changed:  # a launch found varying makes what it writes varying: iterate to a fixpoint
        changed = False
        for i, launch in enumerate(launches):
            written = launch.runner.written
            if constant[i] and (
                launch.patches
                or launch.symbolic
                or any(id(b) in varying for k, b in enumerate(launch.buffers) if k not in written)
                or any(writers[id(launch.buffers[k])] > 1 for k in written)
                or any(id(launch.buffers[k]) in varying for k in written)
            ):
                constant[i], changed = False, True
                varying.update(id(launch.buffers[k]) for k in written)
    sources: dict[int, Buffer] = {}
    made: set[int] = set()  # what constant launches write
    others: dict[int, Buffer] = {}  # what the other launches write
    for launch, fixed in zip(launches, constant):
        launch.constant = fixed
        for k, b in enumerate(launch.buffers):
            if k not in launch.runner.written:
                if fixed:
                    sources[id(b)] = b
            elif fixed:
                made.add(id(b))
            else:
                others[id(b)] = b
    return [(b, b.version) for key, b in sources.items() if key not in made], list(others.values())


def _leaves(value: Any) -> Iterator[Any]:
    """The values inside ``value``'s lists, tuples and dicts (keys too), in order."""
    if isinstance(value, list | tuple):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _leaves(v)
    else:
        yield value


def _plain(value: Any) -> Any:
    """How a call's argument that is no tensor is compared with the captured call's: a number,
    string, bool or None by type and value (``2 == 2.0 == True`` are three captures); anything
    else by identity (the same model object each call replays)."""
    if value is None or isinstance(value, int | float | complex | str | bytes):
        return type(value), value
    return type(value), id(value)


def _external_reads(
    launches: list[_Launch], inputs: list[Buffer], assigned: list[_Assigned]
) -> list[Buffer]:
    """The buffers the launches read that come from outside the call: not an input, not
    assigned to by it, not written by a launch (weights the function reads from its closure)."""
    inside = {id(b) for b in inputs} | {id(b) for a in assigned for b in a.before}
    inside |= {id(launch.buffers[k]) for launch in launches for k in launch.runner.written}
    found = {id(b): b for launch in launches for b in launch.buffers if id(b) not in inside}
    return list(found.values())


class _Batch:
    """A capture's launches run by one call of the device's batch (a program type's ``batch``:
    on the CPU one C loop calling each kernel, instead of a ctypes call each). A replay sets the
    inputs' buffers, the variables' values and which constant launches run, then calls it."""

    def __init__(self, launches: list[_Launch], batch: Any):
        self.launches, self.batch = launches, batch
        #: input number -> where its buffer goes: (launch, argument position)
        self.patches: dict[int, list[tuple[int, int]]] = {}
        for i, launch in enumerate(launches):
            for k, n in launch.patches:
                self.patches.setdefault(n, []).append((i, k))
        #: the symbolic launches by the variables they take (most take the same few)
        self.symbolic: dict[tuple, list[int]] = {}
        for i, launch in enumerate(launches):
            if launch.symbolic:
                self.symbolic.setdefault(launch.runner.kernel.variables, []).append(i)
        self.constant = [i for i, launch in enumerate(launches) if launch.constant]
        self.rerun: bool | None = None  # whether the constant launches are set to run
        #: what the batch holds now: each input's handle, the variables' values (a decode step
        #: patched 500 places a call; only what changed is set again)
        self.handles: dict[int, Callable[[], Any]] = {}
        self.values: dict | None = None

    def replay(self, handles: list[Any], rerun: bool, values: dict) -> None:
        batch = self.batch
        for n, places in self.patches.items():
            realize.rebind(batch, self.handles, n, places, handles[n])
        if values != self.values:
            for calls in self.symbolic.values():
                vals = self.launches[calls[0]].runner.vals(values)  # (the same for all of them)
                for i in calls:
                    batch.set_vals(i, vals)
            self.values = dict(values)
        if rerun is not self.rerun:
            for i in self.constant:
                batch.set_active(i, rerun)
            self.rerun = rerun
        batch()


def _batched(launches: list[_Launch], values: dict) -> _Batch | None:
    """The launches as one ``_Batch`` when they all run on one device whose program type can
    batch them (a static ``batch(calls)`` returning a callable, or None), else None."""
    programs = [launch.runner.program for launch in launches]
    kind = type(programs[0]) if programs else None
    make = getattr(kind, "batch", None)
    if make is None or any(type(p) is not kind for p in programs):
        return None
    calls = [
        (
            launch.runner.program,
            launch.handles,
            launch.runner.vals(values) if launch.symbolic else (),
        )
        for launch in launches
    ]
    batch = make(calls)
    return None if batch is None else _Batch(launches, batch)


def _unbound_signature(signature: tuple) -> tuple[tuple | None, dict]:
    """The input signature with its variables free (None when no shape holds one), and the
    values the inputs' shapes bind them to."""
    if not any(is_symbolic(shape) for shape, _, _ in signature):
        return None, {}
    values: dict = {}
    free = tuple(
        (tuple(unbind(s, values) for s in shape), dtype, dev) for shape, dtype, dev in signature
    )
    return free, values


def _rebind_outputs(out: Any, values: dict) -> None:
    """Give the captured outputs the shapes the variables' new values make."""
    for t in [out] if isinstance(out, Tensor) else (out.values() if isinstance(out, dict) else out):
        if isinstance(t, Tensor) and t.uop.op is Ops.RESHAPE and is_symbolic(t.uop.arg):
            shape = tuple(rebind(s, values) for s in t.uop.arg)
            t.uop = t.uop.replace(arg=shape)


def _assigned(log: list[tuple[Any, Any]]) -> list[_Assigned]:
    """The tensors a captured call assigned to, with the buffers its kernels read and wrote."""
    first: dict[int, tuple[Any, Any]] = {}
    for tensor, before in log:
        first.setdefault(id(tensor), (tensor, before))
    out = []
    for tensor, before in first.values():
        if _held(tensor.uop) is None:
            raise JitError(
                f"TinyJit: the function assigns to a tensor of shape {tensor.shape} but leaves it "
                "unrealized; realize it inside the function (optimizer.step() does)"
            )
        if (read := _held(before)) is None:
            raise JitError(
                f"TinyJit: the function assigns to a tensor of shape {tensor.shape} that held no "
                "buffer when the call began; realize it before calling (Tensor.realize)"
            )
        out.append(_Assigned(tensor, read, tensor.uop))
    return out


def _held(u: UOp) -> list[Buffer] | None:
    """The buffers a realized tensor's node reads in order: its buffer, or a sharded tensor's
    pieces' (one per device); None when it is no such view."""
    pieces = u.src if u.op is Ops.MULTI else (u,)
    found = [buffer_of(q) for q in pieces]
    return None if None in found else found  # type: ignore[return-value]


def _buffers(t: Tensor) -> list[Buffer]:
    """The buffers holding ``t``'s elements, computed if needed: its buffer, or a sharded
    tensor's pieces' (one per device)."""
    if not isinstance(t.device, tuple):
        return [t._buffer()]
    found = _held(t.realize().uop)
    assert found is not None, "a realized sharded tensor's pieces are buffers (engine/shard.py)"
    return found


def _placement(t: Tensor) -> Any:
    """Where ``t`` lives, as a capture tells calls apart: its device, or a sharded tensor's
    devices and axis."""
    return t.uop.arg if t.uop.op is Ops.MULTI else t.device


def _realized(out: Any) -> Any:
    """Realize every tensor in ``out`` (a tensor, or a tuple/list/dict of them)."""
    found = (
        [out]
        if isinstance(out, Tensor)
        else [
            v
            for v in (
                out.values()
                if isinstance(out, dict)
                else out
                if isinstance(out, (list, tuple))
                else ()
            )
            if isinstance(v, Tensor)
        ]
    )
    if found:
        Tensor.realize(*found)
    return out
