"""Export a function as a web page that runs it on ``navigator.gpu``.

``export_webgpu(fn, example_inputs, folder)`` calls ``fn`` once on WEBGPU tensors and takes the
schedule of its result: the kernels, each rendered as WGSL, and the plan of buffers they read
and write. With a ``TinyJit`` as ``fn``, the kernels its capture records are exported instead. The
folder then holds:

- ``model.js``: the WGSL kernels, the dispatch list (kernel, bindings -> buffer slots,
  workgroups) and the buffer plan (bytes, dtype, role of each slot);
- ``fusegrad-webgpu.js``: a small runtime that creates the buffers and pipelines and runs them;
- ``weights.safetensors``: the realized buffers the function reads (its weights), named by slot;
- ``inputs.safetensors``: the example inputs, which the page runs on;
- ``index.html``: runs the model on the example inputs and shows the result in ``#result``
  (``#status`` says ``done``, or ``error: ...``).

The WGSL is rendered for the limits every WebGPU adapter has (``DEFAULT_LIMITS``) and without
optional features, so float16 and 64-bit types are refused here rather than in the browser.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fusegrad import Tensor, TinyJit
from fusegrad.codegen.kernel import generate
from fusegrad.engine.realize import plan_for
from fusegrad.errors import FusegradError
from fusegrad.nn.state import safe_save
from fusegrad.schedule.kernelize import KernelStep, Plan, abstract
from fusegrad.tensor.movement import _unreshaped
from fusegrad_webgpu.device import _BINDING, _DISPATCH
from fusegrad_webgpu.renderer import DEFAULT_LIMITS, WGSLRenderer

WEB_FILES = Path(__file__).parent / "web"


def browser_renderer() -> WGSLRenderer:
    """WGSL for any browser's adapter: WebGPU's default limits, no optional features."""
    return WGSLRenderer("WEBGPU", frozenset(), DEFAULT_LIMITS, "the browser's WebGPU adapter")


def export_webgpu(
    fn: Callable[..., Tensor],
    example_inputs: Sequence[Tensor | np.ndarray],
    folder: str | os.PathLike,
    device: str = "WEBGPU",
) -> Path:
    """Write ``fn`` as a web page into ``folder`` (created if needed); return the folder.

    ``fn`` takes tensors and returns one tensor; its weights must be on ``device`` and realized
    (anything not realized is computed by the page, every time it runs). ``fn`` may be a
    ``TinyJit``: then the kernels its capture records are the ones exported.
    """
    inputs = [
        (Tensor(np.asarray(x), device=device) if not isinstance(x, Tensor) else x.to(device))
        .contiguous()
        .realize()
        for x in example_inputs
    ]
    input_buffers = [x._buffer() for x in inputs]
    if isinstance(fn, TinyJit):
        return _export_captured(fn, inputs, input_buffers, Path(folder))
    out = fn(*inputs)
    if not isinstance(out, Tensor):
        raise FusegradError(
            f"export_webgpu needs a function returning one Tensor, it returned {type(out).__name__}"
        )
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
    return _write(Path(folder), plan, buffers, slots_of_inputs, input_buffers, out.shape)


def _write(
    folder: Path,
    plan: Any,
    buffers: list[Any],
    slots_of_inputs: list[int],
    input_buffers: list[Any],
    shape: tuple[int, ...],
    written: set[int] | None = None,
) -> Path:
    """Write the page, the kernels and the weights of ``plan`` into ``folder``."""
    model = _model(plan, buffers, slots_of_inputs, shape, written or set())  # may refuse: first
    folder.mkdir(parents=True, exist_ok=True)
    weights = {
        f"slot{s}": _host_tensor(b)
        for s, b in enumerate(buffers)
        if s not in slots_of_inputs and (written is None or s not in written)
    }
    safe_save(weights, folder / "weights.safetensors")
    safe_save(
        {f"input{i}": _host_tensor(b) for i, b in enumerate(input_buffers)},
        folder / "inputs.safetensors",
    )
    (folder / "model.js").write_text(_module(model))
    for name in ("fusegrad-webgpu.js", "index.html"):
        shutil.copyfile(WEB_FILES / name, folder / name)
    return folder


def _export_captured(
    jit: TinyJit, inputs: list[Tensor], input_buffers: list[Any], folder: Path
) -> Path:
    """Export what a TinyJit captures: run it twice on ``inputs`` and take its recorded kernels."""
    capture = TinyJit(jit.fn)  # a capture of our own, on the export's inputs
    capture(*inputs)
    out = capture(*inputs)
    if not isinstance(out, Tensor):
        raise FusegradError("export_webgpu needs a TinyJit function returning one Tensor")
    buffers: list[Any] = []
    slot_of: dict[int, int] = {}
    for b in [*input_buffers, *(b for launch in capture.launches for b in launch.buffers)]:
        if id(b) not in slot_of:
            slot_of[id(b)] = len(buffers)
            buffers.append(b)
    steps = [
        KernelStep(
            launch.runner.kernel.ast, tuple(slot_of[id(b)] for b in launch.buffers), "WEBGPU"
        )
        for launch in capture.launches
    ]
    written = {step.slots[0] for step in steps}
    plan = Plan(steps, [], [slot_of[id(out._buffer())]], len(buffers))
    return _write(
        folder, plan, buffers, list(range(len(input_buffers))), input_buffers, out.shape, written
    )


def _host_tensor(buf: Any) -> Tensor:
    """A buffer's bytes as a host tensor (bfloat16 stays its raw 16 bits)."""
    return Tensor(buf.numpy(), device="PYTHON")


