"""MSL source -> the bytes a Metal program is built from.

Metal compiles source to GPU code at run time (``newLibraryWithSource``), and the offline
compiler (``xcrun metal``) ships only with Xcode; so the "binary" is the source's UTF-8 bytes
and the pipeline is built when the program is loaded. Nothing is worth caching on disk.
"""

from __future__ import annotations

from fusegrad.device import Compiler


class MetalCompiler(Compiler):
    """Passes source through as UTF-8; compile errors surface when the program is loaded."""

    identity = "metal-source"
    disk_cache = False

    def compile(self, source: str) -> bytes:
        return source.encode()
