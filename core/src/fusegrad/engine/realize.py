"""Running schedules: compile kernels once, bind buffers, launch, count.

The hot path, for a graph whose structure was seen before: ``abstract`` (one walk collecting the
buffers), one dictionary lookup to the ``Plan``, allocate its new buffers, and call each step's
prebuilt runner. No rewrite, no disk, no subprocess.
"""

from __future__ import annotations

import functools
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

from fusegrad import caches, profiler
from fusegrad.codegen.kernel import KernelSource, generate, kernel_name
from fusegrad.codegen.search import beam_search, searchable
from fusegrad.device import Buffer, Device, plugin_manager
from fusegrad.engine import capture
from fusegrad.errors import CompileError
from fusegrad.helpers import Context, usable_cores
from fusegrad.progress import Progress, progress
from fusegrad.schedule.kernelize import CopyStep, KernelStep, Plan, abstract, make_plan
from fusegrad.schedule.layout import Capabilities
from fusegrad.uop.listing import print_listing
from fusegrad.uop.loops import LoopHint
from fusegrad.uop.ops import Ops, UOp, toposort
from fusegrad.viz import recorder


class GlobalCounters:
    """Process-wide counters tests and benchmarks read: kernels launched, flops, kernel time."""

    kernel_count: int = 0
    global_ops: int = 0
    #: bytes of the buffers the kernels launched read or write (each buffer once per kernel)
    global_mem: int = 0
    time_sum_s: float = 0.0
    compiles: int = 0

    @staticmethod
    def reset() -> None:
        GlobalCounters.kernel_count = GlobalCounters.global_ops = GlobalCounters.compiles = 0
        GlobalCounters.global_mem = 0
        GlobalCounters.time_sum_s = 0.0


@dataclass
class Runner:
    """A compiled kernel ready to launch on one device."""

    kernel: KernelSource
    program: Any
    device: str

    @functools.cached_property
    def mem_bytes(self) -> int:
        """Bytes of the buffers the kernel reads or writes, each counted once."""
        return sum(u.arg[1] * u.dtype.itemsize for u in self.kernel.program if u.op is Ops.PARAM)

    @functools.cached_property
    def written(self) -> frozenset[int]:
        """The argument positions of the buffers the kernel stores into."""
        out = set()
        for u in self.kernel.program:
            if u.op is Ops.STORE:
                address = u.src[0]
                while address.op is not Ops.INDEX and address.src:
                    address = address.src[0]
                if address.src and address.src[0].op is Ops.PARAM:
                    out.add(address.src[0].arg[0])
        return frozenset(out)

    def __call__(
        self, handles: list[Any], wait: bool = False, vals: tuple[int, ...] = ()
    ) -> float | None:
        """Launch on buffer ``handles`` and the values of the kernel's variables, in order."""
        kernel = self.kernel
        return self.program(
            *handles,
            global_size=kernel.global_size,
            local_size=kernel.local_size,
            vals=vals,
            wait=wait,
        )

    def profiled(
        self, active: profiler.Profiler, handles: list[Any], vals: tuple[int, ...] = ()
    ) -> float:
        """Launch, wait for the kernel and record it in the ``active`` profile; its seconds (the
        program's own measure, or the host's where the program gives none)."""
        start = time.perf_counter()
        seconds = self(handles, True, vals) or time.perf_counter() - start
        k = self.kernel
        active.kernel(k.name, self.device, start, seconds, k.flops, self.mem_bytes, k.global_size)
        return seconds

    def vals(self, values: dict[UOp, int]) -> tuple[int, ...]:
        """The integer arguments of this kernel: its variables' ``values``, in its order."""
        return tuple(values[v] for v in self.kernel.variables)


_runners: dict[tuple[UOp, str], Runner] = {}
caches.register("kernel runners", _runners.clear)


def _compile(kernel: KernelSource, device: str) -> Runner:
    """Compile one generated kernel (or read it from the disk cache) and load it."""
    (runner,) = _compile_batch([kernel], device)
    if isinstance(runner, CompileError):
        raise runner
    return runner


