"""The TEMPLATE device's compiler: source text to the bytes its program class loads."""

from __future__ import annotations

import json

from fusegrad.device import Compiler
from fusegrad.errors import CompileError


class TemplateCompiler(Compiler):
    """Checks the program and returns it as bytes.

    A real compiler calls its toolchain (NVRTC, ``clBuildProgram``, a C compiler) and raises
    ``CompileError`` with the source and the toolchain's message when it fails. ``compile_cached``
    keeps results on disk keyed by source and ``identity``, so ``identity`` must change whenever
    the bytes built from the same source would (toolchain version, flags, target).
    """

    identity = "fusegrad-template-device 0.1.0"
    #: Compiling is cheaper than reading the disk cache here; a real compiler leaves this True.
    disk_cache = False

    def compile(self, source: str) -> bytes:
        try:
            json.loads(source)
        except ValueError as e:
            raise CompileError(f"the TEMPLATE kernel below is not valid: {e}\n\n{source}") from None
        return source.encode()
