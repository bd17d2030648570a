"""The import graph of core (``core/src/fusegrad``): its circles and its imports made inside
functions.

    python scripts/import_graph.py [SOURCE_ROOT]

Every ``import``/``from ... import`` of a ``fusegrad`` module is an edge, wherever it stands
(at the top of a file or inside a function), except under ``if TYPE_CHECKING:``: those run only
for the type checker. ``from fusegrad.pkg import name`` is an edge to ``fusegrad.pkg.name`` when
that is a module, else to ``fusegrad.pkg`` (the package's ``__init__``, which imports its parts:
those are edges too, so a part that imports its own package's face is a circle).
``tests/core/test_import_graph.py`` asserts there are no
circles; this script prints them, and the imports made inside functions, for a person to read.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "core" / "src"


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the ``fusegrad`` package under ``root``: dotted name -> file."""
    found = {}
    for path in sorted((root / "fusegrad").rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, in_function: bool = False):
    """(dotted names, line, inside a function) of every import outside TYPE_CHECKING blocks."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _type_checking_only(node):
            yield from (i for n in node.orelse for i in _imports(ast.Module([n], []), in_function))
            continue
        if isinstance(node, ast.Import):
            yield [a.name for a in node.names], node.lineno, in_function
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield (
                [f"{node.module}.{a.name}" for a in node.names] + [node.module],
                node.lineno,
                in_function,
            )
        inner = in_function or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        yield from _imports(node, inner)


def graph(root: Path = ROOT) -> tuple[dict[str, set[str]], list[tuple[str, int, str]]]:
    """(module -> modules it imports, [(module, line, target) of imports inside functions]).

    An import inside a function whose line says ``# deferred: why`` is left out of the second
    list (still an edge of the first): it loads something heavy on first use on purpose.
    """
    mods = modules(root)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    lazy = []
    for name, path in mods.items():
        text = path.read_text()
        lines = text.splitlines()
        for names, line, in_function in _imports(ast.parse(text, str(path))):
            if any(not n.startswith("fusegrad") for n in names):
                continue
            # `from a.b import c`: names are a.b.c then a.b; the first that is a module wins
            target = next((n for n in names if n in mods), None)
            if target is None or target == name:
                continue
            edges[name].add(target)
            if in_function and "# deferred:" not in lines[line - 1]:
                lazy.append((name, line, target))
    return edges, lazy


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def main() -> int:
    global ROOT
    if len(sys.argv) > 1:
        ROOT = Path(sys.argv[1]).resolve()
    edges, lazy = graph(ROOT)
    groups = circles(edges)
    print(f"{len(edges)} modules, {sum(map(len, edges.values()))} imports between them")
    print(f"{len(groups)} circle(s); {sum(map(len, groups))} modules in them")
    for group in groups:
        print("  circle:", ", ".join(group))
    print(f"{len(lazy)} import(s) of fusegrad modules inside functions")
    for name, line, target in lazy:
        print(f"  {name}:{line} -> {target}")
    return 1 if groups else 0


if __name__ == "__main__":
    sys.exit(main())
