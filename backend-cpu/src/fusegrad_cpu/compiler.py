"""C source -> shared object bytes, with the system's C compiler (``$CC``, else gcc, else clang).

gcc comes first because it does better with the kernels we generate, measured on this project's
machines: an 8x32-upcast 1024x1024 matmul runs at about 36 GFLOP/s built by gcc 12 and about
9 built by clang 14 (which keeps the accumulator array in memory), and clang 14 has no
``_Float16`` on x86-64. ``CC=clang`` still selects clang.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import platform
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence

from fusegrad.compile_process import compile_folder, run_compiler_process
from fusegrad.device import Compiler
from fusegrad.errors import CompileError, DeviceUnavailable
from fusegrad_cpu.device import shared_entry

#: -O2, not -O3: the kernels run as fast (measured with gcc 12 on the MNIST training step, a
#: 1024x1024 matmul and a convolution) and build in about 40% less time, since the renderer's
#: pragmas already unroll and vectorise the short loops, most of what -O3 would add. Contraction
#: stays off so that ``a*b+c`` rounds twice, as numpy does. ``-fno-trapping-math`` changes no
#: value (kernels never read the floating-point exception flags); without it gcc may not turn a
#: ternary on floats into a vector select, so an exp (clamped by two) ran scalar: softmax 4x slower.
#: ``-fno-math-errno`` changes no value either (kernels never read ``errno``; a square root of a
#: negative is NaN both ways); without it gcc keeps every ``sqrtf`` scalar, to call the library
#: for a negative argument, and the whole loop with it: the GPT's AdamW update ran scalar.
#: The processor comes from ``target_flags`` (``-march``), added to these by default.
FLAGS = (
    "-O2",
    "-fPIC",
    "-shared",
    "-ffp-contract=off",
    "-fno-trapping-math",
    "-fno-math-errno",
)
#: Names the processor to build kernels for, as gcc's and clang's ``-march`` spells it:
#: ``FUSEGRAD_CPU_ARCH=x86-64-v3`` (or ``haswell``, ``znver3``: AVX2 and FMA, no AVX-512) builds
#: and measures on an AVX-512 machine what a machine without AVX-512 runs. Unset: ``native``.
ARCH_VARIABLE = "FUSEGRAD_CPU_ARCH"
#: Predefined macro -> the feature flag /proc/cpuinfo lists for it: what the renderer sizes its
#: vectors from (``renderer.vector_register_file``), and what this processor must have.
MACRO_FEATURES = {
    "__AVX512F__": "avx512f",
    "__AVX2__": "avx2",
    "__AVX__": "avx",
    "__FMA__": "fma",
    "__SSE2__": "sse2",
    "__ARM_NEON": "asimd",
}
#: Added to the default flags for gcc (clang refuses them): -O3's vectoriser cost model, since
#: -O2's vectorises only loops that need no scalar remainder (an elementwise kernel of 1001);
#: and no jump threading, which copied the branches of two selects on one comparison (a ReLU's
#: backward under a max pool's) into a shape the vectoriser gives up on: that batch-norm
#: gradient kernel ran scalar and branchy, 10.5 ms instead of 0.8.
GCC_FLAGS = ("-fvect-cost-model=dynamic", "-fno-thread-jumps")
#: Added for gcc to a kernel whose unrolled loops (``#pragma GCC unroll``) nest to
#: ``UNROLLED_COPIES`` or more copies of their body, such as a matmul's or a convolution's
#: register tile (8x32: 256 copies). -O2's early complete unroller (``cunrolli``) copies such a
#: nest out before the vectoriser runs, which then has 256 scalar statements to put back
#: together, and gcc's alias queries grow with them: the GPT example's 21 matmul kernels took
#: 5.5 s of gcc 12, MNIST's 13 convolutions 6.7 s. Without that pass, the nest is unrolled after
#: vectorising, into the same loop of 16 zmm FMAs: 0.9 s and 2.0 s, and they run as fast.
#: Small nests (2 copies: a layernorm's row sum) ran twice as slow without it, so they keep it.
#: Left as a loop, the tile's zeroing became a ``memset`` of the accumulators in memory, a
#: waste when they live in registers (MNIST's first convolution 6% slower): hence no patterns.
UNROLLED_FLAGS = ("-fdisable-tree-cunrolli", "-fno-tree-loop-distribute-patterns")
UNROLLED_COPIES = 32
#: A kernel of more lines than ``LONG_LINES`` is built at -O1, one of more than
#: ``VERY_LONG_LINES`` at -O0. gcc -O2's register allocator and PRE grow much faster than the
#: length of a long straight-line body: the 2300-line backward kernel of a 64-element cumprod
#: took 5 s, the 5700-line one of 128 elements 31 s and 1 GB; -O1 took 0.24 and 0.53 s, and
#: about 0.12 ms a line up to 38000 lines (5.4 s), -O0 half that. Generated kernels are a few
#: hundred lines; one that long gains little from -O2 and must not stall the first run.
LONG_LINES = 1000
VERY_LONG_LINES = 25000
#: What the flags of each kernel depend on: part of the compiler's identity, so that a change
#: of these rules never reuses a library built under the old ones.
TUNING_RULE = (
    f"unrolled >= {UNROLLED_COPIES}: {' '.join(UNROLLED_FLAGS)} (gcc); "
    f"lines > {LONG_LINES}: -O1; > {VERY_LONG_LINES}: -O0"
)
#: glibc's vector math library (libmvec) has a sinf that takes 8 (AVX2) or 16 (AVX-512) floats at
#: once. Declared ``omp declare simd`` ahead of a kernel that calls ``sinf``, gcc's OpenMP loops
#: call it instead of libm's scalar one: a sin of 2**22 floats on 2 cores (AMD EPYC), 18.7 ->
#: 1.3 ms in C; within 2.1 ulp of the exact result at any magnitude up to 1e30 (libm's: 1), and
#: inf, nan and -0 as libm. float64's ``sin`` stays libm's, for its full precision.
VECTOR_MATH = "#pragma omp declare simd notinbranch\nfloat sinf(float);\n"
#: What links the vector math library (after the source, as any library).
VECTOR_MATH_LIBRARIES = ("-lmvec",)
#: Built and run once per compiler to learn whether its OpenMP loops call libmvec, and right.
#: A ``simd`` loop, not a parallel one: the probe runs in whichever thread first builds a kernel
#: (a compile thread, ``realize._pool``), and a parallel region there starts a second OpenMP
#: team in the process; libgomp, counting more threads than cores, then lets every worker spin
#: only briefly before it sleeps, so each later kernel waited for its worker to be woken (short
#: kernels at half speed: (4, 4, 128, 128) @ (4, 4, 128, 64) 0.18 -> 0.34 ms, 2 cores).
VECTOR_MATH_TEST = (
    VECTOR_MATH
    + """#include <math.h>
