"""C source -> shared object bytes, with the system's C compiler (``$CC``, else gcc, else clang).

gcc comes first because it does better with the kernels we generate, measured on this project's
machines: an 8x32-upcast 1024x1024 matmul runs at about 36 GFLOP/s built by gcc 12 and about
9 built by clang 14 (which keeps the accumulator array in memory), and clang 14 has no
``_Float16`` on x86-64. ``CC=clang`` still selects clang.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

from fusegrad.device import Compiler
from fusegrad.errors import CompileError, DeviceUnavailable

#: Contraction stays off so that ``a*b+c`` rounds twice, as numpy does.
FLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-ffp-contract=off")
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


def run_compiler(command: Sequence[str], source: str) -> tuple[bytes | None, str]:
    """Build ``source`` into a shared object; its bytes (None on failure) and the compiler's stderr.

    Runs in a fresh temporary folder, with relative file names, so that no path of ours ends up
    inside the binary and the same source always gives the same bytes; and in the C locale, so
    that messages read the same everywhere.
    """
    with tempfile.TemporaryDirectory(prefix="fusegrad-cc-") as folder:
        with open(os.path.join(folder, "kernel.c"), "w") as f:
            f.write(source)
        try:
            done = subprocess.run(
                [*command, "-o", "kernel.so", "kernel.c", "-lm"],
                cwd=folder,
                env={**os.environ, "LC_ALL": "C"},
                capture_output=True,
                text=True,
            )
        except OSError as e:
            return None, f"could not run {command[0]}: {e}"
        if done.returncode != 0:
            return None, done.stderr.strip() or f"{command[0]} exited with status {done.returncode}"
        with open(os.path.join(folder, "kernel.so"), "rb") as f:
            return f.read(), done.stderr


@functools.cache
def supports_openmp(command: tuple[str, ...]) -> bool:
    """Whether ``command`` builds and links OpenMP code (clang needs libomp-dev for it)."""
    binary, _ = run_compiler([*command, *FLAGS, "-fopenmp"], OPENMP_TEST)
    return binary is not None


def compiler_version(path: str) -> str:
    """The first line of ``path --version``, e.g. ``Debian clang version 14.0.6``."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown version ({e})"
    return (done.stdout or done.stderr).partition("\n")[0].strip()


def host_cpu() -> str:
    """The processor and a digest of its features: what ``-march=native`` compiles for."""
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
    digest = hashlib.sha256(features.encode()).hexdigest()[:16]
    return f"{platform.machine()} {model} (features {digest})"


def numbered(source: str) -> str:
    """``source`` with line numbers, as compiler messages count them."""
    return "\n".join(f"{i:4d} | {line}" for i, line in enumerate(source.splitlines(), 1))


class CCompiler(Compiler):
    """Builds C source into a shared object with clang or gcc, adding ``-fopenmp`` when it works.

    ``command`` defaults to ``find_c_compiler()``; ``openmp=None`` means detect it. Nothing runs a
    subprocess before the first compile: the OpenMP test and ``--version`` are done lazily.
    """

    def __init__(
        self,
        command: Sequence[str] | None = None,
        flags: Sequence[str] = FLAGS,
        openmp: bool | None = None,
    ):
        self.command = list(command) if command is not None else find_c_compiler()
        if (path := shutil.which(self.command[0])) is None:
            raise DeviceUnavailable(f"C compiler {self.command[0]!r} not found; {NO_COMPILER}")
        self.command[0] = path
        self.base_flags = tuple(flags)
        self.openmp = openmp

    @functools.cached_property
    def flags(self) -> tuple[str, ...]:
        """Every flag passed on, ``-fopenmp`` included when the compiler supports it."""
        if self.openmp is None:
            self.openmp = supports_openmp((*self.command, *self.base_flags))
        return (*self.base_flags, "-fopenmp") if self.openmp else self.base_flags

    @functools.cached_property
    def identity(self) -> str:
        """Compiler, version, flags and host CPU: whatever changes the bytes built from a source."""
        words = " ".join(self.command + list(self.flags))
        return f"{words} | {compiler_version(self.command[0])} | {host_cpu()}"

    def compile(self, source: str) -> bytes:
        """Return the shared object built from ``source``; raise ``CompileError`` if it fails."""
        binary, errors = run_compiler([*self.command, *self.flags], source)
        if binary is None:
            raise CompileError(
                f"the CPU kernel below failed to compile with {' '.join(self.command)}:\n"
                f"{errors}\n\n{numbered(source)}\n\n"
                "fusegrad generated this source, so this is a fusegrad bug: please report it "
                "with this whole message and the output of `fusegrad devices`."
            )
        return binary
