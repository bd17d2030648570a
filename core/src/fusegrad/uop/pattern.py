"""Pattern rewriting: ``UPat`` patterns, ``PatternMatcher`` rule tables and ``graph_rewrite``.

A rule is ``(pattern, function)``. When the pattern matches a node, the function is called with
the named captures as keyword arguments (plus ``ctx`` if it asks for it); it returns a new UOp,
or ``None`` to decline. Tables compose with ``+``; the first rule that returns a UOp wins.
"""

from __future__ import annotations

import inspect
import os
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from fusegrad.dtype import DType
from fusegrad.helpers import Context
from fusegrad.uop.ops import GroupOp, Ops, UOp, toposort

_ANY = object()  # "any arg"


class UPat:
    """A pattern over UOps. ``None`` fields match anything; ``name`` captures the node."""

    __slots__ = ("ops", "dtypes", "src", "arg", "name", "allow_any_len")

    def __init__(
        self,
        op: Ops | Iterable[Ops] | None = None,
        dtype: DType | Iterable[DType] | None = None,
        src: tuple[UPat, ...] | UPat | None = None,
        arg: Any = _ANY,
        name: str | None = None,
        allow_any_len: bool = False,
    ):
        self.ops = None if op is None else frozenset((op,) if isinstance(op, Ops) else op)
        self.dtypes = (
            None if dtype is None else frozenset((dtype,) if isinstance(dtype, DType) else dtype)
        )
        self.src = (src,) if isinstance(src, UPat) else src
        self.arg, self.name, self.allow_any_len = arg, name, allow_any_len

    def __repr__(self) -> str:
        return f"UPat({self.ops}, name={self.name!r})"

    @staticmethod
    def var(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Matches any node and captures it as ``name``."""
        return UPat(dtype=dtype, name=name)

    @staticmethod
    def cvar(name: str | None = None, dtype: DType | Iterable[DType] | None = None) -> UPat:
        """Matches a constant and captures it as ``name``."""
        return UPat(Ops.CONST, dtype=dtype, name=name)

    @staticmethod
    def const(value: Any, dtype: DType | None = None) -> UPat:
        """Matches a constant with this value."""
        return UPat(Ops.CONST, dtype=dtype, arg=value)

    def alu(self, op: Ops, *src: UPat | int | float) -> UPat:
        pats = (self, *(s if isinstance(s, UPat) else UPat.const(s) for s in src))
        return UPat(op, src=pats)

    def __add__(self, x):
        return self.alu(Ops.ADD, x)

    def __mul__(self, x):
        return self.alu(Ops.MUL, x)

    def __floordiv__(self, x):
        return self.alu(Ops.IDIV, x)

    def __mod__(self, x):
        return self.alu(Ops.MOD, x)

    def __and__(self, x):
        return self.alu(Ops.AND, x)

    def match(self, u: UOp, captures: dict[str, UOp]) -> bool:
        """Match ``u``, filling ``captures``; on failure ``captures`` may hold partial entries."""
        if self.ops is not None and u.op not in self.ops:
            return False
        if self.dtypes is not None and u.dtype not in self.dtypes:
            return False
        if self.arg is not _ANY and not (
            type(u.arg) is type(self.arg) or _both_numbers(u.arg, self.arg)
        ):
            return False
        if self.arg is not _ANY and u.arg != self.arg:
            return False
        if self.name is not None:
            if (prev := captures.get(self.name)) is not None and prev is not u:
                return False
            captures[self.name] = u
        if self.src is None:
            return True
        if len(self.src) != len(u.src) and not (self.allow_any_len and len(u.src) >= len(self.src)):
            return False
        if not (u.op in GroupOp.Commutative and len(u.src) == 2):
            return _match_srcs(self.src, u.src, captures)
        # the captures are copied only where a second try (the swapped sources) may need them
        saved = dict(captures)
        if _match_srcs(self.src, u.src, captures):
            return True
        captures.clear()
        captures.update(saved)
        return _match_srcs(self.src, (u.src[1], u.src[0]), captures)


def _both_numbers(a: Any, b: Any) -> bool:
    return type(a) in (int, float) and type(b) in (int, float)


def _match_srcs(pats: tuple[UPat, ...], srcs: tuple[UOp, ...], captures: dict[str, UOp]) -> bool:
    """Whether each pattern matches its source (on failure ``captures`` may hold partial
    entries, as ``UPat.match`` says)."""
    for pat, src in zip(pats, srcs):
        if not pat.match(src, captures):
            return False
    return True


#: a pattern and what to do on a match: a rewrite returns the new UOp or None (no change);
#: other tables (gradient.py's derivatives) return what their caller expects
Rule = tuple[UPat, Callable[..., Any]]


class PatternMatcher:
    """An ordered table of rewrite rules. The first rule whose function returns a UOp wins."""

    def __init__(self, rules: list[Rule]):
        self.rules = list(rules)
        self._by_op: dict[Ops, list[tuple[UPat, Callable, bool]]] = {}
        self._any_op: list[tuple[UPat, Callable, bool]] = []
        for pat, fn in self.rules:
            entry = (pat, fn, "ctx" in inspect.signature(fn).parameters)
            if pat.ops is None:
                self._any_op.append(entry)
            else:
                for op in pat.ops:
                    self._by_op.setdefault(op, []).append(entry)
        # keep table order among rules with and without an op
        order = {id(fn): i for i, (_, fn) in enumerate(self.rules)}
        for op in Ops:
            merged = self._by_op.get(op, []) + self._any_op
            if merged:
                self._by_op[op] = sorted(merged, key=lambda e: order[id(e[1])])

    def __add__(self, other: PatternMatcher) -> PatternMatcher:
        return PatternMatcher(self.rules + other.rules)

    def rewrite(self, u: UOp, ctx: Any = None) -> Any:
        """Apply the first rule that fires on ``u`` itself (its result: a UOp for a rewrite), or
        return None."""
        for pat, fn, wants_ctx in self._by_op.get(u.op, ()):
            captures: dict[str, UOp] = {}
            if not pat.match(u, captures):
                continue
            out = fn(ctx=ctx, **captures) if wants_ctx else fn(**captures)
            if out is not None and out is not u:
                return out
        return None

    def rewrite_noting(self, u: UOp, ctx: Any = None) -> Any:
        """``rewrite``, telling the ``rules_fired`` block (and ``DEBUG=5``) which rule fired.

        The same loop as ``rewrite``, kept apart so that the usual path pays nothing for it:
        ``graph_rewrite`` picks this one only while somebody is watching.
        """
        for pat, fn, wants_ctx in self._by_op.get(u.op, ()):
            captures: dict[str, UOp] = {}
            if not pat.match(u, captures):
                continue
            out = fn(ctx=ctx, **captures) if wants_ctx else fn(**captures)
            if out is not None and out is not u:
                if _fired is not None:
                    _fired.note(fn, u, out)
                if Context.DEBUG >= 5:
                    print(f"rule {rule_name(fn)} rewrote {u.op}")
                return out
        return None


class Fired(Counter):
    """The rewrites made inside a ``rules_fired`` block: how often each rule function fired
    and, in ``steps``, the first ``keep`` rewrites themselves, ``(rule, node, replacement)``
    in the order they were made (VIZ steps through them)."""

    def __init__(self, keep: int = 0) -> None:
        super().__init__()
        self.keep = keep
        self.steps: list[tuple[Callable, UOp, Any]] = []

    def note(self, fn: Callable, node: UOp, replacement: Any) -> None:
        """Count one rewrite of ``node`` by ``fn``; keep it while fewer than ``keep`` are."""
        self[fn] += 1
        if len(self.steps) < self.keep:
            self.steps.append((fn, node, replacement))


#: the rules that fired while ``rules_fired`` is active (None: nobody is counting, the fast path)
_fired: Fired | None = None


def rebuild(graph: UOp, rule: Callable[[UOp, tuple[UOp, ...]], UOp]) -> UOp:
    """``graph`` rebuilt from its leaves up, each node as ``rule(node, its rewritten sources)``
    says: the form of a rewriter that is no pattern table (codegen/decompose.py's emulations).
    Inside a ``rules_fired`` block, each node ``rule`` changed beyond taking its new sources is
    noted as a firing of ``rule``, so that DEBUG=4 counts and VIZ steps through them as through
    a table's rules."""
    done: dict[UOp, UOp] = {}
    for u in toposort([graph]):
        src = tuple(done[s] for s in u.src)
        out = done[u] = rule(u, src)
        if _fired is not None and out is not (u if src == u.src else u.replace(src=src)):
            _fired.note(rule, u, out)
    return done[graph]


def rule_name(fn: Callable) -> str:
    """How DEBUG listings name a rule: its function's name, or ``file.py:line`` for a lambda."""
    name = getattr(fn, "__name__", None)
    if name != "<lambda>":
        return name or repr(fn)
    return rule_place(fn)


def rule_place(fn: Callable) -> str:
    """Where a rule function is defined, ``file.py:line`` (a lambda: its table row); empty for a
    callable without Python code."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return ""
    return f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"


@contextmanager
def rules_fired(keep: int = 0) -> Iterator[Fired]:
    """Count, by rule function, the rewrites made inside the ``with`` block (for ``DEBUG=4``),
    and keep the first ``keep`` of them (for VIZ).

    Off by default, so a ``graph_rewrite`` call pays one global lookup for it (not one per node);
    blocks may nest, each counting only its own rewrites.
    """
    global _fired
    outer, _fired = _fired, Fired(keep)
    try:
        yield _fired
    finally:
        _fired = outer


def fired_summary(fired: Counter[Callable]) -> str:
    """``rules fired: fold_binary x3, symbolic.py:120 x1``, most frequent first."""
    if not fired:
        return "rules fired: none"
    names: Counter[str] = Counter()
    for fn, n in fired.items():
        names[rule_name(fn)] += n
    return "rules fired: " + ", ".join(f"{name} x{n}" for name, n in names.most_common())


def graph_rewrite(root: UOp, matcher: PatternMatcher, ctx: Any = None) -> UOp:
    """Rewrite a graph bottom-up until no rule fires anywhere. Shared nodes are rewritten once."""
    watched = _fired is not None or Context.DEBUG >= 5
    rewrite = matcher.rewrite_noting if watched else matcher.rewrite
    done: dict[UOp, UOp] = {}
    stack: list[tuple[UOp, int, UOp | None]] = [(root, 0, None)]
    while stack:
        node, stage, pending = stack.pop()
        if node in done:
            continue
        if stage == 0:
            stack.append((node, 1, None))
            stack.extend((s, 0, None) for s in node.src if s not in done)
        elif stage == 1:
            new_src = tuple(done[s] for s in node.src)
            rebuilt = node if new_src == node.src else node.replace(src=new_src)
            out = rewrite(rebuilt, ctx)
            if out is None:
                done[node] = rebuilt
            else:
                stack.append((node, 2, out))
                stack.append((out, 0, None))
        else:
            assert pending is not None  # stage 2 always carries the rewritten node
            done[node] = done[pending]
    return done[root]
