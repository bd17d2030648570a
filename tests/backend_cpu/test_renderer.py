"""The CPU renderer's loop pragmas: the register tile the optimiser planned, as gcc should build it."""

from __future__ import annotations

import numpy as np

from fusegrad import Device, Tensor
from fusegrad.codegen.kernel import generate
from fusegrad.codegen.opt import KernelOpts, heuristic_opts


def _lines_before_loops(source: str) -> dict[str, str]:
    """Loop variable -> the line just before its ``for``."""
    lines = [line.strip() for line in source.splitlines()]
    return {line.split()[2]: lines[i - 1] for i, line in enumerate(lines) if line.startswith("for (int ")}


def test_matmul_tile_is_unrolled_outside_and_vectorised_inside():
    a, b = Tensor.rand(64, 32, device="CPU"), Tensor.rand(32, 48, device="CPU")
    (step,) = (a @ b).schedule()
    kernel = generate(step.ast, Device["CPU"].renderer, heuristic_opts(step.ast, False))
    before = _lines_before_loops(kernel.source)
    assert before["ridx50"] == "#pragma GCC unroll 8"  # the reused rows
    assert before["ridx51"] == "#pragma omp simd"  # the vector of columns
    assert not before["ridx100"].startswith("#pragma")  # the reduction loop is left alone


def test_no_simd_pragma_on_a_loop_that_reads_with_a_stride():
    """Forcing vectors onto strided reads would make gcc gather: the loop gets no pragma."""
    a, b = Tensor.rand(64, 32, device="CPU"), Tensor.rand(32, 48, device="CPU")
    (step,) = (a @ b).schedule()
    opts = KernelOpts((1, 0), ((0, 8),))  # only the rows upcast: a is read 32 apart along them
    kernel = generate(step.ast, Device["CPU"].renderer, opts)
    before = _lines_before_loops(kernel.source)
    assert not before["ridx50"].startswith("#pragma")
    rt = Device["CPU"]
    program = rt.program(kernel.name, rt.compiler.compile_cached(kernel.source))
    out = Tensor.zeros(64 * 48, device="CPU").contiguous().realize()
    program(out._buffer().handle, a._buffer().handle, b._buffer().handle, global_size=None)
    np.testing.assert_allclose(out.numpy().reshape(64, 48), a.numpy() @ b.numpy(), rtol=1e-5)


def test_elementwise_innermost_loop_is_vectorised_unless_strided():
    """A pooling's backward reads ``x // 2``: fine for vectors (a shuffle); a transpose reads
    400 elements apart: left to gcc."""
    x = Tensor.rand(2, 4, 20, 20, device="CPU")
    g = Tensor.rand(2, 4, 10, 10, device="CPU")
    up = g.reshape(2, 4, 10, 1, 10, 1).expand(2, 4, 10, 2, 10, 2).reshape(2, 4, 20, 20)
    (step,) = (x * up).schedule()
    source = generate(step.ast, Device["CPU"].renderer, heuristic_opts(step.ast, False)).source
    assert _lines_before_loops(source)["ridx3"] == "#pragma omp simd"
    expected = x.numpy() * np.repeat(np.repeat(g.numpy(), 2, axis=2), 2, axis=3)
    np.testing.assert_allclose((x * up).numpy(), expected, rtol=1e-6)
    (transpose,) = x.permute(0, 2, 3, 1).contiguous().schedule()
    source = generate(transpose.ast, Device["CPU"].renderer, heuristic_opts(transpose.ast, False)).source
    assert not any(line.startswith("#pragma omp simd") for line in _lines_before_loops(source).values())
