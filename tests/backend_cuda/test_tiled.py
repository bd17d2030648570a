"""Tiled matmuls (core's codegen/tiled.py) render as CUDA C++ and compile to cubins for sm_80
and sm_90, in each float dtype and with a fused epilogue. No GPU is needed: nvcc compiles
without a driver."""

from __future__ import annotations

import pytest

from fusegrad import Tensor, dtypes
from fusegrad.codegen.kernel import generate
from fusegrad.codegen.tiled import Tiles, plan_tiles
from fusegrad.dtype import DType
from fusegrad.schedule.kernelize import KernelStep
from fusegrad.uop.loops import AxisKind
from fusegrad.uop.ops import Ops, UOp
from fusegrad_cuda.compiler import NVCCCompiler, find_nvcc
from fusegrad_cuda.renderer import CUDARenderer

ARCHS = ["sm_80", "sm_90"]


def matmul_ast(n: int, dtype: DType, epilogue: bool = False) -> UOp:
    """The kernel of an ``n x n`` matmul (plus bias and relu with ``epilogue``), scheduled for
    a device that runs kernels as written (PYTHON: no layout pass), as a GPU's would be."""
    a, b = (Tensor.empty(n, n, device="PYTHON", dtype=dtype) for _ in range(2))
    out = a @ b
    if epilogue:
        out = (out + Tensor.empty(n, device="PYTHON", dtype=dtype)).relu()
    (ast,) = [s.ast for s in out.schedule() if isinstance(s, KernelStep)]
    return ast


def test_a_float32_matmul_runs_in_blocks_of_16x16_threads_of_4x4_outputs():
    ast = matmul_ast(1024, dtypes.float32)
    kernel = generate(ast, CUDARenderer("CUDA"))
    tiles = Tiles(0, 1, (16, 16), (4, 4), strided=True, stage=16)
    assert plan_tiles(ast, CUDARenderer("CUDA")) == tiles
    # both operands go through shared memory 16 deep: a fill, a barrier, the sums, a barrier
    assert kernel.source.count("__shared__ float") == 2
    assert kernel.source.count("__syncthreads();") == 2
    assert kernel.local_size == (256,) and kernel.global_size == (16 * 16 * 256,)
    upcast = [u for u in kernel.program if u.op is Ops.RANGE and u.arg.kind is AxisKind.UPCAST]
    assert {u.src[0].arg for u in upcast} == {4}
    assert "int lidx0 = threadIdx.x;" in kernel.source and "return;" not in kernel.source
    assert "float acc0[16];" in kernel.source


@pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found on this machine")
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.float16, dtypes.bfloat16])
def test_tiled_matmul_compiles_to_a_cubin(arch, dtype):
    sources = []
    for i, (n, epilogue) in enumerate([(1024, False), (300, True)]):
        kernel = generate(matmul_ast(n, dtype, epilogue), CUDARenderer("CUDA", arch))
        assert kernel.local_size is not None and "uidx" in kernel.source  # the tiled plan
        sources.append(kernel.source.replace(f" {kernel.name}(", f" k{i}_{kernel.name}(", 1))
    includes = sorted({line for s in sources for line in s.splitlines() if line.startswith("#")})
    body = "\n".join("\n".join(x for x in s.splitlines() if not x.startswith("#")) for s in sources)
    cubin = NVCCCompiler(arch).compile("\n".join(includes) + "\n" + body)
    assert cubin[:4] == b"\x7fELF" and b"k0_" in cubin and b"k1_" in cubin
