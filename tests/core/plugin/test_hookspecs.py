"""Every hook is documented for the people who implement it (``plugin/hookspecs.py``)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from fusegrad.plugin import hookspecs

HOOKS = hookspecs.hook_names()


def test_the_hooks_are_found():
    assert {
        "fusegrad_devices",
        "fusegrad_allocator",
        "fusegrad_renderer",
        "fusegrad_compiler",
        "fusegrad_program",
        "fusegrad_kernel_compiled",
    } <= set(HOOKS)


@pytest.mark.parametrize("name", HOOKS)
def test_hook_is_documented(name: str):
    doc = inspect.getdoc(getattr(hookspecs, name)) or ""
    lines = [line for line in doc.splitlines() if line.strip()]
    assert len(lines) >= 3, f"{name}'s docstring should say what to return, when, and since when"
    assert "Since API version" in doc


@pytest.mark.parametrize("name", HOOKS)
def test_hook_is_annotated(name: str):
    signature = inspect.signature(getattr(hookspecs, name))
    assert signature.return_annotation is not inspect.Signature.empty
    assert all(p.annotation is not inspect.Parameter.empty for p in signature.parameters.values())


#: Hooks the engine does not call yet, so no test can show that they work.
NOT_CALLED_YET: set[str] = set()


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(
            n, marks=pytest.mark.xfail(strict=True, reason="the engine does not call it yet")
        )
        if n in NOT_CALLED_YET
        else n
        for n in HOOKS
    ],
)
def test_hook_is_implemented_by_a_test_plugin(name: str):
    """A hook no test implements is a hook nobody knows works."""
    here = Path(__file__).parent
    tests = "".join(p.read_text() for p in here.glob("*.py") if p.name != Path(__file__).name)
    builtin = Path(inspect.getfile(hookspecs)).parent.parent / "runtime" / "python_plugin.py"
    assert f"def {name}(" in tests + builtin.read_text()
