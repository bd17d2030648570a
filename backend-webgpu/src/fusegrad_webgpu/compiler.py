"""WGSL needs no compiling ahead of time: the source is the binary, validated on the device.

``compile`` builds the shader module and its pipeline (kept for the program to use), so a
source the adapter rejects fails here, as a ``CompileError`` showing the source and the message.
"""

from __future__ import annotations

import re

from fusegrad.device import Compiler
from fusegrad.errors import CompileError

_ENTRY = re.compile(r"^fn (\w+)\(", re.MULTILINE)


def numbered(source: str) -> str:
    """``source`` with line numbers, as shader compiler messages count them."""
    return "\n".join(f"{i:4d} | {line}" for i, line in enumerate(source.splitlines(), 1))


class WGSLCompiler(Compiler):
    """Validates WGSL by building its pipeline on the WEBGPU device."""

    identity = "wgsl-source-1"
    disk_cache = False  # nothing to gain: the bytes are the source

    def compile(self, source: str) -> bytes:
        """Return the source's bytes; raise ``CompileError`` if the device rejects it."""
        from fusegrad_webgpu.device import context

        ctx = context()
        entry = _ENTRY.search(source)
        try:
            ctx.pipeline(source, entry.group(1) if entry else "main")
        except Exception as e:  # noqa: BLE001 - wgpu raises several types for invalid shaders
            raise CompileError(
                f"the WEBGPU kernel below was rejected by {ctx.adapter_name}:\n{e}\n\n"
                f"{numbered(source)}\n\nfusegrad generated this source, so this is a fusegrad bug: "
                "please report it with this whole message and the output of `fusegrad devices`."
            ) from None
        return source.encode()