void fg_sines(float* restrict out, const float* restrict x, int n) {
  #pragma omp simd
  for (int i = 0; i < n; i++) out[i] = sinf(x[i]);
}
"""
)
#: Compiled once per compiler to learn whether it can build and link OpenMP code.
OPENMP_TEST = """#include <omp.h>
int fusegrad_openmp_test(void) {
  int n = 0;
#pragma omp parallel for reduction(+ : n)
  for (int i = 0; i < 64; i++) n += 1;
  return n + omp_get_max_threads();
}
"""
NO_COMPILER = "install clang or gcc (apt-get install clang), or set CC to a C compiler"
#: The function a kernel source defines: its name is what the program looks up.
KERNEL_FUNCTION = re.compile(r"^void (\w+)\(", re.MULTILINE)
#: The renderer's request that a loop be unrolled N times.
UNROLL_PRAGMA = re.compile(r"#pragma GCC unroll (\d+)")
#: What gcc says of ``-fdisable-tree-cunrolli`` on every build; no news to a reader of an error.
DISABLED_PASS_NOTE = re.compile(r"^cc1: note: disable pass .*\n?", re.MULTILINE)


def find_c_compiler() -> list[str]:
    """The command that runs the C compiler: ``$CC`` if set, else gcc, else clang.

    ``$CC`` may carry words of its own (``CC="ccache clang"``). Raises ``DeviceUnavailable``
    saying how to get one when there is none. Cheap: it only searches ``PATH``.
    """
    if cc := os.environ.get("CC", "").strip():
        command = shlex.split(cc)
        if (path := shutil.which(command[0])) is None:
            raise DeviceUnavailable(f"CC={cc!r} is not a program on PATH; {NO_COMPILER}")
        return [path, *command[1:]]
    for name in ("gcc", "clang"):
        if (path := shutil.which(name)) is not None:
            return [path]
    raise DeviceUnavailable(f"no C compiler found: {NO_COMPILER}")


def run_compiler(
    command: Sequence[str], source: str, libraries: Sequence[str] = ()
) -> tuple[bytes | None, str]:
    """Build ``source`` into a shared object linked with ``libraries`` (and libm); its bytes (None
    on failure) and the compiler's stderr.

    Runs in a fresh temporary folder, with relative file names, so that no path of ours ends up
    inside the binary and the same source always gives the same bytes; and in the C locale, so
    that messages read the same everywhere. The compiler dies with this process, and raises
    ``CompileError`` naming the kernels if it runs past ``FUSEGRAD_COMPILE_TIMEOUT``.
    """
    with compile_folder() as folder:
        with open(os.path.join(folder, "kernel.c"), "w") as f:
            f.write(source)
        try:
            done = run_compiler_process(
                [*command, "-o", "kernel.so", "kernel.c", *libraries, "-lm"],
                kernels_in(source),
                folder,
            )
        except OSError as e:
            return None, f"could not run {command[0]}: {e}"
        if done.returncode != 0:
            return None, done.stderr.strip() or f"{command[0]} exited with status {done.returncode}"
        with open(os.path.join(folder, "kernel.so"), "rb") as f:
            return f.read(), done.stderr


def unrolled_copies(source: str) -> int:
    """The most copies of a statement that the ``#pragma GCC unroll`` loops of ``source`` make
    (the product of the factors of a nest), read from the renderer's indentation: a loop's body
    is indented deeper than its ``for``."""
    open_loops: list[tuple[int, int]] = []  # (indent of the for, its unroll factor)
    factor, most = 1, 1
    for line in source.splitlines():
        text = line.lstrip()
        indent = len(line) - len(text)
        while open_loops and open_loops[-1][0] >= indent:
            open_loops.pop()
        if m := UNROLL_PRAGMA.match(text):
            factor = int(m.group(1))
        elif text.startswith("for ("):
            open_loops.append((indent, factor))
            most = max(most, math.prod(f for _, f in open_loops))
            factor = 1
        elif not text.startswith("#"):
            factor = 1
    return most


def kernels_in(source: str) -> str:
    """What ``source`` builds, for messages: ``the CPU kernel E_4``, ``the CPU kernels a, b``."""
    names = KERNEL_FUNCTION.findall(source)
    if not names:
        return "a C source"
    listed = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return f"the CPU kernel{'s' if len(names) > 1 else ''} {listed}"


@functools.cache
def supports_openmp(command: tuple[str, ...]) -> bool:
    """Whether ``command`` builds and links OpenMP code (clang needs libomp-dev for it)."""
    binary, _ = run_compiler([*command, *FLAGS, "-fopenmp"], OPENMP_TEST)
    return binary is not None


@functools.cache
def calls_vector_math(command: tuple[str, ...]) -> bool:
    """Whether ``command`` (with its flags, ``-fopenmp`` among them) builds ``VECTOR_MATH_TEST``
    into a library that calls libmvec's vector sinf, and that library loads and gives the sines.
    False with clang (no vector calls from ``declare simd``), without OpenMP, or off glibc."""
    binary, _ = run_compiler(command, VECTOR_MATH_TEST, VECTOR_MATH_LIBRARIES)
    if binary is None or b"_ZGV" not in binary:
        return False
    with compile_folder() as folder:
        path = os.path.join(folder, "probe.so")
        with open(path, "wb") as f:
            f.write(binary)
        try:
            probe = ctypes.CDLL(path).fg_sines
        except OSError:  # (libmvec.so.1 not found at run time)
            return False
        x = [i * 0.37 - 20.0 for i in range(101)]
        out, given = (ctypes.c_float * len(x))(), (ctypes.c_float * len(x))(*x)
        probe(out, given, len(x))
        return all(abs(o - math.sin(v)) <= 1e-6 for o, v in zip(out, given))


@functools.cache
def accepts_flags(command: tuple[str, ...], flags: tuple[str, ...]) -> bool:
    """Whether ``command`` accepts ``flags`` (a gcc that knows no pass named ``cunrolli`` would
    refuse ``UNROLLED_FLAGS``, and every kernel given them would fail to build)."""
    probe = [*command, *flags, "-S", "-x", "c", os.devnull, "-o", os.devnull]
    try:
        return subprocess.run(probe, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.cache
def version_text(path: str) -> str:
    """What ``path --version`` prints."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown version ({e})"
    return done.stdout or done.stderr


