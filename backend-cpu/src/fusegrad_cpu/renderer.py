"""C for the host CPU: the core C-family renderer plus OpenMP on the output loop, and hints that
make gcc vectorise the short upcast loops the way the optimiser meant, and the innermost loop of
elementwise kernels."""

from __future__ import annotations

import copy
import functools
import glob
import os

from fusegrad.dtype import dtypes
from fusegrad.renderer.cstyle import CStyleRenderer
from fusegrad.uop.ops import GroupOp, Ops, UOp, toposort
from fusegrad.uop.symbolic import terms
from fusegrad_cpu.compiler import cpu_info


def vector_register_file(features: set[str]) -> tuple[int, int]:
    """(how many SIMD registers, bytes in each) that ``-march=native`` code may use, from the
    processor's feature flags: AVX-512 has 32 of 64 bytes, AVX and AVX2 16 of 32, ARM's NEON
    32 of 16, and SSE 16 of 16."""
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


def last_level_cache(root: str = CACHE_ROOT) -> int:
    """Bytes of the highest-level data cache of the first core (0: unknown)."""
    caches = data_caches(root)
    return caches[max(caches)] if caches else 0


def core_cache(root: str = CACHE_ROOT) -> int:
    """Bytes of the first core's level-2 cache, which on current processors each core has to
    itself (0: unknown, or the processor has no level 3 above it and shares it)."""
    caches = data_caches(root)
    return caches.get(2, 0) if max(caches, default=0) > 2 else 0


def _read(folder: str, name: str) -> str:
    with open(os.path.join(folder, name)) as f:
        return f.read().strip()


#: loops the optimiser made short and fixed on purpose (see codegen/opt.py)
_SHORT_LOOPS = ("upcast", "lane")


def _reads_consecutively(loop: UOp, body: list[UOp], halving: bool = False) -> bool:
    """Whether every memory access in ``body`` that moves with ``loop`` moves by one element
    (or, with ``halving``, by one element every ``k`` steps: ``loop // k``, as a pooling's
    backward reads, which vector code does with a shuffle)."""
    for u in body:
        if u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX:
            index = u.src[0].src[1]
            moving = [t for t in terms(index) if loop in toposort([t])]
            for t in moving:
                slow = t.op is Ops.IDIV and t.src[0] is loop and t.src[1].op is Ops.CONST
                if t is not loop and not (halving and slow):
                    return False
    return True


def _uses_accumulators(body: list[UOp]) -> bool:
    """Whether ``body`` reads or writes an element of a reduction's accumulator array."""
    return any(u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.INDEX
               and u.src[0].src[0].op is Ops.DEFINE_REG for u in body)


#: ops gcc's straight-line vectoriser (SLP) leaves scalar once a loop is unrolled: a ternary may
#: not become ``vmaxps`` without -ffinite-math-only, and a long body (an exp) is not packed at all
_NOT_PACKED = frozenset({*GroupOp.Comparison, Ops.WHERE, Ops.MAX})
#: the most statements an unrolled lane loop may make (lanes x body) before it is left to omp simd
_UNROLL_STATEMENTS = 512


def _packs_in_registers(loop: UOp, body: list[UOp]) -> bool:
    """Whether unrolling ``loop`` leaves code gcc packs into vector registers. An upcast tile
    always (its rows are the register tile); a lane loop only when its body is short arithmetic.
    Unrolled, a sum's accumulators live in registers (under ``omp simd`` gcc loads and stores
    each on every step: a 16M sum ran 10-20% slower); a max or an exp unrolled runs scalar (a
    softmax row max ran 1.8x slower)."""
    if loop.arg[1] == "upcast":
        return True
    if any(u.op in _NOT_PACKED for u in body):
        return False
    return loop.src[0].arg * len(body) <= _UNROLL_STATEMENTS


