"""OpenCL C source -> the device's program binary, built by the OpenCL driver through pyopencl."""

from __future__ import annotations

import functools

import pyopencl as cl

from fusegrad.device import Compiler
from fusegrad.errors import CompileError
from fusegrad_opencl.device import CLDevice

#: No fast-math options: results must match the CPU backend within the same tolerances.
OPTIONS: tuple[str, ...] = ()
#: an option that changes nothing but the driver's cache key (see ``CLCompiler.compile``)
REBUILD_OPTION = "-DFUSEGRAD_REBUILD=1"


class CLCompiler(Compiler):
    """Builds a kernel for one OpenCL device and returns its binary (``CL_PROGRAM_BINARIES``).

    The binary is what ``compile_cached`` keeps on disk; the program class builds from it, which
    skips the front end. The identity names the platform, the device and the driver version.
    """

    def __init__(self, device: CLDevice, options: tuple[str, ...] = OPTIONS):
        self.device, self.options = device, list(options)

    @functools.cached_property
    def identity(self) -> str:
        d = self.device.device
        return (
            f"opencl | {d.platform.name.strip()} {d.platform.version.strip()} | {d.name.strip()} "
            f"| driver {d.driver_version.strip()} | {' '.join(self.options)}"
        )

    def compile(self, source: str) -> bytes:
        """Return the device binary for ``source``; raise ``CompileError`` with the build log.

        A driver's own kernel cache can hand back an empty program (PoCL's, when two processes
        built the same source at once and one read the other's half-written file): then the
        source is built once more under another cache key, so no empty binary is kept.
        """
        program = self._build(source, self.options)
        if not program.get_info(cl.program_info.KERNEL_NAMES):
            program = self._build(source, [*self.options, REBUILD_OPTION])
        if not program.get_info(cl.program_info.KERNEL_NAMES):
            raise CompileError(
                f"the OpenCL driver of {self.device.describe()} built no kernel from the source "
                f"below; its kernel cache may be damaged (PoCL's: ~/.cache/pocl/kcache, safe to "
                f"delete)\n\n{numbered(source)}"
            )
        return program.get_info(cl.program_info.BINARIES)[0]

    def _build(self, source: str, options: list[str]) -> cl.Program:
        program = cl.Program(self.device.context, source)
        try:
            program.build(options=options, devices=[self.device.device])
        except cl.Error as e:
            raise CompileError(
                f"the OpenCL kernel below failed to build on {self.device.describe()}:\n"
                f"{build_log(program, self.device) or e}\n\n{numbered(source)}\n\n"
                "fusegrad generated this source, so this is a fusegrad bug: please report it "
                "with this whole message and the output of `fusegrad devices`."
            ) from None
        return program


def build_log(program: cl.Program, device: CLDevice) -> str:
    """The driver's messages from the last build of ``program``, or "" if it has none."""
    try:
        return program.get_build_info(device.device, cl.program_build_info.LOG).strip()
    except cl.Error:
        return ""


def numbered(source: str) -> str:
    """``source`` with line numbers, as build logs count them."""
    return "\n".join(f"{i:4d} | {line}" for i, line in enumerate(source.splitlines(), 1))
