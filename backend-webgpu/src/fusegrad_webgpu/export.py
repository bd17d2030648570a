"""Export a function as a web page that runs it on ``navigator.gpu``.

``export_webgpu(fn, example_inputs, folder)`` calls ``fn`` once on WEBGPU tensors and takes the
schedule of its result: the kernels, each rendered as WGSL, and the plan of buffers they read
and write. With a ``TinyJit`` as ``fn``, the kernels its capture records are exported instead. The
folder then holds:

- ``model.js``: the WGSL kernels, the dispatch list (kernel, bindings -> buffer slots,
  workgroups, variables) and the buffer plan (bytes, dtype, role of each slot);
- ``fusegrad-webgpu.js``: a small runtime that creates the buffers and pipelines and runs them;
- ``weights.safetensors``: the realized buffers the function reads (its weights) and the first
  value of its state, named by slot;
- ``inputs.safetensors``: the example inputs, which the page runs on;
- ``index.html``: runs the model on the example inputs and shows the result in ``#result``
  (``#status`` says ``done``, or ``error: ...``).

A captured function may do what a decode step does: take the values of ``Variable``s (bound in
its inputs' shapes, a sequence length) and assign to tensors that outlive the call (a KV cache).
A variable's value reaches each kernel that uses it as a field of one uniform buffer, bound after
its storage buffers, as on the WEBGPU backend; the page passes new values to each ``run``. An
assigned tensor is *state*: its kernels read the buffer ``before`` and write ``after``, and after
each run the page copies ``after`` into ``before``, as ``TinyJit``'s replay does, so the next run
reads it. A tensor assigned in place (rows written into a view of its buffer) is state too, with
nothing to copy. The state starts as the tensors' values after the export (which calls the
function twice on the example inputs).

The WGSL is rendered for the limits every WebGPU adapter has (``DEFAULT_LIMITS``) and without
optional features, so float16 and 64-bit types are refused here rather than in the browser.
"""

from __future__ import annotations

import gc
import json
import math
import os
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fusegrad import Tensor, TinyJit
from fusegrad.codegen.kernel import generate
from fusegrad.device import Buffer
from fusegrad.engine.realize import plan_for
from fusegrad.errors import FusegradError
from fusegrad.nn.state import safe_save
from fusegrad.schedule.kernelize import KernelStep, abstract
from fusegrad.tensor import buffer_of
from fusegrad.tensor.movement import _unreshaped
from fusegrad.uop.ops import is_symbolic, sym_max, unbind
from fusegrad_webgpu.device import _BINDING, _DISPATCH
from fusegrad_webgpu.renderer import DEFAULT_LIMITS, WGSLRenderer

WEB_FILES = Path(__file__).parent / "web"
#: a storage binding the kernel writes (its other storage bindings are ``read``)
_WRITTEN = re.compile(r"@binding\((\d+)\) var<storage, read_write>")


def browser_renderer() -> WGSLRenderer:
    """WGSL for any browser's adapter: WebGPU's default limits, no optional features."""
    return WGSLRenderer("WEBGPU", frozenset(), DEFAULT_LIMITS, "the browser's WebGPU adapter")


@dataclass
class Exported:
    """What a page needs of a function: ``model`` (plain data for ``model.js``), the host
    tensors of its weights and first state (``weights``), and its example inputs."""

    model: dict
    weights: dict[str, Tensor]
    inputs: dict[str, Tensor] = field(default_factory=dict)


def export_webgpu(
    fn: Callable[..., Tensor],
    example_inputs: Sequence[Tensor | np.ndarray],
    folder: str | os.PathLike,
    device: str = "WEBGPU",
) -> Path:
    """Write ``fn`` as a web page into ``folder`` (created if needed); return the folder.

    ``fn`` takes tensors and returns one tensor; its weights must be on ``device`` and realized
    (anything not realized is computed by the page, every time it runs). ``fn`` may be a
    ``TinyJit``: then the kernels its capture records are the ones exported, and its inputs may
    have shapes bound to ``Variable``s and it may assign to tensors (see the module docstring).
    """
    exported = export_model(fn, example_inputs, device)
    return write_page(Path(folder), exported, WEB_FILES / "index.html")