def vector_hints(program: list[UOp]) -> dict[UOp, str]:
    """A pragma for each short loop: ``GCC unroll`` for one around other loops or one that uses
    accumulators, ``omp simd`` for another innermost one that reads memory consecutively;
    and ``omp simd`` for the innermost loop of an elementwise kernel whose reads move by one (or
    by one every k steps).

    Left to itself, gcc vectorises an upcast tile along whichever loop it likes, sometimes the
    outer one, and then shuffles the accumulators on every iteration (a conv kernel ran 6x
    slower so). Unrolling the whole tile gives the register tile the optimiser planned: once
    every accumulator is a statement of its own, gcc keeps them in registers and packs the
    statements of a row into vector instructions. (With ``omp simd`` on the inner loop it kept
    the accumulator array in memory and stored it back on every step: a matmul at half speed.)
    That holds for a tile inside one reduce loop; inside several (a convolution's channels and
    window) gcc packs nothing, so there the tile's vector loop stays ``omp simd``.
    """
    hints: dict[UOp, str] = {}
    spans = _loop_spans(program)
    elementwise = not any(u.op is Ops.DEFINE_REG for u in program)
    for loop, (start, end) in spans.items():
        body = program[start + 1 : end]
        innermost = not any(b.op is Ops.RANGE for b in body)
        if loop.arg[1] in _SHORT_LOOPS:
            # a tile inside several reduce loops (a convolution's channels, then its window) stays
            # a loop of vectors: unrolled there, gcc left the whole tile scalar (a conv 8-19x slower)
            if not innermost or (_uses_accumulators(body) and _packs_in_registers(loop, body)
                                 and _reduce_loops_around(loop, spans) < 2):
                hints[loop] = f"#pragma GCC unroll {loop.src[0].arg}"
            elif _reads_consecutively(loop, body):
                hints[loop] = "#pragma omp simd"
        elif elementwise and innermost and _reads_consecutively(loop, body, halving=True):
            # gcc leaves many such loops scalar on its own: a pooling's backward ran 4x slower
            hints[loop] = "#pragma omp simd"
    return hints


def _reduce_loops_around(loop: UOp, spans: dict[UOp, tuple[int, int]]) -> int:
    start, end = spans[loop]
    return sum(1 for r, (s, e) in spans.items() if r.arg[1] == "reduce" and s < start and end < e)


def _loop_spans(program: list[UOp]) -> dict[UOp, tuple[int, int]]:
    """Each loop -> (position of its RANGE, position of its END), inner loops first."""
    opened: dict[UOp, int] = {}
    spans: dict[UOp, tuple[int, int]] = {}
    for i, u in enumerate(program):
        if u.op is Ops.RANGE:
            opened[u] = i
        elif u.op is Ops.END and (loop := u.src[0]) in opened:
            spans[loop] = (opened[loop], i)
    return spans


class CPURenderer(CStyleRenderer):
    """Renders a kernel as a C function; its output loop runs on all cores when it is long."""

    type_names = {**CStyleRenderer.type_names, dtypes.float16: "_Float16"}
    #: libm's exp2f and log2f: gcc vectorises no loop that calls them (it would with -ffast-math,
    #: which we do not use), so a softmax spent most of its time in scalar calls
    scalar_math_ops = frozenset({Ops.EXP2, Ops.LOG2})
    #: MULACC is a fused multiply-add (one rounding): gcc and clang vectorise the builtin into FMA
    #: instructions where ``-march=native`` has them
    native_ops = GroupOp.ALU
    fma_builtins = {dtypes.float32: "__builtin_fmaf", dtypes.float64: "__builtin_fma"}

    def __init__(self, device: str = ""):
        super().__init__(device)
        self.vector_registers, self.vector_bytes = vector_register_file(set(cpu_info()[1].split()))
        self.cache_bytes = last_level_cache()
        self.core_cache_bytes = core_cache()

    def prelude(self, program: list[UOp]) -> str:
        return "#include <math.h>\n#include <stdbool.h>\n"

    #: pragmas for this program's loops; set on a copy of the renderer per render (thread-safe)
    hints: dict[UOp, str] = {}

    def render(self, name: str, program: list[UOp]) -> str:
        one = copy.copy(self)
        one.hints = vector_hints(program)
        return CStyleRenderer.render(one, name, program)

    def render_alu(self, u: UOp, src: list[str]) -> str:
        if u.op is Ops.MULACC and (fma := self.fma_builtins.get(u.dtype)):
            return f"{fma}({src[0]}, {src[1]}, {src[2]})"
        return super().render_alu(u, src)

    def render_loop(self, u: UOp, name: str, size: str) -> list[str]:
        lines = super().render_loop(u, name, size)
        if u.arg[1] == "parallel":
            simd = " simd" if self.hints.get(u) else ""
            return [f"#pragma omp parallel for{simd} schedule(static)", *lines]
        if hint := self.hints.get(u):
            return [hint, *lines]
        return lines
