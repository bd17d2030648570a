"""Run a tensor's kernels on the PYTHON interpreter with a renderer of the test's own, to see what
core's rewrites make of programs for a target with other capabilities."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from fusegrad import Tensor
from fusegrad.codegen.kernel import KernelSource, generate
from fusegrad.engine.realize import plan_for
from fusegrad.renderer import Renderer
from fusegrad.runtime.python import PythonAllocator, PythonProgram
from fusegrad.schedule.kernelize import abstract
from fusegrad.tensor.movement import _unreshaped


def run_with(
    t: Tensor, renderer: Renderer, check: Callable[[KernelSource], None] = lambda k: None
) -> np.ndarray:
    """Realize ``t`` (a PYTHON tensor) with ``renderer``'s programs, ``check`` seeing each
    kernel first; return its values."""
    root = _unreshaped(t.uop)
    _, inputs, _ = abstract([root])
    plan = plan_for([root], [t.device])
    alloc = PythonAllocator()
    handles = []
    for buf in inputs:
        handles.append(alloc.alloc(buf.nbytes))
        alloc.copyin(handles[-1], memoryview(buf.numpy()).cast("B"))
    handles += [alloc.alloc(size * dt.itemsize) for size, dt, _ in plan.new_slots]
    for step in plan.steps:
        kernel = generate(step.ast, renderer)
        check(kernel)
        PythonProgram(kernel.name, kernel.source.encode())(
            *[handles[s] for s in step.slots], global_size=kernel.global_size
        )
    size, dtype, _ = plan.new_slots[plan.outputs[0] - plan.n_inputs]
    return handles[plan.outputs[0]][: size * dtype.itemsize].view(dtype.np).reshape(t.shape)