def _compile_batch(kernels: list[KernelSource], device: str) -> list[Runner | CompileError]:
    """Compile kernels together (``Compiler.compile_cached_batch``) and load the ones that built."""
    rt = Device[device]
    start = time.perf_counter()
    binaries = rt.compiler.compile_cached_batch([k.source for k in kernels])
    elapsed = time.perf_counter() - start
    seconds = elapsed / len(kernels)  # shared out, so that times add up
    if (active := profiler.ACTIVE) is not None:
        names = [k.name for k in kernels]
        where = (profiler.HOST, f"compile ({threading.current_thread().name})")
        active.span(
            f"compile {len(kernels)} kernel(s)",
            "compile",
            where,
            start,
            elapsed,
            {"device": device, "kernels": names},
        )
    runners: list[Runner | CompileError] = []
    for kernel, binary in zip(kernels, binaries):
        if isinstance(binary, CompileError):
            runners.append(binary)
            continue
        GlobalCounters.compiles += 1
        plugin_manager().hook.fusegrad_kernel_compiled(
            name=kernel.name, device=device, source=kernel.source, seconds=seconds
        )
        runners.append(Runner(kernel, _load(rt, kernel, binary), device))
    return runners


def _load(rt: Any, kernel: KernelSource, binary: bytes) -> Any:
    """The loaded program; a cached binary that passed its checks but does not load (a library
    built for another machine) is evicted and compiled once more, so the cache heals."""
    try:
        return rt.program(kernel.name, binary)
    except CompileError as e:
        if not rt.compiler.evict(kernel.source, str(e)):
            raise
    return rt.program(kernel.name, rt.compiler.compile_cached(kernel.source))


def _generate(ast: UOp, device: str) -> KernelSource:
    if (active := profiler.ACTIVE) is not None:
        with active.timed(
            f"codegen {kernel_name(ast)}",
            "codegen",
            "codegen",
            {"device": device, "BEAM": Context.BEAM},
        ):
            return _generate_kernel(ast, device)
    return _generate_kernel(ast, device)


def _generate_kernel(ast: UOp, device: str) -> KernelSource:
    rt = Device[device]
    if Context.BEAM and searchable(ast, rt.renderer):
        kernel = generate(ast, rt.renderer, rt.rules, beam_search(ast, rt, device, Context.BEAM))
    else:
        kernel = generate(ast, rt.renderer, rt.rules)
    if Context.DEBUG == 3:  # DEBUG>=4 prints it with the other stages (codegen/kernel.py)
        print(kernel.source)
    return kernel


def get_runner(ast: UOp, device: str) -> Runner:
    """The compiled kernel for ``ast`` on ``device`` (compiled once per process); waits for it
    if ``compile_steps`` is compiling it, and raises the ``CompileError`` that compile ended in."""
    key = (ast, device)
    if (runner := _runners.get(key)) is None:
        if (waiting := _compiling.pop(key, None)) is not None:
            job, index = waiting
            built = job.result()[index]
            if isinstance(built, CompileError):
                raise built
            runner = _runners[key] = built
        else:
            runner = _runners[key] = _compile(_generate(ast, device), device)
    return runner


#: The work a batch may hold, in ``compile_cost``'s units: about 0.25 s of gcc 12 for the GPT
#: example's kernels (0.02-0.05 ms a unit since matmul-shaped kernels skip gcc's early unroller,
#: ``fusegrad_cpu.compiler.UNROLLED_FLAGS``, on top of about 40 ms a process for the compiler's
#: start, headers and linking). Smaller batches start compiling sooner and share the work out
#: more evenly between the compiler threads (the last batch is the wait at the end), but each
#: pays those 40 ms, twice when the CPU compiler splits it into kernels built with different
#: flags: the GPT example's first step took 4.6 processor seconds of gcc with 4000 (30
#: processes), 3.9 with 10000 (16) and 3.7 with 16000 (12).
BATCH_COST = 12000
#: The most kernels in a batch: the CPU compiler builds a batch into one library, and every
#: kernel's cache entry holds all of it (about 2 KB per kernel), so it must not grow with the plan.
MAX_BATCH = 32

#: the compiler threads (started by the first plan with kernels to compile), in a list so that
#: a forked child, which inherits the pool but not its threads, can drop it
_pool: list[ThreadPoolExecutor] = []
#: the kernels being compiled: their batch's job and their place in it
_compiling: dict[tuple[UOp, str], tuple[Future, int]] = {}
caches.register("kernels being compiled", _compiling.clear)


def _forget_compiles() -> None:
    """In a forked child: the parent's compiler and device threads and their jobs are not there."""
    _pool.clear()
    _compiling.clear()
    _device_pool.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_compiles)


