"""Running schedules: compile kernels once, bind buffers, launch, count.

The hot path, for a graph whose structure was seen before: ``abstract`` (one walk collecting the
buffers), one dictionary lookup to the ``Plan``, allocate its new buffers, and call each step's
prebuilt runner. No rewrite, no disk, no subprocess.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from fusegrad.codegen.kernel import KernelSource, generate
from fusegrad.device import Buffer, Device
from fusegrad.helpers import Context
from fusegrad.schedule.kernelize import KernelStep, Plan, abstract, make_plan
from fusegrad.uop.ops import UOp


class GlobalCounters:
    """Process-wide counters tests and benchmarks read: kernels launched, flops, kernel time."""

    kernel_count: int = 0
    global_ops: int = 0
    time_sum_s: float = 0.0
    compiles: int = 0

    @staticmethod
    def reset() -> None:
        GlobalCounters.kernel_count = GlobalCounters.global_ops = GlobalCounters.compiles = 0
        GlobalCounters.time_sum_s = 0.0


@dataclass
class Runner:
    """A compiled kernel ready to launch on one device."""

    kernel: KernelSource
    program: Any
    device: str

    def __call__(self, handles: list[Any], wait: bool = False) -> float | None:
        return self.program(*handles, global_size=self.kernel.global_size, wait=wait)


_runners: dict[tuple[UOp, str], Runner] = {}
#: set by TinyJit while it captures: called with (runner, buffers) after every kernel launch
recorder: Callable[[tuple[Runner, list[Buffer]]], None] | None = None


def _compile(kernel: KernelSource, device: str) -> Runner:
    """Compile one generated kernel (or read it from the disk cache) and load it."""
    rt = Device[device]
    start = time.perf_counter()
    binary = rt.compiler.compile_cached(kernel.source)
    seconds = time.perf_counter() - start
    GlobalCounters.compiles += 1
    _plugins().hook.fusegrad_kernel_compiled(
        name=kernel.name, device=device, source=kernel.source, seconds=seconds
    )
    return Runner(kernel, rt.program(kernel.name, binary), device)


def _generate(ast: UOp, device: str) -> KernelSource:
    rt = Device[device]
    if Context.BEAM and rt.renderer.grid_dims is None:
        from fusegrad.codegen.search import beam_search

        kernel = generate(ast, rt.renderer, beam_search(ast, rt, device, Context.BEAM))
    else:
        kernel = generate(ast, rt.renderer)
    if Context.DEBUG >= 3:
        print(kernel.source)
    return kernel


def get_runner(ast: UOp, device: str) -> Runner:
    """The compiled kernel for ``ast`` on ``device`` (compiled once per process)."""
    key = (ast, device)
    if (runner := _runners.get(key)) is None:
        runner = _runners[key] = _compile(_generate(ast, device), device)
    return runner


def compile_steps(steps: list) -> None:
    """Compile the new kernels of a plan at once: the compiler processes run in parallel."""
    todo = list(dict.fromkeys((s.ast, s.device) for s in steps
                              if type(s) is KernelStep and s.runner is None and (s.ast, s.device) not in _runners))
    if len(todo) < 2:
        return
    kernels = [_generate(ast, device) for ast, device in todo]  # Python: one at a time
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        runners = list(pool.map(lambda kd: _compile(*kd), zip(kernels, (d for _, d in todo))))
    _runners.update(zip(todo, runners))


def run_plan(plan: Plan, inputs: list[Buffer]) -> list[Buffer]:
    """Execute ``plan`` with ``inputs`` bound to its first slots; return every slot's buffer."""
    pieces: dict[int, Buffer] = {}
    for piece, (size, dtype, dev) in zip(plan.memory, plan.new_slots):
        if piece not in pieces:
            pieces[piece] = Buffer(dev, size, dtype)
    buffers = inputs + [pieces[piece] for piece in plan.memory]
    if not plan.compiled:
        compile_steps(plan.steps)
        plan.compiled = True
    timing = Context.DEBUG >= 2
    start = time.perf_counter()
    for step in plan.steps:
        if type(step) is KernelStep:
            if step.runner is None:
                step.runner = get_runner(step.ast, step.device)
            seconds = step.runner([buffers[s].handle for s in step.slots], wait=timing)
            if recorder is not None:
                recorder((step.runner, [buffers[s] for s in step.slots]))
            GlobalCounters.kernel_count += 1
            GlobalCounters.global_ops += step.runner.kernel.flops
            if timing:
                _report(step.runner, seconds)
            if _has_run_listeners():
                _plugins().hook.fusegrad_kernel_run(
                    name=step.runner.kernel.name, device=step.device, seconds=seconds
                )
        else:
            if recorder is not None:
                from fusegrad.engine.jit import JitError

                raise JitError("TinyJit cannot capture a copy between devices yet; move tensors first")
            _copy(buffers[step.dest], buffers[step.source])
    if Context.DEBUG >= 1:
        elapsed = time.perf_counter() - start
        GlobalCounters.time_sum_s += elapsed
        kernels = sum(type(s) is KernelStep for s in plan.steps)
        print(f"realized {kernels} kernel(s) in {elapsed * 1e3:.3f} ms")
    return buffers


def _plugins():
    from fusegrad.plugin.manager import plugins

    return plugins()


def _has_run_listeners() -> bool:
    """Whether any plugin listens to kernel launches (asked once per plugin manager)."""
    pm = _plugins()
    if pm.has_run_listeners is None:
        pm.has_run_listeners = bool(pm.hook.fusegrad_kernel_run.get_hookimpls())
    return pm.has_run_listeners


def _report(runner: Runner, seconds: float | None) -> None:
    k = runner.kernel
    ms = f"{seconds * 1e3:8.3f} ms" if seconds is not None else "       ? ms"
    gflops = f"{k.flops / seconds * 1e-9:8.2f} GFLOP/s" if seconds else ""
    print(f"  {runner.device:<8s} {k.name:<32s} {ms} {gflops}")


def _copy(dest: Buffer, source: Buffer) -> None:
    """Move bytes between devices through the host."""
    dest.copyin(source.numpy())


_plans: dict[tuple, Plan] = {}


def _plan(roots: list[UOp], devices: list[str]) -> tuple[Plan, list[Buffer]]:
    abstract_roots, inputs = abstract(roots)
    key = (abstract_roots, tuple(devices), tuple(b.device for b in inputs))
    plan = _plans.get(key)
    if plan is None:
        plan = _plans[key] = make_plan(abstract_roots, list(devices), [b.device for b in inputs])
    return plan, inputs


def plan_for(roots: list[UOp], devices: list[str]) -> Plan:
    """The (cached) plan that would realize ``roots``."""
    return _plan(roots, devices)[0]


def realize_uops(roots: list[UOp], devices: list[str]) -> list[Buffer]:
    """Compute ``roots`` (tensor-graph nodes on ``devices``); return one 1-d buffer for each."""
    plan, inputs = _plan(roots, devices)
    buffers = run_plan(plan, inputs)
    return [buffers[s] for s in plan.outputs]
