"""Tests of ``codegen/grid.py``: when a kernel runs as one group per output, the grouped
program's shape, and launch sizes. (Values are checked on real devices: tests/backend_opencl,
tests/backend_webgpu and the conformance suite's test_locals_and_barriers.)"""

from __future__ import annotations

import pytest

from fusegrad import Tensor, dtypes
from fusegrad.codegen.grid import Groups, launch_size, plan_groups
from fusegrad.codegen.kernel import generate
from fusegrad.helpers import context
from fusegrad.renderer import Renderer
from fusegrad.schedule.kernelize import KernelStep
from fusegrad.uop.ops import Ops, UOp


class GridRenderer(Renderer):
    """A grid target with shared memory; ``render`` lists the program's ops."""

    grid_dims = 1
    local_size = 256
    max_group_size = 1024
    has_local = True
    local_memory_bytes = 32768

    def render(self, name: str, program: list[UOp]) -> str:
        return " ".join(u.op.name for u in program)


def ast_of(t: Tensor) -> UOp:
    return [s.ast for s in t.schedule() if isinstance(s, KernelStep)][-1]


def x(*shape: int, dtype=dtypes.float32) -> Tensor:
    return Tensor.rand(*shape, device="PYTHON").cast(dtype).realize()


@pytest.mark.parametrize(
    "make, groups",
    [
        (lambda: x(100_003).sum(), Groups(256)),  # one output, many elements
        (lambda: x(10, 1000).max(1), Groups(128)),  # 250 elements per thread at most
        (lambda: x(1000, 10).sum(0), Groups(128, 2)),  # columns: neighbours in memory, in pairs
        (lambda: x(5000, 64).sum(0), Groups(256, 32)),  # 32 columns, 8 threads each
        (lambda: x(5000, 7).sum(0), Groups(256, 1)),  # 7 columns: one per group
        (lambda: x(10, 1000).sum(0), None),  # 10 elements per output: flat
        (lambda: x(64, 64) @ x(64, 64), None),  # more outputs than elements each: flat
        (lambda: x(40).sum(), None),  # too short to share
        (lambda: x(100) + 1, None),  # no reduction
    ],
)
def test_grouped_only_for_long_reductions_into_few_outputs(make, groups):
    assert plan_groups(ast_of(make()), GridRenderer()) == groups


def test_grouped_needs_shared_memory_room_and_grid_room():
    ast = ast_of(x(3, 100_000).sum(1))
    assert plan_groups(ast, GridRenderer()) == Groups(256)
    no_local = type("NoLocal", (GridRenderer,), {"has_local": False})()
    small = type("Small", (GridRenderer,), {"local_memory_bytes": 512})()
    narrow = type("Narrow", (GridRenderer,), {"global_max": (2, 1, 1)})()
    assert [plan_groups(ast, r) for r in (no_local, small, narrow)] == [None, None, None]
    with context(NOOPT=1):
        assert plan_groups(ast, GridRenderer()) is None


def test_grouped_program_shares_then_waits_then_thread_zero_combines():
    kernel = generate(ast_of(x(3, 1001).sum(1) * 2), GridRenderer())
    ops = kernel.source.split()
    barrier, guard, end = ops.index("BARRIER"), ops.index("IF"), ops.index("ENDIF")
    assert ops.index("DEFINE_LOCAL") < barrier < guard < ops.index("STORE", guard) < end
    assert ops[end + 1 :] == []  # the output is stored inside the guard, by thread 0 only
    assert ops.count("RANGE") == 2  # the strided share, then the combine of the shares
    assert kernel.local_size == (128,) and kernel.global_size == (3 * 128,)
    specials = {u.arg for u in kernel.program if u.op is Ops.SPECIAL}
    assert specials == {("group0", 3), ("lidx0", 128)}


def test_the_last_trip_is_masked_with_the_identity():
    """1001 elements in 8 trips of 128 threads: threads past the end add 0 (max: the minimum)."""
    kernel = generate(ast_of(x(3, 1001).max(1)), GridRenderer())
    wheres = [u for u in kernel.program if u.op is Ops.WHERE]
    assert any(u.src[2].op is Ops.CONST and u.src[2].arg == dtypes.float32.min for u in wheres)
    loads = [
        u
        for u in kernel.program
        if u.op is Ops.LOAD and u.src[0].op is Ops.INDEX and u.src[0].src[0].op is Ops.PARAM
    ]
    assert loads
    assert all(len(u.src) == 3 for u in loads)  # gated: nothing is read past the end


@pytest.mark.parametrize("n, local", [(1000, (256,)), (100, (100,)), (1, None)])
def test_flat_kernels_launch_in_groups_of_local_size(n, local):
    kernel = generate(ast_of(x(n) * 2), GridRenderer())
    assert kernel.global_size == ((n,) if n > 1 else None) and kernel.local_size == local
    assert launch_size(list(kernel.program), GridRenderer()) == (kernel.global_size, local)


def test_cpu_kernels_are_unchanged():
    """A renderer without a grid gets loops, never groups."""
    loops = type("Loops", (GridRenderer,), {"grid_dims": None})()
    kernel = generate(ast_of(x(100_003).sum()), loops)
    assert "BARRIER" not in kernel.source
    assert kernel.local_size is None and kernel.global_size is None


def test_a_block_of_outputs_combines_each_outputs_shares():
    """Groups(128, 2): thread l works for output 2*group + l % 2 on share l // 2; threads 0 and
    1 each fold the 63 other shares of their output, at l + 2, l + 4, ..."""
    kernel = generate(ast_of(x(1000, 10).sum(0)), GridRenderer())
    assert kernel.local_size == (128,) and kernel.global_size == (5 * 128,)
    guard = next(u for u in kernel.program if u.op is Ops.IF).src[0]
    assert guard.op is Ops.CMPLT and guard.src[1].arg == 2
    combine = [u for u in kernel.program if u.op is Ops.RANGE][-1]  # after the barrier
    assert combine.src[0].arg == 63
