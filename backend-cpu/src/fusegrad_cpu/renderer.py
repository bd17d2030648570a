"""C for the host CPU: the core C-family renderer plus OpenMP on the output loop, and the
pragmas that make gcc vectorise the short upcast loops the way the optimiser meant, and the
innermost loop of elementwise kernels (each loop's hint is chosen by codegen/hints.py)."""

from __future__ import annotations

import functools
import glob
import os

from fusegrad.dtype import dtypes
from fusegrad.helpers import usable_cores
from fusegrad.renderer.cstyle import CStyleRenderer, RenderContext
from fusegrad.uop.loops import AxisKind, LoopHint
from fusegrad.uop.ops import GroupOp, Ops, UOp
from fusegrad.uop.pattern import PatternMatcher, UPat
from fusegrad_cpu.compiler import find_c_compiler, target_features


def vector_register_file(features: set[str]) -> tuple[int, int]:
    """(how many SIMD registers, bytes in each) that the target's code may use, from its feature
    flags (``compiler.target_features``: the processor's, or ``$FUSEGRAD_CPU_ARCH``'s): AVX-512
    has 32 of 64 bytes, AVX and AVX2 16 of 32, ARM's NEON 32 of 16, and SSE 16 of 16."""
    if "avx512f" in features:
        return 32, 64
    if "avx" in features:  # (every AVX2 processor lists avx too)
        return 16, 32
    if "asimd" in features:
        return 32, 16
    return 16, 16


CACHE_ROOT = "/sys/devices/system/cpu/cpu0/cache"


@functools.cache
def data_caches(root: str = CACHE_ROOT) -> dict[int, int]:
    """Level -> bytes of the first core's data (or unified) caches, as Linux lists them (empty
    when it does not: another system, or a container without /sys)."""
    found: dict[int, int] = {}
    for entry in glob.glob(os.path.join(root, "index*")):
        try:
            kind, level, size = (_read(entry, name) for name in ("type", "level", "size"))
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        if kind != "Instruction" and level.isdigit() and size.rstrip("KMG").isdigit():
            found[int(level)] = int(size.rstrip("KMG")) * scale
    return found


@functools.cache
def first_level_ways(root: str = CACHE_ROOT) -> int:
    """The associativity of the first core's level-1 data cache (0: unknown)."""
    for entry in glob.glob(os.path.join(root, "index*")):
        try:
            kind, level, ways = (
                _read(entry, n) for n in ("type", "level", "ways_of_associativity")
            )
        except OSError:
            continue
        if kind == "Data" and level == "1" and ways.isdigit():
            return int(ways)
    return 0


def last_level_cache(root: str = CACHE_ROOT) -> int:
    """Bytes of the highest-level data cache of the first core (0: unknown)."""
    caches = data_caches(root)
    return caches[max(caches)] if caches else 0


def core_cache(root: str = CACHE_ROOT) -> int:
    """Bytes of the first core's level-2 cache, which on current processors each core has to
    itself (0: unknown, or the processor has no level 3 above it and shares it)."""
    caches = data_caches(root)
    return caches.get(2, 0) if max(caches, default=0) > 2 else 0