def compiler_version(path: str) -> str:
    """The first line of ``path --version``, e.g. ``Debian clang version 14.0.6``."""
    return version_text(path).partition("\n")[0].strip()


def is_gcc(path: str) -> bool:
    """Whether ``path`` is gcc, under whatever name (``cc``, ``gcc-12``): it says whose it is."""
    return "Free Software Foundation" in version_text(path)


@functools.cache
def cpu_info() -> tuple[str, str]:
    """The processor's model name and its feature flags, as /proc/cpuinfo lists them (read
    once: the renderer's registers and the compiler's identity both ask)."""
    model, features = platform.processor(), ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and not model:
                    model = value.strip()
                elif key.strip() in ("flags", "Features") and not features:
                    features = value.strip()
                if model and features:
                    break
    except OSError:
        pass
    return model, features


def host_cpu() -> str:
    """The processor and a digest of its features: what ``-march=native`` compiles for, and
    what a named target's kernels run on."""
    model, features = cpu_info()
    digest = hashlib.sha256(features.encode()).hexdigest()[:16]
    return f"{platform.machine()} {model} (features {digest})"


def target_arch() -> str:
    """The ``-march`` kernels are built for: ``$FUSEGRAD_CPU_ARCH``, else ``native``."""
    return os.environ.get(ARCH_VARIABLE, "").strip() or "native"