def _model(
    plan: Any, buffers: list[Any], input_slots: list[int], shape: tuple[int, ...], written: set[int]
) -> dict:
    """The kernels, dispatches and buffer plan, as plain data for ``model.js``."""
    renderer = browser_renderer()
    slots = [(b.size, b.dtype) for b in buffers] + [
        (size, dtype) for size, dtype, _ in plan.new_slots
    ]
    kernels: list[dict] = []
    index_of: dict[str, int] = {}
    dispatches = []
    for step in plan.steps:
        if not isinstance(step, KernelStep):
            raise FusegradError(
                "export_webgpu exports one device's kernels; the function copies between devices"
            )
        source = generate(step.ast, renderer)
        if source.variables:
            raise FusegradError(
                f"export_webgpu writes fixed shapes, but kernel {source.name} depends on Variable "
                f"{source.variables[0].arg[0]!r}; export with example inputs of concrete shapes"
            )
        if source.source not in index_of:
            index_of[source.source] = len(kernels)
            kernels.append({"name": source.name, "code": source.source})
        match = _DISPATCH.match(source.source)
        bindings = [
            [int(b), step.slots[int(b)]]
            for b, kind in _BINDING.findall(source.source)
            if kind == "storage"
        ]
        dispatches.append(
            {
                "kernel": index_of[source.source],
                "bindings": bindings,
                "workgroups": [int(g) for g in match.groups()] if match else [1, 1, 1],
            }
        )

    def role(slot: int) -> str:
        if slot in input_slots:
            return "input"
        if slot in plan.outputs:
            return "output"
        return "weight" if slot < len(buffers) and slot not in written else "temporary"

    plan_rows = [
        {
            "slot": s,
            "name": f"slot{s}",
            "size": size,
            "bytes": size * dtype.itemsize,
            "dtype": dtype.name,
            "role": role(s),
        }
        for s, (size, dtype) in enumerate(slots)
    ]
    return {
        "kernels": kernels,
        "dispatches": dispatches,
        "buffers": plan_rows,
        "inputs": input_slots,
        "inputNames": [f"input{i}" for i in range(len(input_slots))],
        "outputs": list(plan.outputs),
        "outputShapes": [list(shape)],
    }


def _module(model: dict) -> str:
    """``model.js``: one exported constant per part of the model, as JSON."""
    lines = [
        "// Generated by fusegrad_webgpu.export_webgpu: WGSL kernels, dispatch list, buffer plan."
    ]
    for key, value in model.items():
        lines.append(f"export const {key} = {json.dumps(value, indent=1)};")
    return "\n".join(lines) + "\n"