def export_model(
    fn: Callable[..., Tensor], example_inputs: Sequence[Tensor | np.ndarray], device: str = "WEBGPU"
) -> Exported:
    """The kernels, buffer plan and weights of ``fn`` on ``example_inputs`` (nothing written)."""
    inputs = [_device_input(x, device) for x in example_inputs]
    if isinstance(fn, TinyJit):
        return _export_captured(fn, inputs)
    out = fn(*inputs)
    if not isinstance(out, Tensor):
        raise FusegradError(
            f"export_webgpu needs a function returning one Tensor, it returned {type(out).__name__}"
        )
    input_buffers = [x._buffer() for x in inputs]
    root = _unreshaped(out.uop)
    _, buffers, _ = abstract([root])
    plan = plan_for([root], [out.device])
    slots_of_inputs = []
    for i, buf in enumerate(input_buffers):
        found = [s for s, b in enumerate(buffers) if b is buf]
        if not found:
            raise FusegradError(
                f"example input {i} is not used by the function's result; export only what it reads"
            )
        slots_of_inputs.append(found[0])
    slots = [(b.size, b.dtype) for b in buffers] + [(n, d) for n, d, _ in plan.new_slots]
    if any(not isinstance(step, KernelStep) for step in plan.steps):
        raise FusegradError(
            "export_webgpu exports one device's kernels; the function copies between devices"
        )
    steps = [(step.ast, step.slots) for step in plan.steps]
    kept = set(range(len(buffers)))
    plan_info = _Plan(slots, slots_of_inputs, list(plan.outputs), kept, [], {})
    model = _model(steps, plan_info, out.shape)
    if symbolic := next((d for d in model["dispatches"] if d["variables"]), None):
        name = model["kernels"][symbolic["kernel"]]["name"]
        raise FusegradError(
            f"export_webgpu writes fixed shapes, but kernel {name} depends on Variable "
            f"{symbolic['variables'][0]!r}; export with example inputs of concrete shapes, or "
            "export a TinyJit whose inputs bind the variable"
        )
    return Exported(model, _weights(buffers, model), _example_inputs(input_buffers))


def _device_input(x: Tensor | np.ndarray, device: str) -> Tensor:
    """An example input as a realized tensor on ``device``; one whose shape holds variables is
    taken as it is (its buffer, on ``device``, is what the kernels read)."""
    if isinstance(x, Tensor) and is_symbolic(x.shape):
        if x.device != device:
            raise FusegradError(
                f"an example input of shape {x.shape} is on {x.device}: make it on {device} "
                "before binding variables in its shape"
            )
        x._buffer()
        return x
    host = x if isinstance(x, Tensor) else Tensor(np.asarray(x), device=device)
    return host.to(device).contiguous().realize()


@dataclass
class _Plan:
    """Slots ``(size, dtype)`` (inputs at their largest), which are inputs and outputs, which
    hold buffers that outlive a call (weights, state), the state pairs ``(after, before)`` of
    assigns and the variables' example values."""

    slots: list[tuple[int, Any]]
    inputs: list[int]
    outputs: list[int]
    kept: set[int]
    state: list[tuple[int, int]]
    values: dict[Any, int]


def _export_captured(jit: TinyJit, inputs: list[Tensor]) -> Exported:
    """Export what a TinyJit captures: run it twice on ``inputs`` and take its recorded kernels
    and assigns."""
    capture = TinyJit(jit.fn)  # a capture of our own, on the export's inputs
    capture(*inputs)
    existing = _live_buffers()  # what the captured call writes of these outlives it: state
    out = capture(*inputs)
    if not isinstance(out, Tensor):
        raise FusegradError("export_webgpu needs a TinyJit function returning one Tensor")
    input_buffers = [x._buffer() for x in inputs]
    # an assign in place (into a view of the buffer it read) leaves no buffer of its own
    # (one device: each assigned tensor read one buffer, ``before[0]``)
    state = [(a.before[0], buffer_of(a.after) or a.before[0]) for a in capture.assigned]
    launched = (b for launch in capture.launches for b in launch.buffers)
    buffers, slot_of = _numbered([*input_buffers, *launched, *(b for pair in state for b in pair)])
    steps = [
        (launch.runner.kernel.ast, tuple(slot_of[id(b)] for b in launch.buffers))
        for launch in capture.launches
    ]
    values: dict[Any, int] = {}
    free = [tuple(unbind(s, values) for s in x.shape) for x in inputs]
    slots = [(b.size, b.dtype) for b in buffers]
    for i, shape in enumerate(free):  # room for the largest values of the shape's variables
        slots[i] = (max(slots[i][0], math.prod(sym_max(s) for s in shape)), slots[i][1])
    pairs = [(slot_of[id(after)], slot_of[id(before)]) for before, after in state]
    kept = {s for s, b in enumerate(buffers) if id(b) in existing}
    plan = _Plan(slots, list(range(len(inputs))), [slot_of[id(out._buffer())]], kept, pairs, values)
    model = _model(steps, plan, tuple(sym_max(unbind(s, {})) for s in out.shape))
    # a state starts as its tensor's value now, after the export's calls: `after`'s bytes
    contents = list(buffers)
    for after, before in pairs:
        contents[before] = buffers[after]
    return Exported(model, _weights(contents, model), _example_inputs(input_buffers))


def _live_buffers() -> set[int]:
    """The ids of every buffer alive now (a buffer made later, by a captured call, is not)."""
    return {id(o) for o in gc.get_objects() if isinstance(o, Buffer)}