def target_flags() -> tuple[str, ...]:
    """The flags that choose the processor: ``-march=`` the target."""
    return (f"-march={target_arch()}",)


@functools.cache
def predefined_macros(command: tuple[str, ...], arch: str) -> frozenset[str]:
    """The macros ``command`` predefines for ``-march=arch`` (``__AVX2__``, ``__AVX512F__``...):
    what its code may use, asked of the compiler itself, so that any name it knows works."""
    probe = [*command, f"-march={arch}", "-dM", "-E", "-x", "c", os.devnull]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise DeviceUnavailable(f"could not ask {command[0]} about -march={arch}: {e}") from e
    if done.returncode != 0:
        said = done.stderr.strip().partition("\n")[0]
        raise DeviceUnavailable(
            f"{ARCH_VARIABLE}={arch!r} is not a processor {command[0]} knows ({said}); set it "
            "to a -march value it accepts (x86-64-v3: AVX2 and FMA; x86-64-v4: AVX-512; "
            "`gcc --help=target` lists them), or unset it to build for this processor"
        )
    lines = done.stdout.splitlines()
    return frozenset(line.split()[1] for line in lines if line.startswith("#define "))


def target_features(command: Sequence[str]) -> set[str]:
    """The features kernels may use, named as /proc/cpuinfo names them: this processor's own when
    building for it (``native``), else those ``command`` enables for ``$FUSEGRAD_CPU_ARCH``.

    Raises ``DeviceUnavailable`` for a target with a feature this processor lacks: its kernels
    would stop the process with an illegal instruction.
    """
    host = set(cpu_info()[1].split())
    if (arch := target_arch()) == "native":
        return host
    macros = predefined_macros(tuple(command), arch)
    features = {name for macro, name in MACRO_FEATURES.items() if macro in macros}
    if host and (missing := sorted(features - host)):
        raise DeviceUnavailable(
            f"{ARCH_VARIABLE}={arch!r} builds kernels with {', '.join(missing)}, which this "
            f"processor ({cpu_info()[0]}) lacks; choose an older target (x86-64-v3 for AVX2) "
            "or unset it to build for this processor"
        )
    return features


