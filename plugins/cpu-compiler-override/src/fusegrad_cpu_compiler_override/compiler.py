"""The CPU backend's ``CCompiler`` with other flags and an identity of its own."""

from __future__ import annotations

import functools

from fusegrad_cpu.compiler import CCompiler


class OverrideCompiler(CCompiler):
    """Builds CPU kernels like the backend does, with the flags given; counts its compiles."""

    #: Every source this compiler built in this process (tests read it).
    built: list[str] = []

    @functools.cached_property
    def identity(self) -> str:
        """Marked as this plugin's, so binaries never mix with the backend's in the disk cache."""
        return f"fusegrad-cpu-compiler-override 0.1.0 | {super().identity}"

    def compile(self, source: str) -> bytes:
        OverrideCompiler.built.append(source)
        return super().compile(source)