def compile_cost(kernel: KernelSource) -> int:
    """About how much work ``kernel`` gives the compiler: its statements, each counted once for
    every copy the unrolled loops around it make. A matmul's 8x32 register tile is 256 copies of
    its body; gcc -O2's time followed this count closely (correlation 0.87 over the GPT
    example's kernels), and not the length of the source. Built without gcc's early unroller
    (the CPU compiler's choice for such kernels) a copy costs about a tenth as much, so this
    overstates them; it still orders kernels by work, which is what batching needs."""
    cost, copies = 0, [1]
    for u in kernel.program:
        if u.op is Ops.RANGE:
            unrolled = u.arg.hint is LoopHint.UNROLL and u.src[0].op is Ops.CONST
            copies.append(copies[-1] * (u.src[0].arg if unrolled else 1))
        elif u.op is Ops.END:
            copies.pop()
        else:
            cost += copies[-1]
    return cost


def compile_steps(steps: list) -> None:
    """Start compiling the new kernels of a plan at once, in batches compiled in parallel.

    Kernels are generated in Python one at a time; each batch goes to a compiler thread as soon
    as it holds ``BATCH_COST`` of work, so the compilers run while the next kernels are
    generated, and the first kernels of the plan can run while the last ones compile:
    ``get_runner`` waits for each kernel when its step comes. A batch is one ``compile_batch``
    (for the CPU: one translation unit). A kernel that fails to compile raises its
    ``CompileError`` when its step comes; the others of its batch are kept.
    """
    todo = list(
        dict.fromkeys(
            (s.ast, s.device)
            for s in steps
            if type(s) is KernelStep
            and s.runner is None
            and (s.ast, s.device) not in _runners
            and (s.ast, s.device) not in _compiling
        )
    )
    if len(todo) < 2:
        return
    # a bar (on a terminal) counts the kernels built; from the compiler threads, as batches end
    bar = progress(total=len(todo), desc="compiling", unit="kernels")
    if not _pool:  # threads that live as long as the process: a plan's compiles outlive its call
        _pool.append(ThreadPoolExecutor(usable_cores(), thread_name_prefix="fusegrad-compile"))
    for device in dict.fromkeys(d for _, d in todo):
        batch: list[tuple[tuple[UOp, str], KernelSource]] = []
        work = 0
        for key in (key for key in todo if key[1] == device):
            kernel = _generate(key[0], device)
            batch.append((key, kernel))
            work += compile_cost(kernel)
            if work >= BATCH_COST or len(batch) >= MAX_BATCH:
                _submit(batch, device, bar)
                batch, work = [], 0
        if batch:
            _submit(batch, device, bar)


def _submit(batch: list[tuple[tuple[UOp, str], KernelSource]], device: str, bar: Progress) -> None:
    """Hand ``batch`` (its kernels, and the keys they are kept under) to a compiler thread;
    ``bar`` counts them when it is done."""
    job = _pool[0].submit(_compile_batch, [kernel for _, kernel in batch], device)
    job.add_done_callback(lambda _: bar.update(len(batch)))
    for index, (key, _) in enumerate(batch):
        _compiling[key] = (job, index)


#: told which roots of a plan are computed (their indexes, and their buffers), as soon as the
#: last step writing them has run: ``realize_uops(..., ready=...)``
Ready = Callable[[list[int], list[Buffer]], None]


def finished_after(plan: Plan) -> dict[int, list[int]]:
    """Step index -> the roots whose last write is that step (-1: roots no step writes, such as
    an input returned as it is)."""
    last: dict[int, int] = {}
    for i, step in enumerate(plan.steps):
        written = step.slots[: step.writes] if isinstance(step, KernelStep) else (step.dest,)
        for slot in written:
            last[slot] = i
    after: dict[int, list[int]] = {}
    for root, slot in enumerate(plan.outputs):
        after.setdefault(last.get(slot, -1), []).append(root)
    return after