def _numbered(found: list[Any]) -> tuple[list[Any], dict[int, int]]:
    """Each buffer once, in the order first found, and the slot of each (by ``id``)."""
    buffers: list[Any] = []
    slot_of: dict[int, int] = {}
    for b in found:
        if id(b) not in slot_of:
            slot_of[id(b)] = len(buffers)
            buffers.append(b)
    return buffers, slot_of


def _weights(buffers: list[Any], model: dict) -> dict[str, Tensor]:
    """The host tensors the page loads: each weight's and each state's bytes, named by slot."""
    rows = model["buffers"]
    return {
        row["name"]: _host_tensor(buffers[row["slot"]])
        for row in rows
        if row["role"] in ("weight", "state")
    }


def _example_inputs(buffers: list[Any]) -> dict[str, Tensor]:
    return {f"input{i}": _host_tensor(b) for i, b in enumerate(buffers)}


def write_page(folder: Path, exported: Exported, page: Path) -> Path:
    """Write the kernels, weights, example inputs, runtime and ``page`` (as ``index.html``)."""
    folder.mkdir(parents=True, exist_ok=True)
    safe_save(exported.weights, folder / "weights.safetensors")
    safe_save(exported.inputs, folder / "inputs.safetensors")
    (folder / "model.js").write_text(_module(exported.model))
    shutil.copyfile(WEB_FILES / "fusegrad-webgpu.js", folder / "fusegrad-webgpu.js")
    shutil.copyfile(page, folder / "index.html")
    return folder


def _host_tensor(buf: Any) -> Tensor:
    """A buffer's bytes as a host tensor (bfloat16 stays its raw 16 bits)."""
    return Tensor(buf.numpy(), device="PYTHON")


def _model(steps: list[tuple[Any, tuple[int, ...]]], plan: _Plan, shape: tuple[int, ...]) -> dict:
    """The kernels, dispatches and buffer plan, as plain data for ``model.js``."""
    kernels: list[dict] = []
    index_of: dict[str, int] = {}
    dispatches = []
    written: set[int] = set()
    for ast, slots in steps:
        dispatch = _dispatch(ast, slots, kernels, index_of)
        written |= {slots[b] for b in dispatch.pop("written")}
        dispatches.append(dispatch)
    # what an assign reads, and a lasting buffer written in place (a KV cache's rows)
    state = {before for _, before in plan.state} | (plan.kept & written)

    def role(slot: int) -> str:
        if slot in plan.inputs:
            return "input"
        if slot in plan.outputs:
            return "output"
        if slot in state:
            return "state"
        return "weight" if slot in plan.kept else "temporary"

    rows = [
        {
            "slot": s,
            "name": f"slot{s}",
            "size": size,
            "bytes": size * dtype.itemsize,
            "dtype": dtype.name,
            "role": role(s),
        }
        for s, (size, dtype) in enumerate(plan.slots)
    ]
    return {
        "kernels": kernels,
        "dispatches": dispatches,
        "buffers": rows,
        "inputs": plan.inputs,
        "inputNames": [f"input{i}" for i in range(len(plan.inputs))],
        "outputs": plan.outputs,
        "outputShapes": [list(shape)],
        "state": [list(pair) for pair in plan.state],
        "variables": {v.arg[0]: [v.arg[1], v.arg[2]] for v in plan.values},
        "values": {v.arg[0]: value for v, value in plan.values.items()},
        "limits": {  # what the page's device must allow (WebGPU's defaults: 8, 128 MiB)
            "maxStorageBuffersPerShaderStage": max(
                (len(d["bindings"]) for d in dispatches), default=0
            ),
            "maxStorageBufferBindingSize": max((r["bytes"] for r in rows), default=0),
        },
    }


def _dispatch(ast: Any, slots: tuple[int, ...], kernels: list[dict], index_of: dict) -> dict:
    """One kernel launch as data: its kernel (rendered and added to ``kernels`` once), buffer
    bindings, workgroups, the uniform binding of its variables, and the bindings it writes."""
    source = generate(ast, browser_renderer())
    if source.source not in index_of:
        index_of[source.source] = len(kernels)
        kernels.append({"name": source.name, "code": source.source})
    match = _DISPATCH.match(source.source)
    found = _BINDING.findall(source.source)
    return {
        "kernel": index_of[source.source],
        "bindings": [[int(b), slots[int(b)]] for b, kind in found if kind == "storage"],
        "workgroups": [int(g) for g in match.groups()] if match else [1, 1, 1],
        "uniform": next((int(b) for b, kind in found if kind == "uniform"), None),
        "variables": [v.arg[0] for v in source.variables],
        "written": [int(b) for b in _WRITTEN.findall(source.source)],
    }


def _module(model: dict) -> str:
    """``model.js``: one exported constant per part of the model, as JSON."""
    lines = [
        "// Generated by fusegrad_webgpu.export_webgpu: WGSL kernels, dispatch list, buffer plan."
    ]
    for key, value in model.items():
        lines.append(f"export const {key} = {json.dumps(value, indent=1)};")
    return "\n".join(lines) + "\n"
