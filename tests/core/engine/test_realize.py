"""Running plans: the new kernels of a plan are compiled together, in batches."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from fusegrad import GlobalCounters, Tensor
from fusegrad.device import Device
from fusegrad.dtype import dtypes
from fusegrad.engine import realize
from fusegrad.errors import CompileError
from fusegrad.uop.loops import AxisKind, LoopArg, LoopHint
from fusegrad.uop.ops import Ops, UOp


def exp_sum(scale: float) -> Tensor:
    """Two kernels, new for each ``scale``: an elementwise ``E_3`` into a buffer, then ``r_1_3``."""
    x = Tensor([1.0, 2.0, 3.0], device="PYTHON")
    return ((x * scale).contiguous() * scale).exp().sum()


@pytest.fixture
def batches(monkeypatch) -> list[int]:
    """The size of each batch the PYTHON compiler is given, in order."""
    sizes: list[int] = []
    compiler = Device["PYTHON"].compiler
    real = compiler.compile_batch
    monkeypatch.setattr(compiler, "compile_batch", lambda s: sizes.append(len(s)) or real(s))
    return sizes


def test_new_kernels_of_a_plan_are_compiled_in_batches(batches):
    GlobalCounters.reset()
    assert exp_sum(0.5).item() == pytest.approx(5.0497, rel=1e-4)  # e^.25 + e^.5 + e^.75
    assert batches == [2] and GlobalCounters.compiles == 2


def test_a_batch_is_cut_once_it_holds_enough_work(batches, monkeypatch):
    monkeypatch.setattr(realize, "BATCH_COST", 1)  # every kernel is work enough
    assert exp_sum(0.75).item() == pytest.approx(10.2412, rel=1e-4)  # e^.5625 + e^1.125 + ...
    assert batches == [1, 1]


def test_a_kernel_that_fails_to_compile_spares_the_others_of_its_plan(monkeypatch):
    compiler = Device["PYTHON"].compiler
    real = compiler.compile_batch

    def reduce_fails(sources: list[str]) -> list[bytes | CompileError]:
        broken = CompileError("r_1_3 broke")
        return [broken if '"name": "r_' in s else b for s, b in zip(sources, real(sources))]

    monkeypatch.setattr(compiler, "compile_batch", reduce_fails)
    with pytest.raises(CompileError, match="r_1_3 broke"):
        exp_sum(0.25).item()
    monkeypatch.setattr(compiler, "compile_batch", real)
    GlobalCounters.reset()
    assert exp_sum(0.25).item() == pytest.approx(3.4039, rel=1e-4)
    assert GlobalCounters.compiles == 1  # only the kernel that failed is compiled again


@pytest.mark.parametrize("hint, cost", [(LoopHint.UNROLL, 1 + 8 * 2), (LoopHint.NONE, 1 + 2)])
def test_compile_cost_counts_each_copy_an_unrolled_loop_makes(hint, cost):
    trips = UOp.const(dtypes.int32, 8)
    loop = UOp(Ops.RANGE, dtypes.int32, (trips,), LoopArg(0, AxisKind.UPCAST, hint))
    body = [loop * 2, loop + 1]
    program = [trips, loop, *body, UOp(Ops.END, dtypes.void, (loop,))]
    assert realize.compile_cost(SimpleNamespace(program=program)) == cost


#: The most work (``compile_cost``) one kernel of the workloads below may give the compiler:
#: about 1.3 s of gcc 12 on this project's machines, well under the 10 s a kernel may take (a
#: 512-element cumprod, unrolled, once took gcc minutes; the GPT example's largest now cost 5000).
MAX_KERNEL_COST = 10_000


def _largest_kernel(*tensors: Tensor) -> tuple[int, str]:
    """The cost and name of the costliest kernel realizing ``tensors`` on the CPU (generated
    only, not compiled)."""
    kernels = [realize._generate(s.ast, s.device) for s in tensors[0].schedule(*tensors[1:])]
    return max((realize.compile_cost(k), k.name) for k in kernels)


@pytest.mark.parametrize(
    "workload",
    [
        lambda: [Tensor.rand(512, device="CPU").cumprod(0)],
        lambda: [Tensor.rand(4096, device="CPU").cumsum(0)],
        lambda: [Tensor.rand(8, 4096, device="CPU").cumsum(1)],
        lambda: [
            (Tensor.rand(512, 256, device="CPU") @ Tensor.rand(256, 1024, device="CPU")).gelu()
        ],
        lambda: [
            Tensor.rand(128, 32, 24, 24, device="CPU").conv2d(
                Tensor.rand(32, 32, 5, 5, device="CPU")
            )
        ],
        lambda: [Tensor.rand(512, 1024, device="CPU").softmax(-1)],
    ],
    ids=["cumprod-512", "cumsum-4096", "cumsum-rows", "matmul-gelu", "conv", "softmax"],
)
def test_no_kernel_gives_the_compiler_too_much_work(workload):
    cost, name = _largest_kernel(*workload())
    assert cost <= MAX_KERNEL_COST, f"{name} costs {cost}"


def test_a_scan_backward_is_cut_into_kernels_of_bounded_work():
    """scan.py's checkpoints (asked-for CONTIGUOUS) stay kernel boundaries: merged into the
    kernel reading them (several outputs), a scan's backward became one kernel whose work
    doubled with each step."""
    x = Tensor.rand(512, device="CPU", requires_grad=True)
    x.cumprod(0).sum().backward()
    cost, name = _largest_kernel(x.grad)
    assert cost <= MAX_KERNEL_COST, f"{name} costs {cost}"


def test_global_mem_counts_the_bytes_of_each_kernels_buffers():
    """Each kernel adds the bytes of the buffers it reads and writes, each buffer once (a
    broadcast input counts its own size), eager and replayed by TinyJit alike."""
    from fusegrad import GlobalCounters, Tensor, TinyJit

    a, b = Tensor.rand(1000).realize(), Tensor.rand(1).realize()
    GlobalCounters.reset()
    (a + a * b).realize()
    assert GlobalCounters.kernel_count == 1
    assert GlobalCounters.global_mem == 1000 * 4 * 2 + 4
    jit = TinyJit(lambda x: (x * 2).realize())
    for _ in range(3):
        jit(a)
    GlobalCounters.reset()
    jit(a)
    assert (GlobalCounters.kernel_count, GlobalCounters.global_mem) == (1, 8000)
