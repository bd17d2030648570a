"""From a kernel AST to source text: lower, simplify, decompose, linearise, render."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fusegrad.codegen.decompose import decompose
from fusegrad.codegen.gated import gate_kept_rows
from fusegrad.codegen.grid import (
    Groups,
    launch_size,
    linearize_grouped,
    lower_grouped,
    plan_groups,
)
from fusegrad.codegen.linearize import linearize
from fusegrad.codegen.lower import INDEX32_LIMIT, index_type, lower_kernel
from fusegrad.codegen.opt import KernelOpts, heuristic_opts, symbolic_opts
from fusegrad.codegen.packed import pack_operands
from fusegrad.codegen.prefetch import prefetch_streams
from fusegrad.codegen.rules import CORE_RULES, CodegenRules
from fusegrad.codegen.split import split_index_sets
from fusegrad.codegen.staged import linearize_staged, lower_staged
from fusegrad.codegen.tensorcore import (
    TensorCores,
    check_tensor_core_stage,
    linearize_tensor_cores,
    lower_tensor_cores,
    plan_tensor_cores,
)
from fusegrad.codegen.tiled import Tiles, lower_tiled, plan_tiles
from fusegrad.codegen.verify import verify_program
from fusegrad.dtype import DType, dtypes
from fusegrad.errors import UnsupportedOp
from fusegrad.helpers import Context
from fusegrad.renderer import Renderer
from fusegrad.uop.listing import print_listing
from fusegrad.uop.ops import GroupOp, Ops, UOp, graph_variables, sym_max, toposort, variables_of
from fusegrad.uop.pattern import Fired, fired_summary, graph_rewrite, rules_fired
from fusegrad.uop.spec import DECOMPOSED, LINEAR, LOWERED, check_stage
from fusegrad.viz import recorder


@dataclass(frozen=True)
class KernelSource:
    """A rendered kernel and how to launch it."""

    name: str
    source: str
    program: tuple[UOp, ...]
    global_size: tuple[int, ...] | None
    n_buffers: int
    flops: int
    opts: KernelOpts | None = None
    ast: UOp | None = None  # what it was generated from (exporters re-render it)
    #: threads per group of a grid launch (None: the driver chooses); see codegen/grid.py
    local_size: tuple[int, ...] | None = None
    #: the variables (DEFINE_VAR) whose values the kernel takes after its buffers, in this order
    variables: tuple[UOp, ...] = ()


def kernel_name(ast: UOp) -> str:
    """``E_4_5`` for an elementwise kernel over a (4, 5) output, ``r_...`` when it reduces."""
    value = ast.src[0].src[1]
    nodes = toposort([value])
    reduces = [u for u in nodes if u.op is Ops.REDUCE_AXIS]
    shape = value.shape or (1,)
    dims = "_".join(map(_dim_name, shape))
    if reduces:
        red = reduces[0]
        reduced = [red.src[0].shape[a] for a in red.arg[1]]
        return f"r_{dims}_{'_'.join(map(_dim_name, reduced))}"
    return f"E_{dims}"


def _dim_name(size: int | UOp) -> str:
    """A size as part of a kernel's name: the number, or the variables it depends on."""
    if isinstance(size, int):
        return str(size)
    return "".join(u.arg[0] for u in toposort([size]) if u.op is Ops.DEFINE_VAR)


def _debug_stage(title: str, graph: UOp | list[UOp], fired: Fired | None = None) -> None:
    """At ``DEBUG>=4``, list a stage's result, one numbered line per node (``uop/listing.py``),
    and the rules that ``fired``; under ``VIZ`` record it (``viz/recorder.py``)."""
    if Context.DEBUG >= 4:
        print_listing(title, graph)
        if fired is not None:
            print(fired_summary(fired))
    if (trace := recorder.ACTIVE) is not None:
        trace.stage(title, graph, fired)


