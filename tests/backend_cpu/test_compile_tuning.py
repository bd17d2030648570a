"""Tests of the per-kernel flags of ``fusegrad_cpu/compiler.py`` (``CCompiler.tuning``): which
kernels get which flags, batches split by them, and that no kernel takes the compiler long."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from fusegrad import kernel_cache
from fusegrad.errors import CompileError
from fusegrad_cpu import compiler as compiler_module
from fusegrad_cpu.compiler import (
    FLAGS,
    LONG_LINES,
    TUNING_RULE,
    UNROLLED_FLAGS,
    VERY_LONG_LINES,
    CCompiler,
    unrolled_copies,
)
from fusegrad_cpu.device import CPUProgram

from .conftest import download, upload

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

#: A register tile as the renderer writes one: an 8x32 unrolled nest (256 copies), then a loop.
TILE = """#include <math.h>
void tile(float* restrict data0, const float* restrict data1) {
  float acc0[256];
  #pragma GCC unroll 8
  for (int i = 0; i < 8; i++) {
    #pragma GCC unroll 32
    for (int j = 0; j < 32; j++) {
      acc0[i*32+j] = data1[j] * (float)i;
    }
  }
  for (int k = 0; k < 256; k++) {
    data0[k] = acc0[k];
  }
}
"""


def long_sum(terms: int) -> str:
    """A kernel of ``terms`` straight-line statements summing data1[0..7] over and over."""
    body = "".join(f"  acc = acc + data1[{k % 8}];\n" for k in range(terms))
    return (
        "void long_sum(float* restrict data0, const float* restrict data1) {\n"
        f"  float acc = 0.0f;\n{body}  data0[0] = acc;\n}}\n"
    )


def constant_kernel(value: int) -> str:
    return f"#include <math.h>\nvoid constant(int* data0) {{ data0[0] = {value}; }}\n"


def run(allocator, name: str, binary: bytes, size: int, data: np.ndarray) -> np.ndarray:
    """Run kernel ``name`` on ``data`` (float32), returning ``size`` floats of its output."""
    out = allocator.alloc(size * 4)
    CPUProgram(name, binary)(out, upload(allocator, data.astype(np.float32)))
    return download(allocator, out, np.float32, size)


def run_constant(allocator, binary: bytes) -> int:
    out = allocator.alloc(4)
    CPUProgram("constant", binary)(out)
    return int(download(allocator, out, np.int32, 1)[0])


@pytest.fixture
def commands(monkeypatch) -> list[list[str]]:
    """The command of each compiler process, in order."""
    seen: list[list[str]] = []
    real = compiler_module.run_compiler

    def recording(command, source, libraries=()):
        seen.append(list(command))
        return real(command, source, libraries)

    monkeypatch.setattr(compiler_module, "run_compiler", recording)
    return seen


def test_unrolled_copies_multiplies_the_factors_of_a_nest_only():
    assert unrolled_copies(TILE) == 256
    siblings = TILE.replace("    #pragma GCC unroll 32\n", "")
    assert unrolled_copies(siblings) == 8  # the inner loop is not unrolled
    after = "  #pragma GCC unroll 4\n  for (;;) {\n  }\n  for (;;) {\n    x;\n  }\n"
    assert unrolled_copies(after) == 4  # a loop after an unrolled one is not inside it
    assert unrolled_copies(constant_kernel(1)) == 1


@needs_gcc
def test_each_kernel_gets_flags_by_its_shape():
    gcc = CCompiler(["gcc"], openmp=False)
    assert gcc.tuning(TILE) == UNROLLED_FLAGS
    assert gcc.tuning(constant_kernel(1)) == ()
    assert gcc.tuning(long_sum(LONG_LINES + 10)) == ("-O1",)
    assert gcc.tuning(long_sum(VERY_LONG_LINES + 10)) == ("-O0",)
    given = CCompiler(["gcc"], flags=FLAGS, openmp=False)
    assert given.tuning(TILE) == () and given.tuning(long_sum(LONG_LINES + 10)) == ()


@needs_gcc
def test_a_gcc_that_refuses_the_unrolled_flags_builds_without_them(tmp_path, allocator):
    wrapper = tmp_path / "cc"  # a gcc that knows no such pass
    refused = UNROLLED_FLAGS[0]
    wrapper.write_text(
        f'#!/bin/sh\nfor a in "$@"; do [ "$a" = "{refused}" ] && exit 1; done\n'
        f'exec {shutil.which("gcc")} "$@"\n'
    )
    wrapper.chmod(0o755)
    compiler = CCompiler([str(wrapper)], openmp=False)
    assert compiler.tuning(TILE) == ()
    built = compiler.compile_batch([TILE, constant_kernel(3)])
    assert run(allocator, "tile", built[0], 256, np.ones(32))[255] == 7


def test_clang_never_gets_gcc_only_flags():
    if shutil.which("clang") is None:
        pytest.skip("needs clang")
    assert CCompiler(["clang"], openmp=False).tuning(TILE) == ()


def test_identity_names_the_rules_of_per_kernel_flags():
    assert TUNING_RULE in CCompiler(openmp=False).identity
    assert TUNING_RULE not in CCompiler(flags=FLAGS, openmp=False).identity


@needs_gcc
def test_batch_builds_one_process_per_flag_set_and_a_long_kernel_alone(allocator, commands):
    compiler = CCompiler(["gcc"])
    assert compiler.flags  # the OpenMP test is a build of its own: done before counting
    commands.clear()
    long = long_sum(LONG_LINES + 10)
    sources = [constant_kernel(1), TILE, constant_kernel(2), long, long_sum(LONG_LINES + 20)]
    built = compiler.compile_batch(sources)
    tails = sorted(tuple(c[len(compiler.command) + len(compiler.flags) :]) for c in commands)
    assert tails == sorted([(), UNROLLED_FLAGS, ("-O1",), ("-O1",)])  # each long one alone
    assert [run_constant(allocator, built[i]) for i in (0, 2)] == [1, 2]
    ones = np.arange(32, dtype=np.float32)
    assert np.array_equal(
        run(allocator, "tile", built[1], 256, ones), np.outer(range(8), ones).ravel()
    )
    assert run(allocator, "long_sum", built[3], 1, np.ones(8))[0] == LONG_LINES + 10


@needs_gcc
def test_broken_kernel_of_a_group_names_itself_and_the_others_are_cached(cache, allocator):
    broken = TILE.replace("data0[k] = acc0[k];", "data0[k] = acc0[k]").replace("tile", "bad")
    sources = [constant_kernel(1), broken, TILE, constant_kernel(2)]
    results = CCompiler(["gcc"]).compile_cached_batch(sources)
    assert isinstance(results[1], CompileError)
    message = str(results[1])
    assert "kernel bad failed" in message and "tile" not in message
    assert "disable pass" not in message  # gcc's note on every build is left out
    assert [run_constant(allocator, results[i]) for i in (0, 3)] == [1, 2]
    assert run(allocator, "tile", results[2], 256, np.ones(32))[255] == 7
    entries = list((cache / kernel_cache.FOLDER).iterdir())
    assert len(entries) == 3 and not [p for p in entries if p.name.startswith(".tmp-")]


#: The backward of a 512-element cumprod: once a 23000-line kernel gcc -O2 spent 20 s (and
#: a 128-element one 31 s and 1 GB) on. Prints the compilers' processor seconds.
CUMPROD = """
import resource
from fusegrad import Tensor
x = Tensor.rand(512, requires_grad=True)
x.cumprod(0).sum().backward()
x.grad.realize()
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(used.ru_utime + used.ru_stime)
"""


@needs_gcc
def test_a_long_scan_backward_takes_the_compiler_seconds_not_minutes(tmp_path):
    env = {**os.environ, "FUSEGRAD_CACHE": str(tmp_path), "FUSEGRAD_COMPILE_TIMEOUT": "120"}
    env.pop("FUSEGRAD_DISABLE_CACHE", None)
    done = subprocess.run(
        [sys.executable, "-c", CUMPROD], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert float(done.stdout.split()[-1]) < 10  # processor seconds: other jobs hardly change it