def run_plan(
    plan: Plan,
    inputs: list[Buffer],
    values: dict[UOp, int] | None = None,
    ready: Ready | None = None,
) -> list[Buffer]:
    """Execute ``plan`` with ``inputs`` bound to its first slots and its variables to ``values``;
    return every slot's buffer. ``ready``: called with the roots each step completes and their
    buffers, right after that step (so that their results can be used while later steps run)."""
    pieces: dict[int, Buffer] = {}
    last = plan.handles  # each piece asks back the memory it had in the last run
    for piece, (size, dtype, dev) in zip(plan.memory, plan.new_slots):
        if piece not in pieces:
            pieces[piece] = Buffer(dev, size, dtype, prefer=last.get(piece, 0))
    buffers = inputs + [pieces[piece] for piece in plan.memory]
    if not plan.compiled:
        compile_steps(plan.steps)
        plan.compiled = True
    active = profiler.ACTIVE  # one check per plan; per kernel only while profiling
    timing, listeners, recording = Context.DEBUG >= 2, _has_run_listeners(), capture.active()
    # (a capture sees every launch: TinyJit keeps constant launches its own way)
    keep = plan.constant and recording is None and not values and Context.KEEP_COPIES
    skip, keeping = _reuse_constants(plan, buffers) if keep else (frozenset(), [])
    finished = finished_after(plan) if ready is not None else {}

    def tell(roots: list[int]) -> None:
        ready(roots, [buffers[plan.outputs[r]] for r in roots])  # type: ignore[misc]

    if -1 in finished:
        tell(finished[-1])
    start = time.perf_counter()
    # (a launch that is seen, timed, recorded or followed by ``ready`` goes alone)
    alone = ready is not None or active is not None or timing or listeners or recording is not None
    if not alone and plan.batchable and _run_batched(plan, buffers, values or {}, skip):
        steps: list[KernelStep | CopyStep] = []  # (all launched)
    else:
        steps = plan.steps
    for index, step in enumerate(steps):
        if index in skip:
            continue
        if type(step) is KernelStep:
            if step.runner is None:
                step.runner = get_runner(step.ast, step.device)
            vals = step.runner.vals(values) if step.runner.kernel.variables else ()
            handles = [buffers[s].handle for s in step.slots]
            if active is None:
                seconds = step.runner(handles, timing, vals)
            else:
                seconds = step.runner.profiled(active, handles, vals)
            for s in step.slots[: step.writes]:
                buffers[s].version += 1
            if recording is not None:
                recording.launched(step.runner, [buffers[s] for s in step.slots])
            GlobalCounters.kernel_count += 1
            GlobalCounters.global_ops += step.runner.kernel.flops
            GlobalCounters.global_mem += step.runner.mem_bytes
            if timing:
                _report(step.runner, seconds)
            if listeners:
                plugin_manager().hook.fusegrad_kernel_run(
                    name=step.runner.kernel.name, device=step.device, seconds=seconds
                )
        elif isinstance(step, CopyStep):
            copy_buffer(buffers[step.dest], buffers[step.source])
        if index in finished:
            tell(finished[index])
    for kept, outputs in keeping:  # (written now: later runs may take them)
        kept.outputs = outputs
    for piece, buffer in pieces.items():
        if buffer.is_allocated:
            last[piece] = id(buffer.handle)
    if Context.DEBUG >= 1:
        elapsed = time.perf_counter() - start
        GlobalCounters.time_sum_s += elapsed
        kernels = sum(type(s) is KernelStep for s in plan.steps) - len(skip)
        note = f" ({len(skip)} kept from the last run)" if skip else ""
        print(f"realized {kernels} kernel(s){note} in {elapsed * 1e3:.3f} ms")
    return buffers


#: a plan of fewer kernels than this launches each itself (one ctypes call: a batch saves none)
BATCH_KERNELS = 2


class _Kept:
    """What an eager run of a plan's constant step read (the buffers, weakly, and their
    versions) and, from the second run on the same, the outputs it keeps (``_reuse_constants``).
    The outputs go when a buffer read dies (a model deleted): nothing holds them past it."""

    __slots__ = ("sources", "versions", "outputs", "__weakref__")

    def __init__(self, sources: list[Buffer], versions: tuple[int, ...], outputs: list[Buffer]):
        me = weakref.ref(self)

        def forget(_: object) -> None:
            if (kept := me()) is not None:
                kept.outputs = []

        self.sources = [weakref.ref(b, forget) for b in sources]
        self.versions, self.outputs = versions, outputs

    def holds(self, sources: list[Buffer], versions: tuple[int, ...]) -> bool:
        """Whether ``sources`` are the very buffers read then, none written since."""
        return versions == self.versions and all(
            ref() is b for ref, b in zip(self.sources, sources, strict=True)
        )


