"""Tests of ``fusegrad_cpu/compiler.py``: building C, reporting failures, caching, identity."""

from __future__ import annotations

import os
import platform
import shutil
import stat
import subprocess
import sys

import numpy as np
import pytest

from fusegrad import Device, Tensor, kernel_cache
from fusegrad.codegen.kernel import generate
from fusegrad.errors import CompileError, DeviceUnavailable
from fusegrad.helpers import usable_cores
from fusegrad_cpu import compiler as compiler_module
from fusegrad_cpu.compiler import (
    FLAGS,
    GCC_FLAGS,
    CCompiler,
    find_c_compiler,
    supports_openmp,
    target_flags,
)
from fusegrad_cpu.device import CPUProgram

from .conftest import download, upload

BROKEN = "void broken(float* data0) {\n  data0[0] = 1.0f\n}\n"
ADD_ONE = "void add_one(float* data0, const float* data1) { data0[0] = data1[0] + 1.0f; }"


class CountingCompiler(CCompiler):
    """Counts real compiles, so tests can tell a cache hit from a build."""

    calls = 0

    def compile(self, source: str) -> bytes:
        self.calls += 1
        return super().compile(source)


def test_syntax_error_shows_message_and_numbered_source(compiler):
    with pytest.raises(CompileError) as e:
        compiler.compile(BROKEN)
    message = str(e.value)
    assert "expected ';'" in message  # the compiler's own words (clang and gcc both say so)
    assert "   2 |   data0[0] = 1.0f" in message
    assert "report" in message


def test_same_source_gives_same_bytes(compiler):
    assert compiler.compile(ADD_ONE) == compiler.compile(ADD_ONE)


def test_cache_returns_stored_bytes_without_compiling(cache, allocator):
    first = CountingCompiler()
    binary = first.compile_cached(ADD_ONE)
    again, fresh = first.compile_cached(ADD_ONE), CountingCompiler().compile_cached(ADD_ONE)
    assert (again, fresh) == (binary, binary)
    assert first.calls == 1
    assert len(list((cache / kernel_cache.FOLDER).iterdir())) == 1
    out, x = allocator.alloc(4), upload(allocator, np.array([41], np.float32))
    CPUProgram("add_one", fresh)(out, x)
    assert download(allocator, out, np.float32, 1)[0] == 42


def test_failed_compile_leaves_nothing_in_cache(cache):
    with pytest.raises(CompileError):
        CCompiler().compile_cached(BROKEN)
    assert [p for p in cache.rglob("*") if p.is_file()] == []


def test_identity_names_compiler_version_and_flags():
    names = [n for n in ("clang", "gcc") if shutil.which(n)]
    identities = {CCompiler([n], openmp=False).identity for n in names}
    assert len(identities) == len(names)
    plain = CCompiler(openmp=False)
    first_line = subprocess.run(
        [plain.command[0], "--version"], capture_output=True, text=True
    ).stdout
    assert target_flags()[0] in plain.identity and first_line.splitlines()[0] in plain.identity
    assert plain.identity != CCompiler(openmp=True).identity
    assert plain.identity != CCompiler(flags=(*FLAGS, "-ffast-math"), openmp=False).identity


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_gcc_flags_go_to_gcc_alone_and_only_by_default():
    target = target_flags()
    assert CCompiler(["gcc"], openmp=False).flags == (*FLAGS, *target, *GCC_FLAGS)
    assert CCompiler(["gcc"], flags=FLAGS, openmp=False).flags == FLAGS
    if shutil.which("clang"):
        assert CCompiler(["clang"], openmp=False).flags == (*FLAGS, *target)


