"""Cost of one CPU kernel launch through ``CPUProgram.__call__``, against a bare ctypes call.

    python bench/bench_cpu_call.py

The kernel does almost nothing (one float, two buffers), so the times are launch overhead. The
peer is the same ctypes function called with addresses already known: what no wrapper can beat.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable

from fusegrad_cpu.compiler import CCompiler
from fusegrad_cpu.device import CPUAllocator, CPUProgram

SOURCE = "void k(float* restrict data0, const float* restrict data1) { data0[0] = data1[0] + 1; }"
CALLS = 200_000


def microseconds(fn: Callable[[], object]) -> float:
    """Best of 7 runs of ``CALLS`` calls, per call."""
    return min(timeit.repeat(fn, number=CALLS, repeat=7)) / CALLS * 1e6


def main() -> None:
    program = CPUProgram("k", CCompiler().compile(SOURCE))
    allocator = CPUAllocator()
    out, x = allocator.alloc(64), allocator.alloc(64)
    program(out, x)  # the first call declares the argument types the bare call relies on
    function, a, b = program.function, out.ctypes.data, x.ctypes.data
    bare = microseconds(lambda: function(a, b))
    for name, fn in [
        ("call", lambda: program(out, x)),
        ("call, wait", lambda: program(out, x, wait=True)),
    ]:
        us = microseconds(fn)
        print(f"{name:12s} {us:6.2f} us   bare ctypes {bare:5.2f} us   ratio {us / bare:4.1f}x")


if __name__ == "__main__":
    main()
