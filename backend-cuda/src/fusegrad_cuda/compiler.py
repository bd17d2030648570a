"""CUDA C++ source -> a cubin for one GPU architecture, by NVRTC when it can be found, else nvcc.

NVRTC is looked for in the ``nvidia-cuda-nvrtc`` wheel and in the CUDA toolkit; nvcc on ``PATH``
and in the toolkit (``$CUDA_HOME``, ``/usr/local/cuda``). Neither needs a GPU or a driver, so
kernels can be compiled (and tested) on a machine that cannot run them.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import importlib.util
import os
import re
import shutil
import subprocess

from fusegrad.compile_process import compile_folder, run_compiler_process
from fusegrad.device import Compiler
from fusegrad.errors import CompileError, DeviceUnavailable

#: No fused multiply-add contraction: ``a*b+c`` rounds twice, as numpy and the CPU backend do.
FLAGS = ("--fmad=false",)
DEFAULT_ARCH = "sm_80"
NO_COMPILER = (
    "no CUDA compiler found: install the CUDA toolkit (nvcc) or NVRTC "
    "(pip install nvidia-cuda-nvrtc), or set CUDA_HOME to the toolkit's folder"
)


def toolkit_folders() -> list[str]:
    """Where a CUDA toolkit may be: ``$CUDA_HOME``, ``$CUDA_PATH``, ``/usr/local/cuda*``."""
    named = [os.environ.get(v, "") for v in ("CUDA_HOME", "CUDA_PATH")]
    return [f for f in named if f] + sorted(glob.glob("/usr/local/cuda*"), reverse=True)


def find_nvcc() -> str | None:
    """The path of nvcc, or None."""
    if path := shutil.which("nvcc"):
        return path
    found = [os.path.join(f, "bin", "nvcc") for f in toolkit_folders()]
    return next((p for p in found if os.access(p, os.X_OK)), None)


def find_nvrtc() -> str | None:
    """The path of libnvrtc: from the ``nvidia-cuda-nvrtc`` wheel, else from a toolkit."""
    folders = []
    if (spec := importlib.util.find_spec("nvidia")) is not None:
        folders += [os.path.join(p, "*", "lib") for p in spec.submodule_search_locations or []]
    folders += [os.path.join(f, sub) for f in toolkit_folders() for sub in ("lib64", "lib")]
    for folder in folders:
        if found := sorted(glob.glob(os.path.join(folder, "libnvrtc.so*"))):
            return found[0]
    return None


def include_folders() -> list[str]:
    """Toolkit include folders, for ``cuda_fp16.h`` under NVRTC."""
    return [
        i
        for f in toolkit_folders()
        if os.path.isfile(os.path.join(i := f"{f}/include", "cuda_fp16.h"))
    ]


def numbered(source: str) -> str:
    """``source`` with line numbers, as compiler messages count them."""
    return "\n".join(f"{i:4d} | {line}" for i, line in enumerate(source.splitlines(), 1))


def compile_error(tool: str, arch: str, log: str, source: str) -> CompileError:
    """The error for a kernel ``tool`` could not compile, with its messages and the source."""
    return CompileError(
        f"the CUDA kernel below failed to compile for {arch} with {tool}:\n{log.strip()}\n\n"
        f"{numbered(source)}\n\nfusegrad generated this source, so this is a fusegrad bug: "
        "please report it with this whole message and the output of `fusegrad devices`."
    )


class NVCCCompiler(Compiler):
    """``nvcc -cubin -arch=sm_XX`` in a fresh temporary folder; returns the cubin's bytes."""

    def __init__(self, arch: str = DEFAULT_ARCH, nvcc: str | None = None):
        self.arch, self.nvcc = arch, nvcc or find_nvcc()
        if self.nvcc is None:
            raise DeviceUnavailable(NO_COMPILER)

    @functools.cached_property
    def identity(self) -> str:
        done = subprocess.run([self.nvcc, "--version"], capture_output=True, text=True)
        version = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "unknown"
        return f"nvcc {version} | -arch={self.arch} {' '.join(FLAGS)}"

    def compile(self, source: str) -> bytes:
        """Return the cubin built from ``source``; raise ``CompileError`` with nvcc's messages."""
        with compile_folder() as folder:
            with open(os.path.join(folder, "kernel.cu"), "w") as f:
                f.write(source)
            command = [self.nvcc, "-cubin", f"-arch={self.arch}", *FLAGS, "-o", "kernel.cubin"]
            name = m.group(1) if (m := re.search(r"void (\w+)\(", source)) else "below"
            done = run_compiler_process([*command, "kernel.cu"], f"the CUDA kernel {name}", folder)
            if done.returncode != 0:
                raise compile_error("nvcc", self.arch, done.stderr or done.stdout, source)
            with open(os.path.join(folder, "kernel.cubin"), "rb") as f:
                return f.read()


class NVRTCCompiler(Compiler):
    """NVRTC through ctypes: ``nvrtcCompileProgram`` with ``--gpu-architecture=sm_XX``, then the
    cubin."""

    def __init__(self, arch: str = DEFAULT_ARCH, library: str | None = None):
        self.arch, path = arch, library or find_nvrtc()
        if path is None:
            raise DeviceUnavailable(NO_COMPILER)
        self.nvrtc = ctypes.CDLL(path)
        self.options = [
            f"--gpu-architecture={arch}",
            *FLAGS,
            *(f"-I{i}" for i in include_folders()),
        ]

    @functools.cached_property
    def identity(self) -> str:
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.nvrtc.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        return f"nvrtc {major.value}.{minor.value} | {' '.join(self.options)}"

    def compile(self, source: str) -> bytes:
        """Return the cubin for ``source``; raise ``CompileError`` with NVRTC's log."""
        program = ctypes.c_void_p()
        self._check(
            self.nvrtc.nvrtcCreateProgram(
                ctypes.byref(program), source.encode(), b"kernel.cu", 0, None, None
            )
        )
        try:
            options = (ctypes.c_char_p * len(self.options))(*(o.encode() for o in self.options))
            if self.nvrtc.nvrtcCompileProgram(program, len(self.options), options) != 0:
                raise compile_error("NVRTC", self.arch, self._read(program, "ProgramLog"), source)
            return self._read(program, "CUBIN", text=False)
        finally:
            self.nvrtc.nvrtcDestroyProgram(ctypes.byref(program))

    def _read(self, program: ctypes.c_void_p, what: str, text: bool = True):
        """``nvrtcGet<what>Size`` then ``nvrtcGet<what>``: the log (text) or the cubin (bytes)."""
        size = ctypes.c_size_t()
        self._check(getattr(self.nvrtc, f"nvrtcGet{what}Size")(program, ctypes.byref(size)))
        out = ctypes.create_string_buffer(size.value)
        self._check(getattr(self.nvrtc, f"nvrtcGet{what}")(program, out))
        return out.value.decode(errors="replace") if text else out.raw

    def _check(self, status: int) -> None:
        if status != 0:
            self.nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
            message = self.nvrtc.nvrtcGetErrorString(status).decode()
            raise CompileError(f"NVRTC failed ({message}, status {status})")


def find_cuda_compiler(arch: str = DEFAULT_ARCH) -> Compiler:
    """NVRTC if it can be found, else nvcc; ``DeviceUnavailable`` saying how to get one if
    neither."""
    if (library := find_nvrtc()) is not None:
        return NVRTCCompiler(arch, library)
    return NVCCCompiler(arch)