def numbered(source: str) -> str:
    """``source`` with line numbers, as compiler messages count them."""
    return "\n".join(f"{i:4d} | {line}" for i, line in enumerate(source.splitlines(), 1))


class CCompiler(Compiler):
    """Builds C source into a shared object with clang or gcc, adding ``-fopenmp`` when it works.

    ``command`` defaults to ``find_c_compiler()``; ``flags`` to ``FLAGS`` and ``target_flags()``
    (``-march=native`` or ``$FUSEGRAD_CPU_ARCH``), plus ``GCC_FLAGS`` for gcc; ``openmp=None``
    means detect it. Nothing runs a subprocess before the first compile: the OpenMP test and
    ``--version`` are done lazily.
    """

    def __init__(
        self,
        command: Sequence[str] | None = None,
        flags: Sequence[str] | None = None,
        openmp: bool | None = None,
    ):
        self.command = list(command) if command is not None else find_c_compiler()
        if (path := shutil.which(self.command[0])) is None:
            raise DeviceUnavailable(f"C compiler {self.command[0]!r} not found; {NO_COMPILER}")
        self.command[0] = path
        self.base_flags = tuple(flags) if flags is not None else None
        self.target = target_flags()  # read now: the renderer reads it when the device opens
        self.openmp = openmp

    @functools.cached_property
    def flags(self) -> tuple[str, ...]:
        """Every flag passed on, ``-fopenmp`` included when the compiler supports it."""
        base = self.base_flags
        if base is None:
            extra = GCC_FLAGS if is_gcc(self.command[0]) else ()
            base = (*FLAGS, *self.target, *extra)
        if self.openmp is None:
            self.openmp = supports_openmp((*self.command, *base))
        return (*base, "-fopenmp") if self.openmp else base

    @functools.cached_property
    def vector_math(self) -> bool:
        """Whether kernels that call ``sinf`` are built to call libmvec's vector one
        (``VECTOR_MATH``): gcc with OpenMP on glibc, and not with flags given to the constructor
        (those are used as they are)."""
        if self.base_flags is not None or "-fopenmp" not in self.flags:
            return False
        return calls_vector_math((*self.command, *self.flags))

    def _prepared(self, source: str) -> tuple[str, tuple[str, ...]]:
        """``source`` as built, and the libraries it links: libmvec's declarations ahead of a
        source that calls ``sinf``, when ``vector_math``."""
        if "sinf(" in source and self.vector_math:
            return VECTOR_MATH + source, VECTOR_MATH_LIBRARIES
        return source, ()

    @functools.cached_property
    def identity(self) -> str:
        """Compiler, version, flags (the ``-march`` target among them: AVX-512 and AVX2 builds
        never share a cache entry), the rules that add flags per kernel, and host CPU: whatever
        changes the bytes built from a source."""
        words = " ".join(self.command + list(self.flags))
        if self.base_flags is None:
            words += f" | per kernel: {TUNING_RULE}"
            words += f" | vector math: {'libmvec' if self.vector_math else 'none'}"
        return f"{words} | {compiler_version(self.command[0])} | {host_cpu()}"

    def tuning(self, source: str) -> tuple[str, ...]:
        """The flags added for the kernel ``source``, chosen by its shape so that no kernel takes
        gcc long: ``UNROLLED_FLAGS`` for a big unrolled nest, -O1 or -O0 for a long body. None
        when the flags were given to the constructor: those are used as they are."""
        if self.base_flags is not None:
            return ()
        lines = source.count("\n") + 1
        if lines > VERY_LONG_LINES:
            return ("-O0",)
        if lines > LONG_LINES:
            return ("-O1",)
        if (
            is_gcc(self.command[0])
            and unrolled_copies(source) >= UNROLLED_COPIES
            and accepts_flags(tuple(self.command), UNROLLED_FLAGS)
        ):
            return UNROLLED_FLAGS
        return ()

    def compile(self, source: str) -> bytes:
        """Return the shared object built from ``source``; raise ``CompileError`` if it fails."""
        built, libraries = self._prepared(source)
        binary, errors = run_compiler(
            [*self.command, *self.flags, *self.tuning(source)], built, libraries
        )
        if binary is None:
            name = m.group(1) if (m := KERNEL_FUNCTION.search(source)) else "below"
            raise CompileError(
                f"the CPU kernel {name} failed to compile with {' '.join(self.command)}:\n"
                f"{DISABLED_PASS_NOTE.sub('', errors)}\n\n{numbered(built)}\n\n"
                "fusegrad generated this source, so this is a fusegrad bug: please report it "
                "with this whole message and the output of `fusegrad devices`."
            )
        return binary

    def compile_batch(self, sources: list[str]) -> list[bytes | CompileError]:
        """Build the kernels into shared objects, one compiler process for all those built with
        the same flags (``tuning``); a long kernel (-O1, -O0) is built alone.

        Alone, a kernel pays for a compiler process, for reading the headers and for linking:
        about 40 of the 45 ms an elementwise kernel takes with gcc 12. The ~100 kernels of an
        MNIST training step take about half the compiler time when built together. Each
        kernel's function is renamed (two kernels may share a name), and each result is the
        library plus the name of its function (``shared_entry``), so it loads on its own. If
        a library fails to build, each of its kernels is built alone, so that the one at fault
        gets its own ``CompileError`` and the others still build.
        """
        unique = list(dict.fromkeys(sources))
        # a subclass that changed how one source is built expects to see every source
        if len(unique) < 2 or type(self).compile is not CCompiler.compile:
            return super().compile_batch(sources)
        groups: dict[tuple[tuple[str, ...], str], list[str]] = {}
        for source in unique:
            extra = self.tuning(source)
            alone = source if "-O1" in extra or "-O0" in extra else ""
            groups.setdefault((extra, alone), []).append(source)
        built: dict[str, bytes | CompileError] = {}
        for (extra, _), group in groups.items():
            built.update(self._build_together(group, extra))
        return [built[source] for source in sources]

    def _build_together(
        self, sources: list[str], extra: tuple[str, ...]
    ) -> dict[str, bytes | CompileError]:
        """Build distinct ``sources`` into one library with the flags and ``extra``; each
        source's entry in it, or its ``CompileError``."""
        found = [KERNEL_FUNCTION.search(source) for source in sources]
        if len(sources) < 2 or None in found:
            return dict(zip(sources, super().compile_batch(sources)))
        names = [m.group(1) for m in found if m is not None]
        symbols = [f"{name}__{i}" for i, name in enumerate(names)]
        unit = "".join(
            f"#define {name} {symbol}\n{source}\n#undef {name}\n"
            for name, symbol, source in zip(names, symbols, sources)
        )
        try:
            built, libraries = self._prepared(unit)
            library, _ = run_compiler([*self.command, *self.flags, *extra], built, libraries)
        except CompileError as e:  # too slow: built alone, each would take as long again
            return dict.fromkeys(sources, e)
        if library is None:
            return dict(zip(sources, super().compile_batch(sources)))
        return {source: shared_entry(symbol, library) for source, symbol in zip(sources, symbols)}
