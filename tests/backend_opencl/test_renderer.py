"""Tests of ``fusegrad_opencl/renderer.py``: OpenCL C spellings and dtype capabilities."""

from __future__ import annotations

import pytest
from kernel_corpus import kernels_of

from fusegrad import Tensor, dtypes
from fusegrad.codegen.kernel import generate
from fusegrad.errors import UnsupportedOp
from fusegrad_opencl.renderer import OpenCLRenderer


def source(t: Tensor, renderer: OpenCLRenderer) -> str:
    (ast,) = kernels_of(t)
    return generate(ast, renderer).source


def x(*shape, dtype=dtypes.float32) -> Tensor:
    return Tensor.rand(*shape, device="PYTHON").cast(dtype).realize()


@pytest.mark.parametrize(
    "extensions, missing",
    [
        ("", {"float16", "float64"}),
        ("cl_khr_fp64", {"float16"}),
        ("cl_khr_fp16 cl_khr_fp64", set()),
    ],
)
def test_float16_and_float64_follow_the_extensions(extensions, missing):
    supported = OpenCLRenderer("OPENCL", extensions.split()).supported_dtypes
    assert {d.name for d in (dtypes.float16, dtypes.float64) if d not in supported} == missing
    assert dtypes.float32 in supported and dtypes.int64 in supported


def test_a_dtype_without_its_extension_is_refused_naming_device_and_dtype():
    with pytest.raises(UnsupportedOp, match="device OPENCL:1 cannot hold float16"):
        source(x(4, dtype=dtypes.float16) + 1, OpenCLRenderer("OPENCL:1", ["cl_khr_fp64"]))


def test_kernel_signature_and_grid_index():
    text = source(x(3, 4) + x(3, 4), OpenCLRenderer("OPENCL"))
    assert (
        "__kernel void E_3_4(__global float* restrict data0, __global float* restrict data1" in text
    )
    assert "int gidx0 = get_global_id(0);" in text
    assert "if (gidx0 >= 12) return;" in text  # the launch rounds up to whole work-groups


def test_bool_buffers_are_bytes_and_bitcasts_use_as_type():
    assert "__global uchar* restrict data0" in source(x(4) < 0.5, OpenCLRenderer("OPENCL"))
    assert "as_uint(" in source(x(4).bitcast(dtypes.uint32), OpenCLRenderer("OPENCL"))


def test_extension_pragmas_only_when_used():
    both = OpenCLRenderer("OPENCL", ["cl_khr_fp16", "cl_khr_fp64"])
    text = source(x(4, dtype=dtypes.float64).cast(dtypes.float16), both)
    assert "#pragma OPENCL EXTENSION cl_khr_fp64 : enable" in text
    assert "#pragma OPENCL EXTENSION cl_khr_fp16 : enable" in text
    assert "#pragma" not in source(x(4) * 2, both)


def test_math_is_overloaded_and_int64_constants_say_l():
    text = source((x(4).exp2() + x(4).sqrt()), OpenCLRenderer("OPENCL"))
    assert "exp2(" in text and "sqrt(" in text and "exp2f" not in text
    assert "3000000000l" in source(
        x(4, dtype=dtypes.int64) + 3_000_000_000, OpenCLRenderer("OPENCL")
    )