def _reuse_constants(
    plan: Plan, buffers: list[Buffer]
) -> tuple[frozenset[int], list[tuple[_Kept, list[Buffer]]]]:
    """The constant steps (``Plan.constant``: a weight's layout copy) this run may skip, their
    output slots bound to the buffers kept from an earlier run on the same, unwritten inputs;
    and the outputs this run computes to keep, each with its record (``run_plan`` hands them
    over once its launches have run, not before: a run stopped halfway keeps nothing).

    An eager model called again and again on its weights (inference without TinyJit) copied
    each weight into panels at every call: a 512-channel 3x3 convolution on a 7x7 map spent as
    long copying its weight as computing. Outputs are kept from the second run that finds a
    step's inputs unchanged on, so a training step, whose weights change every run, keeps no
    weight's copy (a causal mask from cached ``arange`` buffers it does keep)."""
    skip, keeping = set(), []
    for i in plan.constant:
        step = cast(KernelStep, plan.steps[i])
        sources = [buffers[s] for s in step.slots[step.writes :]]
        versions = tuple(b.version for b in sources)
        last = plan.kept.get(i)
        if last is None or not last.holds(sources, versions):
            plan.kept[i] = _Kept(sources, versions, [])
            continue
        written = step.slots[: step.writes]
        outputs = last.outputs
        if outputs:
            skip.add(i)
        else:  # (the second run on these inputs: computed once more, into buffers to keep)
            news = [plan.new_slots[s - plan.n_inputs] for s in written]
            outputs = [Buffer(device, size, dtype) for size, dtype, device in news]
            keeping.append((last, outputs))
        for slot, kept in zip(written, outputs, strict=True):
            buffers[slot] = kept
    return frozenset(skip), keeping


def _run_batched(
    plan: Plan, buffers: list[Buffer], values: dict[UOp, int], skip: frozenset[int]
) -> bool:
    """Run ``plan``'s launches but ``skip`` as one call of its device's batch (``PlanBatch``),
    where its program type offers one: an eager step of a model is then its kernels' time, not
    Python's between them. False, having run nothing, where it cannot (``plan.batchable`` is
    then cleared where the device has no batch: its next runs go to the launches one by one)."""
    try:
        batch = plan.batches.pop()  # (another thread running this plan builds a batch of its own)
    except IndexError:
        batch = PlanBatch.of(plan, buffers, values)
        if batch is None:
            plan.batchable = False
            return False
    else:
        batch.bind(buffers, values)
    if not batch.only(skip):  # (its device cannot switch launches off)
        plan.batches.append(batch)
        return False
    batch.batch()
    for s in batch.written:
        buffers[s].version += 1
    skipped = [cast(KernelStep, plan.steps[i]).runner for i in skip]
    GlobalCounters.kernel_count += batch.kernels - len(skipped)
    GlobalCounters.global_ops += batch.flops - sum(r.kernel.flops for r in skipped)
    GlobalCounters.global_mem += batch.mem_bytes - sum(r.mem_bytes for r in skipped)
    plan.batches.append(batch)
    return True


