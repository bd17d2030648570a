"""The rewrite rules code generation applies besides its own passes, as a value.

Plugins may add rules (hook ``fusegrad_rewrite_rules``). They are asked once, when a device is
opened, and the answer is kept on the device's ``Runtime`` as a ``CodegenRules``; ``generate``
takes it as an argument, so generating a kernel never consults the plugins.
"""

from __future__ import annotations

from dataclasses import dataclass

from fusegrad.uop.pattern import PatternMatcher
from fusegrad.uop.symbolic import SIMPLIFY


@dataclass(frozen=True)
class CodegenRules:
    """The matchers for the two stages plugins can extend, built once (a matcher indexes its
    rules when it is made, which would be wasted work for every kernel)."""

    #: applied to the lowered kernel graph: core's ``SIMPLIFY``, then the plugins' "kernel" rules
    kernel: PatternMatcher = SIMPLIFY
    #: applied to the decomposed graph before linearising: the plugins' "program" rules, or None
    program: PatternMatcher | None = None

    @classmethod
    def with_plugins(
        cls, kernel: list[PatternMatcher | None], program: list[PatternMatcher | None]
    ) -> CodegenRules:
        """Core's rules followed by the plugins' answers for each stage (None answers skipped)."""
        extra_kernel = [rule for m in kernel if m is not None for rule in m.rules]
        extra_program = [rule for m in program if m is not None for rule in m.rules]
        return cls(
            SIMPLIFY + PatternMatcher(extra_kernel) if extra_kernel else SIMPLIFY,
            PatternMatcher(extra_program) if extra_program else None,
        )


#: core's rules alone: for a renderer used without opening a device (tests, exporters)
CORE_RULES = CodegenRules()
