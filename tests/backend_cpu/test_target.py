"""Building for another processor than this one (``FUSEGRAD_CPU_ARCH``): the compiler's flags and
identity, the renderer's vectors, and kernels without AVX-512 that still compute the right values;
and the program rule that shapes index sums for gcc's vectoriser."""

from __future__ import annotations

import re
import shutil
import subprocess

import numpy as np
import pytest

from fusegrad import Device, Tensor
from fusegrad.codegen.kernel import generate
from fusegrad.codegen.opt import heuristic_opts
from fusegrad.dtype import dtypes
from fusegrad.errors import DeviceUnavailable
from fusegrad.uop.loops import AxisKind, LoopArg
from fusegrad.uop.ops import Ops, UOp
from fusegrad_cpu import compiler as compiler_module
from fusegrad_cpu.compiler import ARCH_VARIABLE, CCompiler, cpu_info
from fusegrad_cpu.device import CPUAllocator, CPUProgram
from fusegrad_cpu.renderer import CPURenderer, add_unrolled_counter_last

from .conftest import download, upload

#: AVX2 and FMA, no AVX-512: what most laptops and Zen 3 machines run
AVX2 = "x86-64-v3"
needs_avx2_gcc = pytest.mark.skipif(
    shutil.which("gcc") is None or "avx2" not in cpu_info()[1].split(),
    reason="needs gcc and a processor with AVX2",
)


@pytest.fixture
def avx2(monkeypatch: pytest.MonkeyPatch) -> None:
    """``FUSEGRAD_CPU_ARCH`` names the AVX2 target, and gcc builds (clang may lack the name)."""
    monkeypatch.setenv(ARCH_VARIABLE, AVX2)
    monkeypatch.setenv("CC", "gcc")


@needs_avx2_gcc
def test_avx2_target_sets_march_and_the_renderers_vectors(avx2):
    assert f"-march={AVX2}" in CCompiler().flags
    renderer = CPURenderer("CPU")
    assert (renderer.vector_registers, renderer.vector_bytes) == (16, 32)


@needs_avx2_gcc
def test_avx2_matmul_has_no_avx512_instructions_and_is_right(avx2, tmp_path):
    """Its 6x16 tile in 8-float registers: no zmm register (AVX-512's) in the machine code."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((48, 96), np.float32), rng.standard_normal((96, 64), np.float32)
    (step,) = (Tensor(a, device="CPU") @ Tensor(b, device="CPU")).schedule()
    renderer = CPURenderer("CPU")
    opts = heuristic_opts(step.ast, renderer)
    assert max(amount for _, amount in opts.upcast) == 16  # two registers of 8 floats
    kernel = generate(step.ast, renderer, Device["CPU"].rules, opts)
    binary = CCompiler().compile(kernel.source)
    if shutil.which("objdump"):
        (tmp_path / "kernel.so").write_bytes(binary)
        listing = subprocess.run(
            ["objdump", "-d", str(tmp_path / "kernel.so")], capture_output=True, text=True
        ).stdout
        assert "ymm" in listing and "zmm" not in listing
    allocator = CPUAllocator()
    out = allocator.alloc(48 * 64 * 4)
    CPUProgram(kernel.name, binary)(out, upload(allocator, a), upload(allocator, b))
    np.testing.assert_allclose(
        download(allocator, out, np.float32, 48 * 64).reshape(48, 64), a @ b, rtol=1e-4, atol=1e-4
    )


@needs_avx2_gcc
def test_cache_key_differs_between_targets(monkeypatch):
    """AVX-512 and AVX2 builds of one source never share a disk cache entry."""
    source = "void f(float* data0) { data0[0] = 1.0f; }"
    monkeypatch.delenv(ARCH_VARIABLE, raising=False)
    native = CCompiler(["gcc"], openmp=False)
    monkeypatch.setenv(ARCH_VARIABLE, AVX2)
    avx2 = CCompiler(["gcc"], openmp=False)
    assert "-march=native" in native.identity and f"-march={AVX2}" in avx2.identity
    assert native._cache_key(source) != avx2._cache_key(source)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_unknown_target_says_how_to_fix(monkeypatch):
    monkeypatch.setenv(ARCH_VARIABLE, "no-such-cpu")
    monkeypatch.setenv("CC", "gcc")
    with pytest.raises(DeviceUnavailable, match="FUSEGRAD_CPU_ARCH='no-such-cpu'.*unset it"):
        CPURenderer("CPU")


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_target_beyond_this_processor_is_refused(monkeypatch):
    """Its kernels would die of an illegal instruction: refused when the device opens."""
    monkeypatch.setattr(compiler_module, "cpu_info", lambda: ("Test CPU", "sse2 avx avx2 fma"))
    monkeypatch.setenv(ARCH_VARIABLE, "x86-64-v4")
    monkeypatch.setenv("CC", "gcc")
    with pytest.raises(DeviceUnavailable, match="avx512f, which this processor \\(Test CPU\\)"):
        CPURenderer("CPU")


def _counter(axis: int, kind: AxisKind) -> UOp:
    return UOp(Ops.RANGE, dtypes.int32, (UOp.const(dtypes.int32, 16),), LoopArg(axis, kind))


def test_unrolled_counter_is_added_last():
    x, y = _counter(0, AxisKind.REDUCE), _counter(1, AxisKind.GLOBAL)
    u = _counter(2, AxisKind.UPCAST)
    assert add_unrolled_counter_last(x + (y + u)) is (x + y) + u  # x + (y + u) -> (x + y) + u
    assert add_unrolled_counter_last((u + y) + x) is (x + y) + u
    assert add_unrolled_counter_last((x + y) + u) is None  # already last
    assert add_unrolled_counter_last(x + (y + x)) is None  # no unrolled counter


def test_narrow_matmul_reads_its_right_operand_at_base_plus_counter():
    """A 64-column right operand is not panelled: its index ``k*64 + (column + u)`` was nested,
    and gcc 12 packed the tile in pieces. Each load's index now ends in the tile's counter."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((96, 512), np.float32), rng.standard_normal((512, 64), np.float32)
    ta, tb = Tensor(a, device="CPU"), Tensor(b, device="CPU")
    (step,) = (ta @ tb).schedule()
    source = generate(step.ast, Device["CPU"].renderer, Device["CPU"].rules).source
    (index,) = re.findall(r"data2\[(\w+)\]", source)
    assert re.search(rf"(?:int|long long) {index} = \(alu\d+\+uidx\d+\);", source), source
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-4, atol=1e-3)