class PlanBatch:
    """A plan's kernel launches as one call of its device's batch (a program type's static
    ``batch(calls)``: the CPU's calls each kernel from one C loop). It remembers the buffer
    each slot held at the last run and writes a slot's new one into its places only when it
    changed (the pool hands a plan's pieces the same memory run after run); the variables'
    values likewise. Measured on 2 cores, the GPT example's eager step (193 launches): the
    launches one by one spent ~2 ms of Python and ctypes besides the kernels' 38 ms."""

    def __init__(self, batch: Any, plan: Plan, buffers: list[Buffer], values: dict[UOp, int]):
        self.batch = batch
        steps = cast(list[KernelStep], plan.steps)  # (all kernels: see ``of``)
        #: slot -> where its buffer goes: (launch, argument position)
        self.places: dict[int, list[tuple[int, int]]] = {}
        for i, step in enumerate(steps):
            for k, slot in enumerate(step.slots):
                self.places.setdefault(slot, []).append((i, k))
        self.held: dict[int, Callable[[], Any]] = {}
        #: the launches that take variables, with their runners
        self.symbolic = [
            (i, step.runner) for i, step in enumerate(steps) if step.runner.kernel.variables
        ]
        self.values = dict(values)
        self.written = [s for step in steps for s in step.slots[: step.writes]]
        self.kernels = len(steps)
        self.flops = sum(step.runner.kernel.flops for step in steps)
        self.mem_bytes = sum(step.runner.mem_bytes for step in steps)
        self.skipped: frozenset[int] = frozenset()  # the launches switched off (``only``)
        self.bind(buffers, values)  # (notes its handles; writing them again, once, costs nothing)

    @staticmethod
    def of(plan: Plan, buffers: list[Buffer], values: dict[UOp, int]) -> PlanBatch | None:
        """``plan``'s batch on ``buffers`` and ``values``; None where it has a copy, fewer than
        ``BATCH_KERNELS`` kernels, or kernels of several program types or of one that cannot
        batch them."""
        steps = plan.steps
        if len(steps) < BATCH_KERNELS or any(type(s) is not KernelStep for s in steps):
            return None
        kernel_steps = cast(list[KernelStep], steps)
        for step in kernel_steps:
            if step.runner is None:
                step.runner = get_runner(step.ast, step.device)
        kind = type(kernel_steps[0].runner.program)
        make = getattr(kind, "batch", None)
        if make is None or any(type(s.runner.program) is not kind for s in kernel_steps):
            return None
        calls = [
            (
                step.runner.program,
                [buffers[s].handle for s in step.slots],
                step.runner.vals(values) if step.runner.kernel.variables else (),
            )
            for step in kernel_steps
        ]
        batch = make(calls)
        return None if batch is None else PlanBatch(batch, plan, buffers, values)

    def only(self, skip: frozenset[int]) -> bool:
        """Run every launch but those of ``skip`` from now on; False where some must be skipped
        and the device's batch cannot (it has no ``set_active``)."""
        if skip == self.skipped:
            return True
        if (set_active := getattr(self.batch, "set_active", None)) is None:
            return False
        for i in skip ^ self.skipped:
            set_active(i, i not in skip)
        self.skipped = skip
        return True

    def bind(self, buffers: list[Buffer], values: dict[UOp, int]) -> None:
        """Set the buffers and variables' values of this run where they differ from the last."""
        for slot, places in self.places.items():
            rebind(self.batch, self.held, slot, places, buffers[slot].handle)
        if self.symbolic and values != self.values:
            for i, runner in self.symbolic:
                self.batch.set_vals(i, runner.vals(values))
            self.values = dict(values)


def rebind(
    batch: Any,
    held: dict[Any, Callable[[], Any]],
    key: Any,
    places: list[tuple[int, int]],
    handle: Any,
) -> None:
    """Write ``handle`` into ``batch`` at ``places`` (launch, argument position) unless
    ``held[key]`` says the batch holds it already; remember it there (a weak reference where
    the handle takes one, a numpy array does: the check keeps no buffer alive). A plan's batch
    and TinyJit's replay (jit.py ``_Batch``) both pass a buffer only when it changed."""
    if (ref := held.get(key)) is not None and ref() is handle:
        return
    for i, k in places:
        batch.set_buffer(i, k, handle)
    try:
        held[key] = weakref.ref(handle)
    except TypeError:
        held[key] = lambda: handle


def _has_run_listeners() -> bool:
    """Whether any plugin listens to kernel launches (asked once per plugin manager)."""
    pm = plugin_manager()
    if pm.has_run_listeners is None:
        pm.has_run_listeners = bool(pm.hook.fusegrad_kernel_run.get_hookimpls())
    return pm.has_run_listeners


def _report(runner: Runner, seconds: float | None) -> None:
    k = runner.kernel
    ms = f"{seconds * 1e3:8.3f} ms" if seconds is not None else "       ? ms"
    gflops = f"{k.flops / seconds * 1e-9:8.2f} GFLOP/s" if seconds else ""
    print(f"  {runner.device:<8s} {k.name:<32s} {ms} {gflops}")


def copy_buffer(dest: Buffer, source: Buffer) -> None:
    """Move bytes from one buffer to another (on any devices): directly where the destination's
    allocator can (``Allocator.transfer``), else through host memory. TinyJit's capture records
    it, as a ``CopyRunner`` launched on (dest, source)."""
    if (recording := capture.active()) is not None:
        recording.launched(CopyRunner(dest.device, source.device, source.nbytes), [dest, source])
    allocator = Device[dest.device].allocator
    if source.nbytes and allocator.transfer(
        dest.handle, Device[source.device].allocator, source.handle, source.nbytes
    ):
        dest.version += 1
        return
    dest.copyin(source.numpy())


