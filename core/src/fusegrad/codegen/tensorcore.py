"""Tensor cores: a half-precision matmul as warp-wide matrix multiply-accumulate instructions.

A GPU's tensor cores multiply small matrices in one instruction issued by a whole warp: NVIDIA's
``mma.sync.aligned.m16n8k16`` takes a 16x16 tile of ``A`` and a 16x8 tile of ``B`` (float16 or
bfloat16) and adds their product to a 16x8 tile of float32 accumulators, 2048 multiply-adds at
a time where a thread's FMA does one. The operands and the accumulators are spread over the
warp's 32 lanes by a fixed *fragment layout*: each lane holds 8 elements of ``A``, 4 of ``B``
and 4 of the result, at positions that are functions of its lane number (``TensorCore``'s
``a_position``, ``b_position``, ``c_position``, from the PTX ISA's description of the
instruction). It passes ``A`` and ``B`` as 32-bit registers of two neighbours along ``k``.

A renderer declares the instructions it has (``Renderer.tensor_cores``). A float sum of products
of two float16 (or two bfloat16) operands, cast to float32 (what ``a @ b`` builds for halves: the
products are exact in float32), over one axis, in any layout the tiled plan takes (transposed,
batched, with work before the product and after the sum: codegen/tiled.py ``matmul_axes``) then
runs as ``TensorCores``: a group of ``warps`` warps computes a block of outputs, each warp a grid
of ``tiles`` instruction tiles, each lane the accumulators its fragments say::

    acc[tiles][4] = 0
    for kt < K / 16:                                                   (ridx, REDUCE)
      for i < tiles.rows: a[4] = pairs of A'[rows of lane's a_position(i), k]  (UPCAST)
        for j < tiles.cols: b[2] = pairs of B'[k of lane's b_position, cols]   (UPCAST)
          mma(acc[i][j], a, b)                                        (WMMA, the whole warp)
    for i, j, e < 4: out[position c_position(e) of tile i, j] = epilogue(acc[i][j][e])

Each fragment element is read through the kernel's own lowering (``A'``: the operand with its
prologue), so every layout the plain tiled plan runs, this runs; with ``TensorCores.stage``
a group first copies its operands' tiles into shared memory, already packed in registers, and
the warps load their fragments from there. Rows and columns past the end are clamped to the
last one (the thread computes it again and stores the same value, as in the tiled plan) and
``k`` past the end reads zeros, so no shape needs padding. The epilogue (bias, activation, the
cast back to half) is applied to each accumulator as it is stored.

In the IR the instruction is ``WMMA`` (arg ``(TensorCore, element)``). Lowered, one ``WMMA`` per
result element ``e`` is a value: element ``e`` of this lane's share of the warp's product of the
fragment registers in its sources (uint32: 4 of ``A``, 2 of ``B``, packed by ``pack``), so
``REDUCE(ADD, WMMA_e, kt)`` is the accumulator and simplification and decomposition treat it as
any value (a bfloat16 is packed from core's float32 emulation by its top 16 bits). The
linearizer turns the four elements into one statement, ``WMMA(INDEX(acc, base), a0..a3, b0,
b1)`` with element None: add the product into ``acc[base .. base+3]`` in place, which the CUDA
renderer spells as inline PTX.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from fusegrad.codegen.decompose import decompose
from fusegrad.codegen.hints import hint_loops
from fusegrad.codegen.linearize import Linearizer, ranges_used
from fusegrad.codegen.lower import Lowerer, clamp, flatten, idx_const
from fusegrad.codegen.rules import CORE_RULES, CodegenRules
from fusegrad.codegen.tiled import group_index, matmul_axes, reduced_axes
from fusegrad.codegen.verify import verify_program
from fusegrad.dtype import DType, dtypes
from fusegrad.errors import SpecError
from fusegrad.helpers import Context, prod
from fusegrad.renderer import Renderer
from fusegrad.uop.loops import AxisCounter, AxisKind
from fusegrad.uop.ops import Ops, UOp, substitute, toposort
from fusegrad.uop.pattern import graph_rewrite
from fusegrad.uop.spec import DECOMPOSED, LINEAR, LOWERED, problem_with

# ---- the instruction ---------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorCore:
    """One warp-wide matrix multiply-accumulate a target has: ``D (m x n, acc) = A (m x k, in) @
    B (k x n, in) + C``, with ``A`` row-major and ``B`` column-major in the fragments.

    Only the fragment layout of ``m16n8k16`` (PTX ``mma.sync``, sm_80 and later, float16 or
    bfloat16 in, float32 accumulators) is known; other shapes are refused when declared."""

    dims: tuple[int, int, int] = (16, 8, 16)
    dtype_in: DType = dtypes.float16
    dtype_acc: DType = dtypes.float32
    #: lanes that issue the instruction together (a warp)
    threads: int = 32

    def __post_init__(self) -> None:
        if self.dims != (16, 8, 16) or self.threads != 32:
            raise ValueError(f"unknown tensor-core fragment layout m{self.dims}: declare m16n8k16")
        if self.dtype_in not in (dtypes.float16, dtypes.bfloat16):
            raise ValueError(f"m16n8k16 takes float16 or bfloat16, not {self.dtype_in.name}")

    @property
    def elements(self) -> tuple[int, int, int]:
        """Elements each lane holds of ``A``, ``B`` and the result: 8, 4, 4."""
        m, n, k = self.dims
        return m * k // self.threads, k * n // self.threads, m * n // self.threads

    @property
    def registers(self) -> tuple[int, int]:
        """32-bit registers each lane passes of ``A`` and ``B``: 4, 2. Register ``r`` holds
        elements ``2r`` (low half) and ``2r + 1`` (high half), which the layout puts next to each
        other along ``k``."""
        return self.elements[0] // 2, self.elements[1] // 2

    # the fragment layout of mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"): lane
    # l is thread ``l % 4`` of group ``l // 4``; work on ints and on UOps alike

    def a_position(self, lane, e: int):
        """(row, k) of element ``e`` (0-7) of ``A`` held by ``lane``: pairs along ``k``, the
        second pair 8 rows down, the second four 8 columns on."""
        return lane // 4 + 8 * (e // 2 % 2), lane % 4 * 2 + e % 2 + 8 * (e // 4)

    def b_position(self, lane, e: int):
        """(k, col) of element ``e`` (0-3) of ``B`` held by ``lane``."""
        return lane % 4 * 2 + e % 2 + 8 * (e // 2), lane // 4

    def c_position(self, lane, e: int):
        """(row, col) of element ``e`` (0-3) of the result held by ``lane``."""
        return lane // 4 + 8 * (e // 2), lane % 4 * 2 + e % 2


#: what ``mma.sync.aligned.m16n8k16`` offers on sm_80 and later (CUDA renderer)
MMA_M16N8K16 = (
    TensorCore((16, 8, 16), dtypes.float16, dtypes.float32),
    TensorCore((16, 8, 16), dtypes.bfloat16, dtypes.float32),
)


# ---- the plan ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorCores:
    """A tensor-core matmul's launch: output axes ``rows`` (m) and ``cols`` (n), the
    instruction, ``warps`` per group and instruction ``tiles`` per warp, each as ``(along rows,
    along cols)``; ``stage``: how deep (along the sum) the operand tiles copied to shared memory
    are, 0 to read the fragments from the operands themselves."""

    rows: int
    cols: int
    core: TensorCore
    warps: tuple[int, int] = (2, 2)
    tiles: tuple[int, int] = (2, 4)
    stage: int = 0

    @property
    def warp_block(self) -> tuple[int, int]:
        """Outputs per warp along rows and columns."""
        return self.tiles[0] * self.core.dims[0], self.tiles[1] * self.core.dims[1]

    @property
    def block(self) -> tuple[int, int]:
        """Outputs per group along rows and columns."""
        return self.warps[0] * self.warp_block[0], self.warps[1] * self.warp_block[1]

    @property
    def threads(self) -> int:
        """Threads per group: its warps' lanes."""
        return prod(self.warps) * self.core.threads

    def groups(self, shape: tuple[int, ...]) -> int:
        """Groups in the launch: blocks of rows x blocks of columns x the other axes."""
        rows, cols = (-(-shape[a] // b) for a, b in zip((self.rows, self.cols), self.block))
        others = prod(s for d, s in enumerate(shape) if d not in (self.rows, self.cols))
        return rows * cols * others

    def to_json(self) -> dict:
        """The plan as JSON data (BEAM's disk cache keeps its winner so)."""
        core = self.core
        return {
            "rows": self.rows,
            "cols": self.cols,
            "warps": self.warps,
            "tiles": self.tiles,
            "stage": self.stage,
            "core": [core.dims, core.dtype_in.name, core.dtype_acc.name],
        }

    @staticmethod
    def from_json(data: dict) -> TensorCores:
        """The plan ``to_json`` wrote."""
        dims, dtype_in, dtype_acc = data["core"]
        core = TensorCore(tuple(dims), dtypes.from_name(dtype_in), dtypes.from_name(dtype_acc))
        warps, tiles = tuple(data["warps"]), tuple(data["tiles"])
        rows, cols, stage = data["rows"], data["cols"], data["stage"]
        return TensorCores(rows, cols, core, warps, tiles, stage)


@dataclass(frozen=True)
class _Split:
    """A matmul kernel lowered with a placeholder (``spots``) for the position in the block along
    rows and along columns: the result, its one sum, the loop it sums over, and the two operands
    below their casts to the accumulator's type (``a`` follows the rows)."""

    result: UOp
    index: tuple[UOp, ...]
    reduce: UOp
    k_loop: UOp
    a: UOp
    b: UOp
    spots: tuple[UOp, UOp]
    lowerer: Lowerer


def _split(ast: UOp, plan: TensorCores) -> _Split | None:
    """``ast`` lowered for ``plan``'s blocks, or None when its sum is not of a product of two
    half-precision operands cast to float32, one following the rows and the other the columns."""
    shape = ast.src[0].src[1].shape
    lowerer = Lowerer(axes=AxisCounter())
    count = plan.groups(shape)
    group = UOp(Ops.SPECIAL, dtypes.index, (), ("group0", count)) if count > 1 else idx_const(0)
    spots = tuple(
        UOp(Ops.SPECIAL, dtypes.index, (), (f"spot{i}", b)) for i, b in enumerate(plan.block)
    )

    def position(i: int, block: UOp, size: int) -> UOp:
        at = block * plan.block[i] + spots[i]
        return clamp(at, 0, size - 1) if size % plan.block[i] else at

    # (group_index reads only the fields Tiles and TensorCores share: rows, cols, block)
    index = group_index(plan, shape, group, position)  # type: ignore[arg-type]
    lowered = lowerer.lower(ast.src[0].src[1], index, UOp.const(dtypes.bool, True))
    # simplified with the placeholders' bounds, so that an operand's address no longer seems to
    # follow the other axis (``(spot0*64 + spot1) // 64`` is ``spot0``); the positions put in
    # their place later lie in the same ranges
    result = graph_rewrite(UOp(Ops.SINK, dtypes.void, (lowered,)), CORE_RULES.kernel).src[0]
    reduces = [u for u in toposort([result]) if u.op is Ops.REDUCE]
    if len(reduces) != 1 or len(reduces[0].src) != 2 or reduces[0].dtype != dtypes.float32:
        return None
    reduce, product = reduces[0], reduces[0].src[0]
    if product.op is not Ops.MUL or any(s.op is not Ops.CAST for s in product.src):
        return None
    a, b = (s.src[0] for s in product.src)
    if spots[0] not in toposort([a]):
        a, b = b, a
    nodes_a, nodes_b = set(toposort([a])), set(toposort([b]))
    if spots[1] in nodes_a or spots[0] in nodes_b or a.dtype != b.dtype:
        return None
    return _Split(result, index, reduce, reduce.src[1], a, b, (spots[0], spots[1]), lowerer)


def plan_tensor_cores(
    ast: UOp,
    renderer: Renderer,
    warps: tuple[int, int] = (2, 2),
    tiles: tuple[int, int] = (2, 4),
    stage: int | None = None,
) -> TensorCores | None:
    """The tensor-core launch of ``ast`` on ``renderer`` (``warps`` x ``tiles`` shrunk to the
    output, its operands staged ``stage`` deep in shared memory: by default ``STAGE`` where the
    renderer has enough and ``stage_tiles`` says so), or None: the renderer has no tensor cores
    for the operands' dtype, the kernel is not a half-precision matmul summed in float32 over
    one axis, its sizes are variables, or ``NOOPT``."""
    if not renderer.tensor_cores or renderer.grid_dims is None or Context.NOOPT:
        return None
    if len(ast.src) != 1:  # (several outputs: an elementwise kernel's, never a matmul's)
        return None
    shape = ast.src[0].src[1].shape
    if not all(isinstance(s, int) for s in shape) or (axes := matmul_axes(ast)) is None:
        return None
    if reduced_axes(ast) != 1:
        return None
    for core in renderer.tensor_cores:
        plan = fit(TensorCores(axes[0], axes[1], core, warps, tiles), shape, renderer)
        split = _split(ast, plan) if plan is not None else None
        if plan is not None and split is not None and split.a.dtype == core.dtype_in:
            depth = (STAGE if renderer.stage_tiles else 0) if stage is None else stage
            return with_stage(plan, renderer, depth) or plan
    return None


#: how deep (along the sum) the shared operand tiles are by default: two instructions' ``k``
STAGE = 32


def shared_bytes(plan: TensorCores) -> int:
    """Bytes of shared memory ``plan``'s two operand tiles take (rows of 32-bit words)."""
    return sum(plan.block) * (plan.stage // 2 + SHARED_PAD_WORDS) * 4


def with_stage(plan: TensorCores, renderer: Renderer, depth: int) -> TensorCores | None:
    """``plan`` with its operands staged ``depth`` deep in shared memory, or None where that
    cannot be: no shared memory, a depth that is not a multiple of the instruction's ``k``,
    tiles the group's threads do not fill evenly, more shared memory than the renderer has."""
    staged = replace(plan, stage=depth)
    if depth <= 0 or not renderer.has_local or depth % plan.core.dims[2]:
        return None
    if any(b * depth // 2 % plan.threads for b in plan.block):
        return None
    return staged if shared_bytes(staged) <= renderer.local_memory_bytes else None


def fit(plan: TensorCores, shape: tuple[int, ...], renderer: Renderer) -> TensorCores | None:
    """``plan`` shrunk to the output, tiles per warp first (no block twice its axis or more:
    half the warp would only repeat the last outputs), or None when the groups would not fit
    the grid or the group size."""
    tiles, warps = list(plan.tiles), list(plan.warps)
    for i, axis in enumerate((plan.rows, plan.cols)):
        step = plan.core.dims[i]
        while tiles[i] > 1 and warps[i] * tiles[i] * step >= 2 * shape[axis]:
            tiles[i] //= 2
        while warps[i] > 1 and warps[i] * tiles[i] * step >= 2 * shape[axis]:
            warps[i] //= 2
    fitted = replace(plan, warps=(warps[0], warps[1]), tiles=(tiles[0], tiles[1]))
    if fitted.threads > renderer.max_group_size or fitted.groups(shape) > renderer.global_max[0]:
        return None
    return fitted


#: the warps per group and tiles per warp BEAM search times (codegen/search.py)
BEAM_WARPS = ((2, 2), (4, 2), (2, 4), (1, 1), (4, 4))
BEAM_TILES = ((2, 4), (1, 2), (2, 2), (4, 4), (4, 8))
BEAM_STAGES = (16, 32, 64)


def tensor_core_options(ast: UOp, renderer: Renderer) -> list[TensorCores]:
    """The tensor-core plans BEAM search times beside the tiled plans (so it can turn tensor
    cores off by picking a faster plain one): the default first, then ``BEAM_WARPS`` x
    ``BEAM_TILES`` fitted to the output, each unstaged and staged ``BEAM_STAGES`` deep where it
    can be; [] when the kernel cannot use tensor cores."""
    if (base := plan_tensor_cores(ast, renderer)) is None:
        return []
    shape = ast.src[0].src[1].shape
    plans = [
        fit(replace(base, warps=w, tiles=t, stage=0), shape, renderer)
        for w in BEAM_WARPS
        for t in BEAM_TILES
    ]
    unstaged = [p for p in plans if p is not None]
    staged = [with_stage(p, renderer, d) for p in unstaged for d in BEAM_STAGES]
    return list(dict.fromkeys([base, *unstaged, *(p for p in staged if p is not None)]))


# ---- lowering ----------------------------------------------------------------------------------


def lower_tensor_cores(ast: UOp, plan: TensorCores) -> UOp:
    """Lower ``SINK(STORE(PARAM, value))`` for ``plan``: one STORE per result element a lane
    holds, of the epilogue applied to ``REDUCE(ADD, WMMA_e(fragments), kt[, ks])``, inside the
    two ``UPCAST`` loops over the warp's tiles; with ``plan.stage`` also the two STOREs that
    fill the shared operand tiles."""
    split = _split(ast, plan)
    if split is None:
        raise ValueError("a tensor-core plan needs a half-precision matmul: wrongly planned")
    core, lowerer, shape = plan.core, split.lowerer, ast.src[0].src[1].shape
    thread = UOp(Ops.SPECIAL, dtypes.index, (), ("lidx0", plan.threads))
    warp, lane = thread // core.threads, thread % core.threads
    corner = (
        (warp // plan.warps[1]) * plan.warp_block[0],
        (warp % plan.warps[1]) * plan.warp_block[1],
    )
    tile = tuple(lowerer.new_range(t, AxisKind.UPCAST) for t in plan.tiles)
    m, n, _ = core.dims
    # each fragment register as (position in the group's block, k of its first element in this
    # step of the sum): registers hold elements 2r and 2r + 1, at k and k + 1
    firsts = [core.a_position(lane, 2 * r) for r in range(core.registers[0])]
    a_at = [(corner[0] + tile[0] * m + row, k) for row, k in firsts]
    firsts = [core.b_position(lane, 2 * r) for r in range(core.registers[1])]
    b_at = [(corner[1] + tile[1] * n + col, k) for k, col in firsts]
    reader = _SharedReader(split, plan, thread) if plan.stage else _DirectReader(split, plan)
    a_frag = [reader.register(0, at, k) for at, k in a_at]
    b_frag = [reader.register(1, at, k) for at, k in b_at]
    out = ast.src[0].src[0]
    flat = flatten(split.index, shape)
    writes = []
    for e in range(core.elements[2]):
        mma = UOp(Ops.WMMA, core.dtype_acc, (*a_frag, *b_frag), (core, e))
        row, col = core.c_position(lane, e)
        place = {
            split.spots[0]: corner[0] + tile[0] * m + row,
            split.spots[1]: corner[1] + tile[1] * n + col,
        }
        summed = UOp(Ops.REDUCE, core.dtype_acc, (mma, *reader.loops), Ops.ADD)
        value = substitute(split.result, {split.reduce: summed, **place})
        at = UOp(Ops.INDEX, out.dtype, (out, substitute(flat, place)))
        writes.append(UOp(Ops.STORE, dtypes.void, (at, value)))
    return UOp(Ops.SINK, dtypes.void, (*writes, *reader.fills))


def pack(low: UOp, high: UOp) -> UOp:
    """Two 16-bit values as the 32-bit register an mma takes: ``low`` in bits 0-15."""
    u16, u32 = dtypes.uint16, dtypes.uint32
    low, high = (UOp(Ops.BITCAST, u16, (x,)).cast(u32) for x in (low, high))
    return low | UOp(Ops.SHL, u32, (high, UOp.const(u32, 16)))


def _operand(split: _Split, i: int, at: UOp, k: UOp) -> UOp:
    """Operand ``i`` (0: ``A``, 1: ``B``, below its cast) at block position ``at`` and ``k`` of
    the sum; 0 past the sum's end, where the address is clamped to its last element."""
    side, size = (split.a, split.b)[i], split.k_loop.src[0].arg
    inside = k.vmax < size
    value = substitute(
        side, {split.spots[i]: at, split.k_loop: k if inside else clamp(k, 0, size - 1)}
    )
    return value if inside else k.lt(size).where(value, UOp.const(value.dtype, 0))


class _DirectReader:
    """Fragments read from the operands themselves (global memory): one loop over the sum in
    steps of the instruction's ``k``."""

    def __init__(self, split: _Split, plan: TensorCores):
        self.split, self.depth = split, plan.core.dims[2]
        self.kt = split.lowerer.new_range(
            -(-split.k_loop.src[0].arg // self.depth), AxisKind.REDUCE
        )
        self.loops, self.fills = (self.kt,), ()

    def register(self, i: int, at: UOp, k: UOp) -> UOp:
        """The register of operand ``i`` at block position ``at``, ``k`` and ``k + 1``."""
        k = self.kt * self.depth + k
        return pack(_operand(self.split, i, at, k), _operand(self.split, i, at, k + 1))


#: a shared tile's rows are this many 32-bit words longer than its ``stage / 2`` words, so that
#: the eight rows a fragment load reads start in different banks (rows of 20 words: 0, 20, 8,
#: 28, ... mod 32, each with 4 neighbouring words: all 32 banks once)
SHARED_PAD_WORDS = 4


class _SharedReader:
    """Fragments read from shared memory: per step of ``plan.stage`` along the sum (``kt``), the
    group copies a ``block x stage`` tile of each operand into a shared array, as the registers
    the mma takes: row ``p`` (the position in the block) holds its ``stage / 2`` pairs of
    neighbouring ``k`` as 32-bit words, so each fragment register is one load. Each thread
    copies a few words, neighbouring threads neighbouring words: along ``k`` for ``A`` (a
    row-major left operand is then read in runs), along the block for ``B``. The warps then
    read their fragments from the tiles, ``stage / 16`` instructions deep (``ks``)."""

    def __init__(self, split: _Split, plan: TensorCores, thread: UOp):
        self.split, self.plan, depth = split, plan, plan.stage
        lowerer = split.lowerer
        self.kt = lowerer.new_range(-(-split.k_loop.src[0].arg // depth), AxisKind.REDUCE)
        self.ks = lowerer.new_range(depth // plan.core.dims[2], AxisKind.REDUCE)
        self.loops = (self.kt, self.ks)
        self.stride = depth // 2 + SHARED_PAD_WORDS  # words per row of a tile
        self.shared = tuple(
            UOp(Ops.DEFINE_LOCAL, dtypes.uint32, (), (i, b * self.stride))
            for i, b in enumerate(plan.block)
        )
        self.fills = tuple(self._fill(i, thread) for i in range(2))

    def _fill(self, i: int, thread: UOp) -> UOp:
        """The STORE of this thread's share of operand ``i``'s tile: word ``s * threads + thread``
        of it, counted along ``k`` first for ``A``, along the block first for ``B``."""
        block, pairs, threads = self.plan.block[i], self.plan.stage // 2, self.plan.threads
        step = self.split.lowerer.new_range(block * pairs // threads, AxisKind.UPCAST)
        word = step * threads + thread
        pair, at = (word % pairs, word // pairs) if i == 0 else (word // block, word % block)
        k = self.kt * self.plan.stage + pair * 2
        value = pack(_operand(self.split, i, at, k), _operand(self.split, i, at, k + 1))
        index = UOp(Ops.INDEX, dtypes.uint32, (self.shared[i], at * self.stride + pair))
        return UOp(Ops.STORE, dtypes.void, (index, value))

    def register(self, i: int, at: UOp, k: UOp) -> UOp:
        """The register of operand ``i`` at block position ``at``, ``k`` and ``k + 1`` of this
        instruction step (``k`` even)."""
        pair = self.ks * (self.plan.core.dims[2] // 2) + k // 2
        index = UOp(Ops.INDEX, dtypes.uint32, (self.shared[i], at * self.stride + pair))
        return UOp(Ops.LOAD, dtypes.uint32, (index,))


# ---- linearisation -----------------------------------------------------------------------------


class TensorCoreLinearizer(Linearizer):
    """Places a tensor-core matmul (from ``lower_tensor_cores``): the accumulators set to 0, the
    loop over ``k`` steps (``kt``) with, when staged, the fills of the shared tiles and a barrier
    before the loop over the instructions' steps in them (``ks``) and one after; inside, the tile
    loops and one in-place ``WMMA`` per tile. Then the tile loops again with the epilogue's
    stores (``place_rest``)."""

    def linearize(self) -> list[UOp]:
        mmas = {red.src[0].arg[1]: red for red in self.reduces}
        first = self.reduces[0]
        wmma, (kt, *inner) = first.src[0], first.src[1:]
        core: TensorCore = wmma.arg[0]
        fills = [w for w in self.sink.src if w.src[0].src[0].op is Ops.DEFINE_LOCAL]
        fill_loops = {f: next(r for r in self.used[f] if r is not kt) for f in fills}
        self.upcast = ups = [u for u in self.upcast if u not in fill_loops.values()]
        sizes = [u.src[0].arg for u in ups]
        per_tile = core.elements[2]
        free = [u for u in self.order if not self.used[u] and u not in self.after]
        self.place([u for u in free if u.op not in (Ops.STORE, Ops.SINK)])
        acc = UOp(Ops.DEFINE_REG, core.dtype_acc, (), (0, prod(sizes) * per_tile))
        zero = UOp.const(core.dtype_acc, 0)
        init = self.axes.range(acc.arg[1], AxisKind.UPCAST)
        self.place([zero, acc, init.src[0], init])
        self.place_tree(UOp(Ops.STORE, src=(UOp(Ops.INDEX, core.dtype_acc, (acc, init)), zero)))
        self.close([init])
        self.place([kt.src[0], kt])
        for fill, loop in fill_loops.items():
            self.place(
                [u for u in toposort([fill]) if self.used[u] <= {kt} and u.op is not Ops.STORE]
            )
            self.place([loop.src[0], loop])
            self.place_tree(fill)
            self.close([loop])
        if fills:  # every tile is in shared memory before any warp reads it
            self.place([UOp(Ops.BARRIER, src=tuple(fills))])
        base = _tile_number(ups, sizes) * per_tile
        at = UOp(Ops.INDEX, core.dtype_acc, (acc, base))
        step = UOp(Ops.WMMA, dtypes.void, (at, *wmma.src), (core, None))
        used = {**self.used, **ranges_used(toposort([step]))}
        body = [u for u in toposort([step]) if u not in self.placed]
        self.place_nested([*inner, *ups], {kt}, body, used)
        self.close([*inner, *ups])
        if fills:  # every warp has read the tiles before the next step overwrites them
            self.place([UOp(Ops.BARRIER, src=(step,))])
        end = UOp(Ops.END, src=(kt,))
        self.place([end])

        def result(e: int):
            def read(copies: dict[UOp, UOp]) -> UOp:
                slot = _tile_number([copies[u] for u in ups], sizes) * per_tile + e
                return UOp(
                    Ops.LOAD, core.dtype_acc, (UOp(Ops.INDEX, core.dtype_acc, (acc, slot)), end)
                )

            return read

        self.place_rest({red: result(e) for e, red in mmas.items()})
        return self.program


def _tile_number(loops: list[UOp], sizes: list[int]) -> UOp:
    """The flat number of the tile at ``loops`` in a grid of ``sizes``."""
    out = loops[0]
    for loop, size in zip(loops[1:], sizes[1:]):
        out = out * size + loop
    return out


def linearize_tensor_cores(sink: UOp) -> list[UOp]:
    """Order a tensor-core graph (from ``lower_tensor_cores``) into a program."""
    return hint_loops(TensorCoreLinearizer(sink).linearize())


# ---- checks and the pipeline -------------------------------------------------------------------


def wmma_problem(u: UOp) -> str | None:
    """What is wrong with a ``WMMA``, or None: a ``(TensorCore, element)`` arg, its fragment
    registers' count and dtype (uint32), and as a value (lowered) the accumulator's dtype, as a
    statement (linear) an INDEX into a register array first, whose four elements it holds."""
    if not (isinstance(u.arg, tuple) and len(u.arg) == 2 and isinstance(u.arg[0], TensorCore)):
        return f"its arg {u.arg!r} is not (TensorCore, element)"
    core, element = u.arg
    fragments = u.src if element is not None else u.src[1:]
    if len(fragments) != sum(core.registers):
        return f"it has {len(fragments)} fragment registers, expected {sum(core.registers)}"
    if any(f.dtype != dtypes.uint32 for f in fragments):
        return "its fragment registers are not all uint32"
    if element is None:
        at = u.src[0]
        if at.op is not Ops.INDEX or at.src[0].op is not Ops.DEFINE_REG:
            return "an in-place WMMA's first source is not an INDEX into a register array"
        lo, hi = at.src[1].bounds
        if lo < 0 or hi + core.elements[2] > at.src[0].arg[1]:
            return f"its accumulators [{lo}, {hi} + {core.elements[2]}) leave the register array"
        return None
    return None if u.dtype == core.dtype_acc else f"its dtype is not {core.dtype_acc.name}"


def check_tensor_core_stage(uops: UOp | Iterable[UOp], stage: str) -> None:
    """``uop/spec.py``'s check of ``stage``, with ``WMMA`` checked by ``wmma_problem`` (a
    linear program may also hold the in-place statement's INDEX into the accumulators)."""
    if not Context.VERIFY:
        return
    for u in toposort([uops]) if isinstance(uops, UOp) else list(uops):
        problem = wmma_problem(u) if u.op is Ops.WMMA else problem_with(u, stage)
        if problem is not None:
            raise SpecError(f"{u.op.name} {u.dtype.name} is not valid in the {stage}: {problem}")


def tensor_core_program(
    ast: UOp,
    renderer: Renderer,
    plan: TensorCores,
    rules: CodegenRules = CORE_RULES,
    name: str = "tensor-core matmul",
) -> list[UOp]:
    """The linear program of ``ast`` run as ``plan``: lowered, simplified, decomposed, ordered and
    checked as ``codegen/kernel.py``'s ``generate`` does for its plans."""
    graph = lower_tensor_cores(ast, plan)
    check_tensor_core_stage(graph, LOWERED)
    graph = decompose(graph_rewrite(graph, rules.kernel), renderer)
    if rules.program is not None:
        graph = graph_rewrite(graph, rules.program)
    check_tensor_core_stage(graph, DECOMPOSED)
    program = linearize_tensor_cores(graph)
    check_tensor_core_stage(program, LINEAR)
    if Context.VERIFY:
        verify_program(name, program, renderer)
    return program
