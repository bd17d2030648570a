"""The import graph of core is one way: no module reaches itself through imports, and no
fusegrad module is imported inside a function (an import there is how a circle hides).
``python scripts/import_graph.py`` prints the graph's circles and such imports."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "import_graph.py"


def _script():
    spec = importlib.util.spec_from_file_location("import_graph", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_core_has_no_import_circles():
    graph = _script()
    edges, _ = graph.graph()
    assert graph.circles(edges) == [], "run scripts/import_graph.py to see the circles"


def test_core_imports_no_fusegrad_module_inside_a_function():
    _, lazy = _script().graph()
    assert [f"{name}:{line} -> {target}" for name, line, target in lazy] == []


def test_the_check_sees_a_circle(tmp_path):
    """The check itself works: a two-module circle through a function-level import is found."""
    package = tmp_path / "fusegrad"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from fusegrad.b import f\n")
    (package / "b.py").write_text("def f():\n    from fusegrad import a\n")
    (package / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from fusegrad import a\n"
    )
    graph = _script()
    edges, lazy = graph.graph(tmp_path)
    assert graph.circles(edges) == [["fusegrad.a", "fusegrad.b"]]
    assert lazy == [("fusegrad.b", 2, "fusegrad.a")]
    assert edges["fusegrad.c"] == set()  # type-checking imports are not edges