@dataclass(frozen=True)
class CopyRunner:
    """A copy between buffers as TinyJit replays it: launched like a kernel's ``Runner`` on
    handles, (destination, source), it copies ``nbytes`` as ``copy_buffer`` does."""

    dest_device: str
    source_device: str
    nbytes: int
    written: frozenset[int] = frozenset({0})  # (as ``Runner.written``) the destination
    program: Any = None  # no kernel: never part of a device's batch of launches
    mem_bytes: int = 0  # (kernels' memory traffic only)

    def __call__(self, handles: list[Any], wait: bool = False, vals: tuple[int, ...] = ()) -> None:
        """Copy from ``handles[1]`` into ``handles[0]``."""
        dest, source = handles
        if not self.nbytes:
            return
        allocator, other = Device[self.dest_device].allocator, Device[self.source_device].allocator
        if not allocator.transfer(dest, other, source, self.nbytes):
            host = memoryview(bytearray(self.nbytes))
            other.copyout(host, source)
            allocator.copyin(dest, host)

    def profiled(
        self, active: profiler.Profiler, handles: list[Any], vals: tuple[int, ...] = ()
    ) -> float:
        """Copy (a profile shows the copies of a replay as the time between its kernels)."""
        start = time.perf_counter()
        self(handles)
        return time.perf_counter() - start

    def vals(self, values: dict[UOp, int]) -> tuple[int, ...]:
        """A copy takes no variables."""
        return ()


_plans: dict[tuple, Plan] = {}
caches.register("plans", _plans.clear)

#: The graphs realized last (their roots and devices -> what ``_plan`` found for them), the most
#: recent last. Realizing the same nodes again (the same expression of the same buffers, rebuilt:
#: UOps are hash-consed, and these roots keep their nodes alive) skips abstracting the graph for
#: the plan cache's key, and rebuilding it makes no new nodes: attention's scores called eagerly,
#: ~30 of the call's ~60 us of Python. Holding a root holds its input buffers: only graphs whose
#: inputs total at most ``RECENT_BYTES`` are kept, ``RECENT`` of them.
_recent: OrderedDict[tuple, tuple[Plan, list[Buffer], dict[UOp, int]]] = OrderedDict()
caches.register("recent graphs", _recent.clear)
RECENT = 8
RECENT_BYTES = 4 << 20


def _plan(roots: list[UOp], devices: list[str]) -> tuple[Plan, list[Buffer], dict[UOp, int]]:
    seen = (tuple(roots), tuple(devices))
    if (found := _recent.pop(seen, None)) is not None:  # (re-inserted: the most recent)
        plan, inputs, values = _recent[seen] = found
    else:
        plan, inputs, values = _planned(roots, devices)
        if sum(b.nbytes for b in inputs) <= RECENT_BYTES:
            _recent[seen] = plan, inputs, values
            if len(_recent) > RECENT:
                _recent.popitem(last=False)
    if Context.DEBUG >= 4:
        print_plan(roots, inputs, plan)
    if (trace := recorder.ACTIVE) is not None:
        trace.planned(roots, plan, inputs)
    return plan, inputs, values


def _planned(roots: list[UOp], devices: list[str]) -> tuple[Plan, list[Buffer], dict[UOp, int]]:
    """The plan for ``roots`` from the plan cache (made on a miss): its key is the graph with
    each buffer a numbered PARAM (``abstract``), so that any buffers of the same sizes share it."""
    abstract_roots, inputs, values = abstract(roots)
    key = (abstract_roots, tuple(devices), tuple(b.device for b in inputs))
    plan = _plans.get(key)
    if plan is None:
        slot_devices = [b.device for b in inputs]
        plan = _plans[key] = make_plan(abstract_roots, list(devices), slot_devices, capabilities)
    return plan, inputs, values