#: units of ``OMP_STACKSIZE`` (its default unit: kilobytes)
STACK_UNITS = {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def thread_stack_bytes() -> int | None:
    """The stack each OpenMP thread gets, from ``OMP_STACKSIZE`` (or gcc's ``GOMP_STACKSIZE``,
    in kilobytes): ``512K``, ``4M``, ``300`` (kilobytes); None when neither is set (the
    threads then take the system's default, 2 MB or more on Linux) or one does not parse."""
    for name in ("OMP_STACKSIZE", "GOMP_STACKSIZE"):
        value = os.environ.get(name, "").strip().upper()
        if not value:
            continue
        number, unit = (value[:-1], value[-1]) if value[-1] in STACK_UNITS else (value, "K")
        return int(number) * STACK_UNITS[unit] if number.strip().isdigit() else None
    return None


def within_stack(nbytes: int, stack: int | None) -> int:
    """``nbytes`` of a kernel's local array, at most a quarter of a thread's ``stack`` (the
    kernel's other values and its callers need the rest): a group of panels of 256 KB on a
    thread of ``OMP_STACKSIZE=100K`` overflowed it, and the process died."""
    return nbytes if stack is None else min(nbytes, stack // 4)


def _read(folder: str, name: str) -> str:
    with open(os.path.join(folder, name)) as f:
        return f.read().strip()


def _unrolled(u: UOp) -> bool:
    """Whether ``u`` is the counter of a loop gcc unrolls whole (a register tile's or lanes')."""
    return u.op is Ops.RANGE and u.arg.kind in (AxisKind.UPCAST, AxisKind.LANE)


def add_unrolled_counter_last(total: UOp) -> UOp | None:
    """``x + (y + u) -> (x + y) + u`` for the counter ``u`` of an unrolled loop: each unrolled
    statement's index is then one shared base plus a constant, which gcc 12 groups into vector
    loads. Nested (a 64-column matmul's ``k*64 + (column + u)``), it packed the same 6x16 tile
    into scalar and 4-wide pieces with spills: 55 GFLOP/s instead of the panelled tile's 200."""
    for i, inner in enumerate(total.src):
        other = total.src[1 - i]
        if inner.op is Ops.ADD and not _unrolled(other):
            for j, u in enumerate(inner.src):
                if _unrolled(u):
                    return (other + inner.src[1 - j]) + u
    return None


#: The CPU's rules for the program stage (hook ``fusegrad_rewrite_rules``): index sums shaped
#: for gcc's vectoriser.
PROGRAM_RULES = PatternMatcher(
    [
        (
            UPat(Ops.ADD, dtype=tuple(d for d in dtypes.all() if d.is_int), name="total"),
            add_unrolled_counter_last,
        )
    ]
)


def _loop_pragmas(threads: int | None = None) -> dict[tuple[AxisKind, LoopHint], str]:
    """The pragma before a loop, by its kind and hint: OpenMP spreads a PARALLEL loop over the
    cores (over ``threads`` of them when set: one CPU device's share), ``GCC unroll`` keeps a
    register tile's accumulators in registers, ``omp simd`` makes gcc vectorise a loop it would
    leave scalar."""
    team = f" num_threads({threads})" if threads else ""
    pragmas = {
        (AxisKind.PARALLEL, LoopHint.NONE): f"#pragma omp parallel for{team} schedule(static)",
        (AxisKind.PARALLEL, LoopHint.SIMD): f"#pragma omp parallel for simd{team} schedule(static)",
    }
    for kind in AxisKind:
        if kind is not AxisKind.PARALLEL:
            pragmas[(kind, LoopHint.UNROLL)] = "#pragma GCC unroll {trips}"
            pragmas[(kind, LoopHint.SIMD)] = "#pragma omp simd"
    return pragmas


#: an 8 x 8 block of 4-byte elements transposed in registers (``Ops.TRANSPOSE_BLOCK``): eight
#: rows loaded, interleaved by pairs, by quads, then by halves. gcc >= 12 and clang turn the
#: generic shuffles into unpack/shuffle/permute instructions where the target has 32-byte
#: vectors, and into narrower ones where it has not; older compilers (no
#: ``__builtin_shufflevector``) copy it element by element. Attention's scores (4, 4, 128, 64),
#: timed in C on 2 cores (AMD EPYC, AVX-512): 163 us with the packed operand filled element by
#: element, 150 by blocks, 145 with no filling at all. Guarded: the kernels of a batch are built
#: as one translation unit (``compiler.CCompiler.compile_batch``), where it is defined once. The
#: strides are 64-bit: a transposed read of rows 80M elements apart (a slice of a wide tensor)
#: reaches 28 x 80M x 4 bytes past its first row, which 32-bit arithmetic wrapped (a crash).
TRANSPOSE_8 = """
#ifndef FG_TRANSPOSE8
#define FG_TRANSPOSE8
typedef float fg_row8 __attribute__((vector_size(32)));
#define FG_MIX __builtin_shufflevector
#define FG_LOAD(i) fg_row8 r##i; __builtin_memcpy(&r##i, s + 4 * i * ss, 32);
#define FG_PAIRS(a, b) fg_row8 t##a = FG_MIX(r##a, r##b, 0, 8, 1, 9, 4, 12, 5, 13), \\
  t##b = FG_MIX(r##a, r##b, 2, 10, 3, 11, 6, 14, 7, 15);
#define FG_QUADS(a, b, c, d) fg_row8 q##a = FG_MIX(t##a, t##c, 0, 1, 8, 9, 4, 5, 12, 13), \\
  q##b = FG_MIX(t##a, t##c, 2, 3, 10, 11, 6, 7, 14, 15), \\
  q##c = FG_MIX(t##b, t##d, 0, 1, 8, 9, 4, 5, 12, 13), \\
  q##d = FG_MIX(t##b, t##d, 2, 3, 10, 11, 6, 7, 14, 15);
#define FG_HALVES(i, j) { fg_row8 low = FG_MIX(q##i, q##j, 0, 1, 2, 3, 8, 9, 10, 11), \\
  high = FG_MIX(q##i, q##j, 4, 5, 6, 7, 12, 13, 14, 15); \\
  __builtin_memcpy(d + 4 * i * ds, &low, 32); __builtin_memcpy(d + 4 * j * ds, &high, 32); }
static inline void fg_transpose8(void* restrict dest, const void* restrict source, long long ss,
                                 long long ds) {
  const char* s = (const char*)source; char* d = (char*)dest;
#if defined(__clang__) || __GNUC__ >= 12
  FG_LOAD(0) FG_LOAD(1) FG_LOAD(2) FG_LOAD(3) FG_LOAD(4) FG_LOAD(5) FG_LOAD(6) FG_LOAD(7)
  FG_PAIRS(0, 1) FG_PAIRS(2, 3) FG_PAIRS(4, 5) FG_PAIRS(6, 7)
  FG_QUADS(0, 1, 2, 3) FG_QUADS(4, 5, 6, 7)
  FG_HALVES(0, 4) FG_HALVES(1, 5) FG_HALVES(2, 6) FG_HALVES(3, 7)
#else
  for (long long r = 0; r < 8; r++)
    for (long long c = 0; c < 8; c++)
      __builtin_memcpy(d + 4 * (c * ds + r), s + 4 * (r * ss + c), 4);
#endif
}
#endif
"""


def _transpose_block(ctx: RenderContext, u: UOp, src: list[str]) -> None:
    size, source_stride, dest_stride = u.arg
    assert size == 8, "CPURenderer.transpose_block is 8"
    ctx.emit(f"fg_transpose8(&{src[0]}, &{src[1]}, {source_stride}, {dest_stride});")


class CPURenderer(CStyleRenderer):
    """Renders a kernel as a C function; its output loop runs on all cores when it is long."""

    type_names = {**CStyleRenderer.type_names, dtypes.float16: "_Float16"}
    #: gcc 12 vectorises no loop that converts a ``_Float16``: a float16 ``x * 2 + 1`` ran 7x
    #: slower than in float32; core's integer conversions vectorise (codegen/decompose.py)
    native_float16 = False
    #: libm's exp2f and log2f: gcc vectorises no loop that calls them (it would with -ffast-math,
    #: which we do not use), so a softmax spent most of its time in scalar calls
    scalar_math_ops = frozenset({Ops.EXP2, Ops.LOG2})
    #: MULACC is a fused multiply-add (one rounding): gcc and clang vectorise the builtin into FMA
    #: instructions where the target (``-march``) has them
    native_ops = GroupOp.ALU
    fma_builtins = {dtypes.float32: "__builtin_fmaf", dtypes.float64: "__builtin_fma"}
    loop_pragmas = _loop_pragmas()
    #: a decode step's 4-bit products read 2 KB ahead ran 1.3-1.4x faster than without (see
    #: codegen/prefetch.py); 0.5-4 KB gave the same
    prefetch_bytes = 2048
    #: an operand packed inside the kernel (codegen/packed.py): up to 32 KB. On 2 cores (AMD
    #: EPYC, AVX-512: panels of 32 columns) a GPT's (512, 256) @ (256, 256).T packed its 32 KB
    #: panels in the kernel instead of a copy kernel before it: 337 -> 298 us of kernels, with
    #: 2048 rows 1220 -> 1188 (16 KB, half the first-level cache, was the limit before)
    pack_bytes = 32 * 1024
    #: a group of a matmul's column panels packed inside the kernel: up to 256 KB, a quarter of
    #: a 1 MB L2, on each thread's stack (2 MB or more unless ``OMP_STACKSIZE`` says less:
    #: ``within_stack``)
    group_pack_bytes = 256 * 1024
    #: the packed operand is filled by 8 x 8 blocks (``TRANSPOSE_8``)
    transpose_block = 8
    #: x86-64 and AArch64 address with 64-bit registers: offsets 64 bits wide need no widening
    wide_addresses = True
    op_renderers = {
        **CStyleRenderer.op_renderers,
        Ops.PREFETCH: lambda ctx, u, src: ctx.emit(f"__builtin_prefetch(&{src[0]});"),
        Ops.TRANSPOSE_BLOCK: _transpose_block,
    }

    def __init__(self, device: str = "", threads: int | None = None):
        super().__init__(device)
        if threads is not None:  # one of several CPU devices: its share of the cores
            self.loop_pragmas = _loop_pragmas(threads)
        features = target_features(find_c_compiler())
        self.vector_registers, self.vector_bytes = vector_register_file(features)
        self.cache_bytes = last_level_cache()
        self.core_cache_bytes = core_cache()
        self.first_cache_bytes = data_caches().get(1, 0)
        self.cache_threads = threads or usable_cores()
        self.cache_ways = first_level_ways()
        # (local arrays live on each thread's stack: a small one set by the user bounds them)
        stack = thread_stack_bytes()
        self.pack_bytes = within_stack(type(self).pack_bytes, stack)
        self.group_pack_bytes = within_stack(type(self).group_pack_bytes, stack)

    def prelude(self, program: list[UOp]) -> str:
        head = "#include <math.h>\n#include <stdbool.h>\n"
        return head + TRANSPOSE_8 if any(u.op is Ops.TRANSPOSE_BLOCK for u in program) else head

    def render_group_op(self, u: UOp, name: str) -> str:
        """A kernel's local array, read through a ``restrict`` pointer: indexed directly, gcc 12
        kept a register tile's accumulators in memory beside it (2.5x slower)."""
        if u.op is not Ops.DEFINE_LOCAL:
            return super().render_group_op(u, name)
        kind = self.type_name(u.dtype)
        return (
            f"{kind} {name}_[{u.arg[1]}] __attribute__((aligned(64))); "
            f"{kind}* restrict {name} = {name}_;"
        )

    def render_alu(self, u: UOp, src: list[str]) -> str:
        if u.op is Ops.MULACC and (fma := self.fma_builtins.get(u.dtype)):
            return f"{fma}({src[0]}, {src[1]}, {src[2]})"
        return super().render_alu(u, src)

    def render_float_max(self, u: UOp, src: list[str]) -> str:
        """NaN-propagating MAX as two selects in a statement expression (gcc and clang): the
        one-expression form ``(a>b)||(a!=a) ? a : b`` is a branch gcc 12 does not if-convert
        when two of them follow each other (a clamp, hardswish), so the loop stayed scalar."""
        (a, b), (ua, ub) = src, u.src
        if ua.op is Ops.CONST or (ub.op is Ops.CONST and ub.arg == ub.arg):
            return super().render_float_max(u, src)
        kind = self.type_name(u.dtype)
        return f"({{ {kind} max_ = ({a}>{b})?{a}:{b}; ({a}!={a})?{a}:max_; }})"