def test_nothing_runs_before_the_first_compile(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a subprocess ran while constructing the compiler")

    monkeypatch.setattr(subprocess, "run", refuse)
    CCompiler()


def fake_compiler(folder, refuse: str) -> str:
    """A gcc wrapper at ``folder/cc`` that fails whenever ``refuse`` is among its arguments."""
    path = folder / "cc"
    path.write_text(
        f'#!/bin/sh\nfor a in "$@"; do [ "$a" = "{refuse}" ] && exit 1; done\n'
        f'exec {shutil.which("gcc")} "$@"\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_openmp_detected_and_used():
    assert supports_openmp((shutil.which("gcc"), *FLAGS))
    assert "-fopenmp" in CCompiler(["gcc"]).flags


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_openmp_left_out_when_it_fails(tmp_path):
    compiler = CCompiler([fake_compiler(tmp_path, "-fopenmp")])
    assert "-fopenmp" not in compiler.flags
    assert compiler.compile(ADD_ONE)[:4] == b"\x7fELF"


def test_openmp_kernel_runs_on_every_thread(allocator):
    compiler = CCompiler()
    if "-fopenmp" not in compiler.flags:
        pytest.skip(f"{compiler.command[0]} cannot build OpenMP here")
    source = (
        "#include <omp.h>\n"
        "void threads(int* data0) {\n"
        "#pragma omp parallel\n"
        "  if (omp_get_thread_num() == 0) data0[0] = omp_get_num_threads();\n"
        "}\n"
    )
    out = allocator.alloc(4)
    CPUProgram("threads", compiler.compile(source))(out)
    expected = int(os.environ.get("OMP_NUM_THREADS") or len(os.sched_getaffinity(0)))
    assert download(allocator, out, np.int32, 1)[0] == expected


SINES = (
    "#include <math.h>\n"
    "void sines(float* restrict data0, const float* restrict data1) {\n"
    "  #pragma omp parallel for simd schedule(static)\n"
    "  for (int i = 0; i < 4096; i++) data0[i] = sinf(data1[i]);\n"
    "}\n"
)


def _sines(compiler, allocator, x: np.ndarray) -> tuple[np.ndarray, bytes]:
    binary = compiler.compile(SINES)
    out, given = allocator.alloc(4 * 4096), upload(allocator, x)
    CPUProgram("sines", binary)(out, given)
    return download(allocator, out, np.float32, 4096), binary


def _sine_values() -> np.ndarray:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-1, 1, 1024) * 10.0**e for e in (0, 2, 5, 30)])
    x[:6] = [np.inf, -np.inf, np.nan, -0.0, 1e-30, 3.1415927]
    return x.astype(np.float32)


@pytest.mark.skipif(
    shutil.which("gcc") is None or platform.libc_ver()[0] != "glibc", reason="needs gcc, glibc"
)
def test_sin_calls_vector_math_and_stays_within_two_ulp(allocator):
    """gcc's OpenMP loops call libmvec's vector sinf (``VECTOR_MATH``): 14x faster than libm's
    scalar one on 2 cores; every value within 2.5 ulp of the exact sine, specials as libm."""
    compiler = CCompiler(["gcc"])
    assert compiler.vector_math and "vector math: libmvec" in compiler.identity
    x = _sine_values()
    got, binary = _sines(compiler, allocator, x)
    assert b"_ZGV" in binary  # (the vector function's mangled name)
    exact = np.sin(x.astype(np.float64))
    ulp = np.spacing(np.abs(exact).astype(np.float32)).astype(np.float64)
    finite = np.isfinite(x)
    assert np.all(np.abs(got[finite] - exact[finite]) <= 2.5 * ulp[finite])
    assert np.isnan(got[:3]).all() and np.signbit(got[3]) and got[3] == 0.0


PROBE_IN_A_THREAD = """
import os
from concurrent.futures import ThreadPoolExecutor
from fusegrad_cpu.compiler import CCompiler
threads = lambda: len(os.listdir("/proc/self/task"))
compiler = CCompiler(["gcc"])
before = threads()
with ThreadPoolExecutor(1) as pool:  # (a thread that lives on, as the compile threads do)
    found = pool.submit(lambda: compiler.vector_math).result()
    print(found, threads() - before - 1)
"""