def print_plan(roots: list[UOp], inputs: list[Buffer], plan: Plan) -> None:
    """``DEBUG=4``'s start: the tensor graph being realized, then its schedule (the kernels, the
    buffers each reads and writes, as slots, and why the graph was cut there)."""
    slot_of = {id(b): i for i, b in enumerate(inputs)}

    def buffer_text(u: UOp) -> str:
        return f"slot {slot_of[id(u.arg)]} {u.arg!r}" if u.op is Ops.BUFFER else ""

    print_listing("tensor graph", toposort(roots), shapes=True, arg_text=buffer_text)
    print("--- schedule ---")
    n = plan.n_inputs
    inputs_text = (
        f"slots 0-{n - 1} are the inputs" if n > 1 else "slot 0 is the input" if n else "no inputs"
    )
    print(f"{len(plan.steps)} step(s); {inputs_text}")
    for i, step in enumerate(plan.steps):
        if isinstance(step, KernelStep):
            writes = []
            for out in step.slots[: step.writes]:
                if out < plan.n_inputs:  # an in-place write into an input's buffer
                    writes.append(f"slot {out} (in place)")
                    continue
                size, dtype, _ = plan.new_slots[out - plan.n_inputs]
                writes.append(f"slot {out} ({dtype.name}[{size}])")
            reads = ", ".join(map(str, step.slots[step.writes :])) or "nothing"
            print(
                f"{i:4d} {kernel_name(step.ast):<16s} {step.device:<6s} writes "
                f"{', '.join(writes)}, reads {reads}\n       cut: {step.reason}"
            )
        else:
            print(f"{i:4d} {'copy':<20s} writes slot {step.dest}, reads {step.source}")


def capabilities(device: str) -> Capabilities:
    """What the scheduler's layout pass needs to know of ``device`` (opening it)."""
    return Capabilities.of(Device[device].renderer)


def open_device(device: str) -> None:
    """Open ``device`` now, so that a name that cannot be used fails early and clearly."""
    Device[device]


def plan_for(roots: list[UOp], devices: list[str]) -> Plan:
    """The (cached) plan that would realize ``roots``."""
    return _plan(roots, devices)[0]


#: one device's work, planned: its plan, the buffers bound to its inputs, its variables' values
Planned = tuple[Plan, list[Buffer], dict[UOp, int]]


def realize_on_devices(work: dict[str, list[UOp]]) -> dict[str, list[Buffer]]:
    """Realize each device's ``roots`` (``realize_uops`` on that device): plans are made and
    kernels compiled here, then the devices' plans run at the same time (``run_on_devices``)."""
    return run_on_devices(plan_on_devices(work))


def plan_on_devices(work: dict[str, list[UOp]]) -> dict[str, Planned]:
    """Each device's (cached) plan for its ``roots``, its kernels compiled and loaded, so that
    running it needs nothing more of the compiler threads."""
    planned = {device: _plan(roots, [device] * len(roots)) for device, roots in work.items()}
    for plan, _, _ in planned.values():
        if not plan.compiled:
            compile_steps(plan.steps)
            plan.compiled = True
        for step in plan.steps:
            if type(step) is KernelStep and step.runner is None:
                step.runner = get_runner(step.ast, step.device)
    return planned


def run_on_devices(planned: dict[str, Planned]) -> dict[str, list[Buffer]]:
    """Run each device's planned work; return each device's output buffers. The devices' plans
    run at the same time, one thread each (a kernel call releases the GIL), so independent work
    of different devices overlaps. Under TinyJit's capture, whose recording lives in this
    thread, they run one after the other."""

    def run(device: str) -> list[Buffer]:
        plan, inputs, values = planned[device]
        buffers = run_plan(plan, inputs, values)
        return [buffers[s] for s in plan.outputs]

    if len(planned) < 2 or capture.active() is not None:
        return {device: run(device) for device in planned}
    if not _device_pool or _device_pool[0][1] < len(planned):
        if _device_pool:
            _device_pool[0][0].shutdown(wait=False)
        _device_pool[:] = [(ThreadPoolExecutor(len(planned), "fusegrad-device"), len(planned))]
    jobs = {device: _device_pool[0][0].submit(run, device) for device in planned}
    return {device: job.result() for device, job in jobs.items()}


#: the threads that run several devices' plans at once, and how many there are
_device_pool: list[tuple[ThreadPoolExecutor, int]] = []


def realize_uops(roots: list[UOp], devices: list[str], ready: Ready | None = None) -> list[Buffer]:
    """Compute ``roots`` (tensor-graph nodes on ``devices``); return one 1-d buffer for each.
    ``ready(indexes, buffers)``: see ``run_plan``."""
    if (active := profiler.ACTIVE) is not None:
        with active.timed("schedule", "schedule", "schedule", {"roots": len(roots)}):
            plan, inputs, values = _plan(roots, devices)
    else:
        plan, inputs, values = _plan(roots, devices)
    buffers = run_plan(plan, inputs, values, ready)
    return [buffers[s] for s in plan.outputs]