def _rewrite_stage(title: str, rewrite: Callable[[UOp], UOp], graph: UOp) -> UOp:
    """Run one rewriting stage; at ``DEBUG>=4`` (or under ``VIZ``) show its result and the
    rules that fired."""
    if Context.DEBUG < 4 and recorder.ACTIVE is None:
        return rewrite(graph)
    trace = recorder.ACTIVE
    keep = trace.firings_kept if trace is not None else 0  # VIZ steps through them
    with rules_fired(keep) as fired:
        graph = rewrite(graph)
    _debug_stage(title, graph, fired)
    return graph


_DEFAULT = object()
#: a target with this many vector registers (AVX-512) leaves a register tile's set-up and
#: epilogue as loops: gcc kept its accumulators in registers all the same
ROOMY_REGISTERS = 32
#: the titles of generate's rewriting stages in DEBUG=4's output (docs/architecture.md shows them)
SIMPLIFICATION = "symbolic simplification (kernel rules)"
SPLITTING = "index-set splitting (an innermost loop cut at the constants it is tested against)"
DECOMPOSITION = "decomposition (for what the renderer lacks)"
PROGRAM_RULES = "program rules (plugins)"


def generate(
    ast: UOp,
    renderer: Renderer,
    rules: CodegenRules = CORE_RULES,
    opts: KernelOpts | Tiles | TensorCores | None | object = _DEFAULT,
) -> KernelSource:
    """Turn a kernel AST into source for ``renderer`` (with ``opts``, else the heuristic's).

    A pure function of its arguments: the plugins' rewrite rules come in ``rules`` (an opened
    device's ``Runtime.rules``; core's alone by default), never from the plugin manager.

    On a grid device a long reduction may run as one group of threads per output instead
    (``codegen/grid.py``), and a matmul as tiles of outputs (``codegen/tiled.py``; ``opts``
    may be ``Tiles`` to choose their sizes), or a half-precision one on the renderer's tensor
    cores (``codegen/tensorcore.py``, ``TensorCores``); loop structures (``KernelOpts``) do not
    apply there.
    """
    _debug_stage("kernel AST", ast)
    grid = renderer.grid_dims is not None
    symbolic = bool(graph_variables([ast]))
    index = _index_type(ast, renderer, symbolic)
    narrow = index == dtypes.index
    chosen, group, tiles = _plan(ast, renderer, opts, grid and not symbolic and narrow, symbolic)
    if Context.DEBUG >= 4:
        print(f"--- optimisation ---\nloops: {chosen}\ngroups: {group}\ntiles: {tiles}")
    if (trace := recorder.ACTIVE) is not None:
        trace.choices(loops=chosen, groups=group, tiles=tiles)
    # (a tensor-core program holds WMMA ops, which its own check knows)
    check = check_tensor_core_stage if isinstance(tiles, TensorCores) else check_stage
    if isinstance(tiles, TensorCores):
        graph = lower_tensor_cores(ast, tiles)
    elif tiles is not None:
        graph = lower_staged(ast, tiles) if tiles.stage else lower_tiled(ast, tiles)
    elif group is not None:
        graph = lower_grouped(ast, group)
    else:
        graph = lower_kernel(ast, grid=grid, opts=chosen, index=index)
    _debug_stage("lowered", graph)
    check(graph, LOWERED)
    graph = _rewrite_stage(SIMPLIFICATION, lambda g: graph_rewrite(g, rules.kernel), graph)
    # (a stage of its own, listed by DEBUG=4 and VIZ, only for a kernel it changes)
    split = graph if grid else split_index_sets(graph, lambda g: graph_rewrite(g, rules.kernel))
    if split is not graph:
        graph = _rewrite_stage(SPLITTING, lambda _: split, graph)
    graph = _rewrite_stage(DECOMPOSITION, lambda g: decompose(g, renderer), graph)
    if (program_rules := rules.program) is not None:
        graph = _rewrite_stage(PROGRAM_RULES, lambda g: graph_rewrite(g, program_rules), graph)
    elif Context.DEBUG >= 4:
        print(f"--- {PROGRAM_RULES} ---\nno plugin adds program rules")
    check(graph, DECOMPOSED)
    mulacc = Ops.MULACC in renderer.native_ops
    roomy = renderer.vector_registers >= ROOMY_REGISTERS  # (codegen/hints.py)
    if isinstance(tiles, TensorCores):
        program = linearize_tensor_cores(graph)
    elif tiles is not None and tiles.stage:
        program = linearize_staged(graph)
    else:
        program = linearize_grouped(graph, group) if group else linearize(graph, mulacc, roomy)
    if not grid:  # (loop targets: codegen/packed.py, codegen/gated.py, codegen/prefetch.py)
        program = pack_operands(
            program, renderer.pack_bytes, renderer.transpose_block, renderer.group_pack_bytes
        )
        program = prefetch_streams(gate_kept_rows(program), renderer.prefetch_bytes)
    _debug_stage("linear program", program)
    check(program, LINEAR)
    name = kernel_name(ast)
    if Context.VERIFY:
        verify_program(name, program, renderer)
    source = renderer.render(name, program)
    if Context.DEBUG >= 4:
        print(f"--- rendered source ---\n{source}")
    global_size, local_size = launch_size(program, renderer)
    flops = count_flops(program)
    n_buffers = sum(1 for u in program if u.op is Ops.PARAM)
    if (trace := recorder.ACTIVE) is not None:
        trace.rendered(name, source, program, renderer, global_size, local_size, flops)
    return KernelSource(
        name,
        source,
        tuple(program),
        global_size,
        n_buffers,
        flops,
        chosen,
        ast,  # type: ignore[arg-type]
        local_size,
        variables_of(program),
    )


