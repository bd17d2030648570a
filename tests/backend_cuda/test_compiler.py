"""Tests of ``fusegrad_cuda/compiler.py``: finding NVRTC or nvcc, errors, identities."""

from __future__ import annotations

import pytest

from fusegrad.errors import CompileError, DeviceUnavailable
from fusegrad_cuda import compiler
from fusegrad_cuda.compiler import NVCCCompiler, NVRTCCompiler, find_cuda_compiler

BROKEN = 'extern "C" __global__ void broken(float* data0) { data0[0] = undefined_name; }'


def available() -> list[type]:
    return [
        c
        for c, find in ((NVCCCompiler, compiler.find_nvcc), (NVRTCCompiler, compiler.find_nvrtc))
        if find() is not None
    ]


@pytest.mark.parametrize(
    "make", available() or [pytest.param(None, marks=pytest.mark.skip("no CUDA compiler"))]
)
def test_compile_error_shows_the_message_and_the_numbered_source(make):
    with pytest.raises(CompileError) as info:
        make("sm_80").compile(BROKEN)
    message = str(info.value)
    assert "failed to compile for sm_80" in message and "undefined_name" in message
    assert '   1 | extern "C" __global__ void broken' in message


@pytest.mark.parametrize(
    "make", available() or [pytest.param(None, marks=pytest.mark.skip("no CUDA compiler"))]
)
def test_identity_names_the_tool_and_the_architecture(make):
    identity = make("sm_90").identity
    assert "sm_90" in identity and "--fmad=false" in identity


def test_nvrtc_first_then_nvcc(monkeypatch):
    monkeypatch.setattr(compiler, "find_nvrtc", lambda: None)
    if compiler.find_nvcc() is None:
        pytest.skip("nvcc not found")
    assert isinstance(find_cuda_compiler("sm_90"), NVCCCompiler)
    assert find_cuda_compiler("sm_90").arch == "sm_90"


def test_neither_compiler_says_how_to_get_one(monkeypatch):
    monkeypatch.setattr(compiler, "find_nvrtc", lambda: None)
    monkeypatch.setattr(compiler, "find_nvcc", lambda: None)
    with pytest.raises(DeviceUnavailable, match="no CUDA compiler found: install the CUDA toolkit"):
        find_cuda_compiler()
