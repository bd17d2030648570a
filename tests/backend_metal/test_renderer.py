"""Every corpus kernel renders as Metal Shading Language, checked structurally (no Metal here):
each buffer bound at its own ``[[buffer(i)]]``, the thread index from ``thread_position_in_grid``
and guarded, no float64, no C-only spellings."""

from __future__ import annotations

import re

import pytest
from kernel_corpus import corpus_kernels, kernels_of

from fusegrad import Tensor, dtypes
from fusegrad.codegen.kernel import generate
from fusegrad.errors import UnsupportedOp
from fusegrad_metal.renderer import MetalRenderer

KERNELS = corpus_kernels()
METAL_KERNELS = [(k, ast) for k, ast in KERNELS if "float64" not in k]


@pytest.mark.parametrize("case_id, ast", METAL_KERNELS, ids=[k for k, _ in METAL_KERNELS])
def test_kernel_renders_with_bindings_and_a_guarded_thread_index(case_id, ast):
    kernel = generate(ast, MetalRenderer("METAL"))
    text = kernel.source
    assert text.startswith("#include <metal_stdlib>\nusing namespace metal;\n")
    signature = re.search(rf"kernel void {kernel.name}\((.*)\) {{", text).group(1)
    params = signature.split(", ")
    buffers = [p for p in params if p.startswith("device ")]
    assert [int(re.search(r"\[\[buffer\((\d+)\)\]\]$", p).group(1)) for p in buffers] == list(
        range(len(buffers))
    )
    assert all(
        re.fullmatch(rf"device \w+\* data{i} \[\[buffer\({i}\)\]\]", p)
        for i, p in enumerate(buffers)
    )
    if kernel.global_size is None:
        assert params == buffers and "gid" not in text
    elif kernel.local_size and "gidx0" not in text:  # grouped or tiled: an exact launch
        assert (
            params[-1] == "uint3 lid [[thread_position_in_threadgroup]]" and "return;" not in text
        )
    else:
        assert params[len(buffers) :] == ["uint3 gid [[thread_position_in_grid]]"]
        assert f"int gidx0 = gid.x;\n  if (gidx0 >= {kernel.global_size[0]}) return;" in text
    for c_only in ("double", "long long", "restrict", "union", "sqrtf", "exp2f", "log2f", "sinf"):
        assert c_only not in text


def test_float64_is_refused_naming_the_device():
    (ast,) = kernels_of(Tensor.rand(4, device="PYTHON").cast(dtypes.float64) + 1)
    with pytest.raises(UnsupportedOp, match="device METAL cannot hold float64"):
        generate(ast, MetalRenderer("METAL"))


def test_bitcast_uses_as_type_and_half_math_goes_through_float():
    x = Tensor.rand(4, device="PYTHON").realize()
    (bits,) = kernels_of(x.bitcast(dtypes.uint32))
    assert "as_type<uint>(" in generate(bits, MetalRenderer("METAL")).source
    (half,) = kernels_of(x.cast(dtypes.float16).exp2())
    assert "((half)(exp2((float)(" in generate(half, MetalRenderer("METAL")).source


@pytest.mark.parametrize("case_id", ["grouped_sum-0", "grouped_max_rows-0"])
def test_long_reductions_share_threadgroup_memory(case_id):
    """One threadgroup per output: shares in ``threadgroup`` memory, a barrier, thread 0 stores."""
    ast = dict(KERNELS)[case_id]
    kernel = generate(ast, MetalRenderer("METAL"))
    text = kernel.source
    (threads,) = kernel.local_size
    steps = [
        f"threadgroup float shared0[{threads}];",
        "shared0[lidx0] = acc0;",
        "threadgroup_barrier(mem_flags::mem_threadgroup);",
        "(lidx0<1);",
        "data0[",
    ]
    positions = [text.index(step) for step in steps]
    assert positions == sorted(positions), text
    assert "int lidx0 = lid.x;" in text
    grouped_rows = ast.src[0].src[1].size > 1
    assert ("uint3 tgid [[threadgroup_position_in_grid]]" in text) == grouped_rows
    assert ("int group0 = tgid.x;" in text) == grouped_rows


def test_a_variable_is_a_constant_bound_after_the_buffers():
    from kernel_corpus import symbolic_kernels

    for ast in symbolic_kernels():
        kernel = generate(ast, MetalRenderer("METAL"))
        signature = re.search(rf"kernel void {kernel.name}\((.*)\) {{", kernel.source).group(1)
        params = signature.split(", ")
        buffers = [p for p in params if p.startswith("device ")]
        assert params[len(buffers)] == f"constant int& seq [[buffer({len(buffers)})]]"


def test_a_tiled_matmul_stages_its_operands_in_threadgroup_memory():
    """Both operands are copied a tile at a time into threadgroup memory between two barriers."""
    a, b = Tensor.empty(256, 256, device="PYTHON"), Tensor.empty(256, 256, device="PYTHON")
    (ast,) = kernels_of(a @ b)
    text = generate(ast, MetalRenderer("METAL")).source
    assert text.count("threadgroup float shared") == 2
    assert text.count("threadgroup_barrier(mem_flags::mem_threadgroup);") == 2
    assert "uint3 lid [[thread_position_in_threadgroup]]" in text