def _plan(
    ast: UOp, renderer: Renderer, opts: object, gridded: bool, symbolic: bool
) -> tuple[KernelOpts | None, Groups | None, Tiles | TensorCores | None]:
    """The kernel's shape: a loop structure (``opts``, else the heuristic's), or where it runs on
    a grid with fixed sizes and 32-bit indices (``gridded``) a grouped reduction, else tiles
    (only when ``opts`` is not given: None asks for one thread per output), on tensor cores
    where the renderer has them for its dtypes. Given ``Tiles`` or ``TensorCores`` are used as
    they are."""
    if isinstance(opts, Tiles | TensorCores):
        return None, None, opts if gridded else None
    if symbolic:  # sizes unknown until the launch: no groups (see uop.ops.Variable)
        return symbolic_opts(ast, renderer) if opts is _DEFAULT else None, None, None
    chosen = opts if isinstance(opts, KernelOpts) or opts is None else heuristic_opts(ast, renderer)
    if not gridded or chosen is not None:
        return chosen, None, None
    if (group := plan_groups(ast, renderer)) is not None:
        return None, group, None
    if opts is not _DEFAULT:
        return None, None, None
    return None, None, plan_tensor_cores(ast, renderer) or plan_tiles(ast, renderer)


def _index_type(ast: UOp, renderer: Renderer, symbolic: bool) -> DType:
    """The kernel's index type (``codegen/lower.py``'s ``index_type``); a 64-bit one is refused,
    before any code is made, where it cannot be rendered: a clear error instead of a kernel that
    does nothing or writes outside its buffers."""
    index = index_type(ast)
    if index == dtypes.index:
        return index
    if symbolic:
        problem = "its sizes are variables"
    elif dtypes.int64 not in renderer.supported_dtypes:
        problem = f"{type(renderer).__name__} has no 64-bit integers"
    else:
        return index
    raise UnsupportedOp(
        f"kernel {kernel_name(ast)} works on {INDEX32_LIMIT:,} or more elements, which needs "
        f"64-bit index arithmetic, and {problem}: split the tensor (e.g. with chunk) and "
        "work on the parts"
    )


def count_flops(program: list[UOp]) -> int:
    """Floating-point ALU ops the kernel executes: each op times the trips of its loops (at
    most: a loop whose size is a variable counts its largest)."""
    trips, total = [1], 0
    for u in program:
        if u.op is Ops.RANGE:
            trips.append(trips[-1] * sym_max(u.src[0]))
        elif u.op is Ops.END:
            trips.pop()
        elif u.op is Ops.SPECIAL:
            trips[-1] *= u.arg[1]
        elif u.op in GroupOp.ALU and u.dtype.is_float:
            total += trips[-1] * (2 if u.op is Ops.MULACC else 1)
    return total
