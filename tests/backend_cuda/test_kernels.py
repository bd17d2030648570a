"""Every corpus kernel renders as CUDA C++ and compiles to a cubin for sm_80 and sm_90.

No GPU is needed: NVRTC or nvcc compiles without a driver. The corpus is compiled as one
translation unit per architecture (each kernel renamed), since nvcc's start-up dominates;
a compile error fails the test and its message numbers the lines of the failing kernel.
"""

from __future__ import annotations

import re

import pytest
from kernel_corpus import corpus_kernels

from fusegrad.codegen.kernel import KernelSource, generate
from fusegrad_cuda.compiler import NVCCCompiler, NVRTCCompiler, find_nvcc, find_nvrtc
from fusegrad_cuda.renderer import CUDARenderer

ARCHS = ["sm_80", "sm_90"]
KERNELS = corpus_kernels()
COMPILERS = {"nvcc": (NVCCCompiler, find_nvcc), "nvrtc": (NVRTCCompiler, find_nvrtc)}


def renamed(kernels: list[KernelSource]) -> list[str]:
    """Each kernel's source, renamed ``k<i>_<name>`` so that they can share a file."""
    return [k.source.replace(f" {k.name}(", f" k{i}_{k.name}(", 1) for i, k in enumerate(kernels)]


def rendered() -> list[str]:
    """Each corpus kernel as CUDA C++, renamed (``renamed``)."""
    return renamed([generate(ast, CUDARenderer("CUDA")) for _, ast in KERNELS])


def assert_compiles_with_nvcc(kernels: list[KernelSource]) -> None:
    """Compile ``kernels`` as one translation unit with nvcc for sm_80 (skipped without nvcc)."""
    if find_nvcc() is None:
        pytest.skip("nvcc not found on this machine")
    cubin = NVCCCompiler("sm_80").compile("\n".join(renamed(kernels)))
    assert cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize("tool", list(COMPILERS))
@pytest.mark.parametrize("arch", ARCHS)
def test_every_corpus_kernel_compiles_to_a_cubin(tool, arch):
    make, find = COMPILERS[tool]
    if find() is None:
        pytest.skip(f"{tool} not found on this machine")
    sources = rendered()
    cubin = make(arch).compile("\n".join(sources))
    assert cubin[:4] == b"\x7fELF"  # a cubin is an ELF file
    for i in range(len(KERNELS)):
        assert f"k{i}_".encode() in cubin, f"kernel {i} missing from the cubin"


@pytest.mark.parametrize("case_id, ast", KERNELS, ids=[k for k, _ in KERNELS])
def test_kernel_renders_with_a_guarded_grid_index(case_id, ast):
    kernel = generate(ast, CUDARenderer("CUDA"))
    assert f'extern "C" __global__ void {kernel.name}(' in kernel.source
    if kernel.global_size is None:
        assert "blockIdx" not in kernel.source
    elif "__syncthreads" in kernel.source or "gidx0" not in kernel.source:
        # a grouped reduction (one block per output) or a tiled matmul (codegen/tiled.py): the
        # launch is exact, no thread returns
        assert "int lidx0 = threadIdx.x;" in kernel.source and "return;" not in kernel.source
    else:
        (n,) = kernel.global_size
        assert "int gidx0 = blockIdx.x*blockDim.x+threadIdx.x;" in kernel.source
        assert f"if (gidx0 >= {n}) return;" in kernel.source
    assert ("#include <cuda_fp16.h>" in kernel.source) == (
        " half" in kernel.source.split("\n", 1)[1]
    )


GROUPED = {"grouped_sum-0": 256, "grouped_max_rows-0": 128, "grouped_sum_int32_axis0-0": 128}


@pytest.mark.parametrize("case_id, threads", GROUPED.items())
def test_long_reductions_run_one_block_per_output(case_id, threads):
    """Each thread folds a strided share into a register, then thread 0 combines the shares
    from ``__shared__`` memory after ``__syncthreads()`` and stores the output."""
    ast = dict(KERNELS)[case_id]
    kernel = generate(ast, CUDARenderer("CUDA"))
    text = kernel.source
    outputs = ast.src[0].src[1].size
    assert kernel.local_size == (threads,) and kernel.global_size == (outputs * threads,)
    assert "__shared__ " in text and "return;" not in text
    steps = [
        f"shared0[{threads}];",
        "shared0[lidx0] = acc0;",
        "__syncthreads();",
        "(lidx0<1);",
        "shared0[alu",
        "data0[",
    ]
    positions = [text.index(step) for step in steps]
    assert positions == sorted(positions), text
    assert ("blockIdx.x" in text) == (outputs > 1)


def test_a_kernel_over_a_variable_takes_it_as_an_int_and_compiles():
    from kernel_corpus import symbolic_kernels

    kernels = [generate(ast, CUDARenderer("CUDA")) for ast in symbolic_kernels()]
    for k in kernels:
        assert re.search(rf"void {k.name}\(.*, int seq\) {{", k.source), k.source
        assert [v.arg[0] for v in k.variables] == ["seq"]
    assert_compiles_with_nvcc(kernels)


def test_a_kernel_over_two_to_the_31_elements_counts_threads_in_64_bits_and_compiles():
    """Past 2**31 elements the grid index is ``long long``: the product of block index and
    block size is taken in 64 bits (in 32 it wraps), so are positions and loop counters."""
    from fusegrad import Tensor

    big = Tensor.full((64,), 7, dtype="uint8").pad(((2**31, 0),)).contiguous()
    summed = Tensor.ones(2**16, 1, dtype="int32").expand(2**16, 2**15 + 1).sum()
    kernels = [
        generate(step.ast, CUDARenderer("CUDA")) for out in (big, summed) for step in out.schedule()
    ]
    assert "long long gidx0 = (long long)blockIdx.x*blockDim.x+threadIdx.x;" in kernels[0].source
    assert "if (gidx0 >= 2147483712) return;" in kernels[0].source
    assert_compiles_with_nvcc(kernels)