@pytest.mark.skipif(
    shutil.which("gcc") is None or platform.libc_ver()[0] != "glibc" or usable_cores() < 2,
    reason="needs gcc, glibc and 2 cores",
)
def test_vector_math_probe_starts_no_openmp_team_in_the_thread_that_runs_it():
    """The probe runs in whichever thread builds the first kernel, a compile thread as a rule.
    Had it a parallel loop, that thread would start an OpenMP team of its own, whose worker
    stays as long as the thread (a compile thread's: the process's); with more threads than
    cores libgomp's workers then sleep at once after each kernel, and every later short
    kernel waited to wake one (attention's products at half speed). In a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE_IN_A_THREAD], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "0"]


FIRST_PLAN = """
import os, threading
import numpy as np
from fusegrad import Tensor
from fusegrad.helpers import usable_cores
threads = lambda: len(os.listdir("/proc/self/task"))
x = Tensor(np.ones((64, 64), np.float32)).realize()
before = threads()
((x @ x.T).exp().sum(0) + (x * 2).max(1)).realize()  # kernels built by the compile threads
compilers = sum(t.name.startswith("fusegrad-compile") for t in threading.enumerate())
print(threads() - before - compilers, compilers, usable_cores())
"""


@pytest.mark.skipif(
    shutil.which("gcc") is None or platform.libc_ver()[0] != "glibc" or usable_cores() < 2,
    reason="needs gcc, glibc and 2 cores",
)
def test_a_process_runs_one_openmp_team_after_its_first_compiles(tmp_path):
    """The first plan of a process builds its kernels in compiler threads (and the compiler's
    probes run there); besides those threads it adds one team's workers (a core each but the
    main thread's), no second team.
    With two teams in the process, libgomp put every worker to sleep after each kernel: short
    kernels ran at half speed, torch's in the same process too."""
    env = {**os.environ, "FUSEGRAD_CACHE": str(tmp_path)}
    env.pop("OMP_NUM_THREADS", None)
    done = subprocess.run(
        [sys.executable, "-c", FIRST_PLAN], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr
    workers, compilers, cores = map(int, done.stdout.split())
    assert compilers >= 1  # (else the test shows nothing)
    assert workers <= cores - 1, f"{workers} OpenMP workers for {cores} cores"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
def test_sin_stays_scalar_when_vector_math_does_not_link(tmp_path, allocator):
    compiler = CCompiler([fake_compiler(tmp_path, "-lmvec")])
    assert not compiler.vector_math and "vector math: none" in compiler.identity
    x = _sine_values()
    got, binary = _sines(compiler, allocator, x)
    assert b"_ZGV" not in binary
    finite = np.isfinite(x)
    np.testing.assert_allclose(got[finite], np.sin(x[finite].astype(np.float64)), atol=1e-7)


def test_given_flags_get_no_vector_math():
    assert not CCompiler(flags=FLAGS).vector_math


def test_cc_is_honoured_with_its_own_words(monkeypatch):
    monkeypatch.setenv("CC", "gcc -std=c11")
    assert find_c_compiler() == [shutil.which("gcc"), "-std=c11"]


def test_unknown_cc_says_how_to_fix(monkeypatch):
    monkeypatch.setenv("CC", "no-such-cc")
    with pytest.raises(DeviceUnavailable, match="CC='no-such-cc'.*apt-get install clang"):
        find_c_compiler()


def test_no_compiler_on_path_says_how_to_fix(monkeypatch, tmp_path):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(DeviceUnavailable, match="no C compiler found.*apt-get install clang"):
        find_c_compiler()
    with pytest.raises(DeviceUnavailable):
        CCompiler()


def test_numbered_counts_from_one():
    assert compiler_module.numbered("a\nb") == "   1 | a\n   2 | b"


def constant_kernel(value: int) -> str:
    """A kernel named ``constant`` that stores ``value``: several of them share a name."""
    return f"#include <math.h>\nvoid constant(int* data0) {{ data0[0] = {value}; }}\n"


def run_constant(allocator, binary: bytes) -> int:
    out = allocator.alloc(4)
    CPUProgram("constant", binary)(out)
    return int(download(allocator, out, np.int32, 1)[0])


@pytest.fixture
def builds(monkeypatch) -> list[str]:
    """The sources each compiler process was given, in order."""
    seen: list[str] = []
    real = compiler_module.run_compiler

    def counting(command, source, libraries=()):
        seen.append(source)
        return real(command, source, libraries)

    monkeypatch.setattr(compiler_module, "run_compiler", counting)
    return seen


def test_batch_is_one_process_whose_kernels_run_as_single_builds_do(compiler, allocator, builds):
    sources = [constant_kernel(v) for v in range(4)]
    assert compiler.flags  # the OpenMP test is a build of its own: done before counting
    builds.clear()
    batch = compiler.compile_batch(sources)
    assert len(builds) == 1
    assert [run_constant(allocator, b) for b in batch] == [0, 1, 2, 3]
    assert [run_constant(allocator, compiler.compile(s)) for s in sources] == [0, 1, 2, 3]
    assert len({b.partition(b"\n")[2] for b in batch}) == 1  # one library, shared


def test_batch_of_a_repeated_source_gives_the_same_kernel_twice(compiler, allocator):
    first, again = compiler.compile_batch([constant_kernel(7), constant_kernel(7)])
    assert first == again and run_constant(allocator, first) == 7


def test_broken_kernel_in_batch_names_itself_and_spares_the_others(cache, allocator, builds):
    compiler = CCompiler()
    assert compiler.flags
    builds.clear()
    results = compiler.compile_cached_batch([constant_kernel(1), BROKEN, constant_kernel(2)])
    assert len(builds) == 4  # the batch, then each kernel alone
    assert isinstance(results[1], CompileError)
    message = str(results[1])
    assert "kernel broken failed" in message and "   2 |   data0[0] = 1.0f" in message
    assert "constant" not in message  # about the broken kernel alone
    assert [run_constant(allocator, results[i]) for i in (0, 2)] == [1, 2]
    # the good kernels were cached, each under its own source, and read back without a build
    assert len(list((cache / kernel_cache.FOLDER).iterdir())) == 2
    again = CountingCompiler()
    binaries = [again.compile_cached(constant_kernel(v)) for v in (1, 2)]
    assert [run_constant(allocator, b) for b in binaries] == [1, 2] and again.calls == 0


def test_batch_entries_are_keyed_by_their_own_source(cache, allocator):
    built = CCompiler().compile_cached_batch([constant_kernel(3), constant_kernel(4)])
    assert CCompiler().compile_cached_batch([constant_kernel(4)]) == built[1:]
    assert run_constant(allocator, CCompiler().compile_cached(constant_kernel(4))) == 4
    assert not [p for p in (cache / kernel_cache.FOLDER).iterdir() if p.name.startswith(".tmp-")]


def test_subclass_that_overrides_compile_sees_every_source():
    counting = CountingCompiler()
    built = counting.compile_batch([constant_kernel(5), constant_kernel(6)])
    assert [b[:4] for b in built] == [b"\x7fELF"] * 2 and counting.calls == 2


def test_kernels_sharing_a_prelude_helper_build_in_one_process(compiler, allocator, builds):
    """Two attention-score kernels, each with the block-transpose helper in its prelude: one
    translation unit holds both (the helper is guarded: defined twice, the batch failed and
    each kernel was built again alone), and each computes its product."""
    runtime, cases = Device["CPU"], []
    for shape in [(2, 64, 32), (2, 96, 64)]:
        qn, kn = (np.random.default_rng(s).standard_normal(shape, np.float32) for s in (0, 1))
        (step,) = (Tensor(qn) @ Tensor(kn).transpose(-1, -2)).schedule()
        kernel = generate(step.ast, runtime.renderer, runtime.rules)
        assert "fg_transpose8(" in kernel.source
        cases.append((kernel, qn, kn))
    assert compiler.flags
    builds.clear()
    batch = compiler.compile_batch([kernel.source for kernel, _, _ in cases])
    assert len(builds) == 1 and not any(isinstance(b, CompileError) for b in batch)
    for (kernel, qn, kn), binary in zip(cases, batch):
        out = allocator.alloc(qn.shape[0] * qn.shape[1] ** 2 * 4)
        q, k = upload(allocator, qn), upload(allocator, kn)
        CPUProgram(kernel.name, binary)(out, q, k)
        got = download(allocator, out, np.float32, qn.shape[0] * qn.shape[1] ** 2)
        expected = (qn @ np.swapaxes(kn, 1, 2)).reshape(-1)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
