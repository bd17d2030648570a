"""Every example in the README and docs/ runs, and the output it shows is what it prints.

Sybil (a maintained documentation-testing tool) finds the examples; what each kind of fenced
block means:

- ```` ```python ````: run. A block starting with ``>>>`` is a doctest: each statement's output
  is compared with the lines below it (``...`` stands for what varies between runs: timings,
  line numbers of rules). A document's blocks run in order and share one namespace.
- ```` ```console ````: each ``$ command`` line runs in a shell at the repository root (``python``
  and ``fusegrad`` are this environment's); the lines below a command are its output, compared
  the same way.
- ```` ```text ```` and the listings ```` ```c ````, ```` ```cuda ````, ```` ```wgsl ````: a part
  of ``last_output``, the last command's output or what a hidden block before it
  (```` <!-- invisible-code-block: python --> ````) put there, such as a kernel's source: it
  must occur there, ``...`` standing for lines left out. A long listing may come piece by
  piece, with prose between.
- ```` <!-- skip: next "reason" --> ````: the next example is not run (it needs a GPU, a
  plugin the tests must not install, or minutes); ``skip: start "reason"`` ... ``skip: end``
  for a doctest block of several statements. The reason shows as a skipped ``test_not_run``.
- Any other fence (``bash`` set-up commands, ``toml`` fragments, unlabelled diagrams and
  pseudo-code) is not run: installing packages or publishing a project is not a test's
  business.

A document is one test, so its examples share a namespace even when pytest-xdist spreads the
tests over processes. Each document starts with empty in-memory caches
(``fusegrad.reset_caches``), so what ``DEBUG`` prints does not depend on the documents before.
"""

from __future__ import annotations

import ast
import doctest
import os
import re
import subprocess
import sys
from pathlib import Path
from unittest import SkipTest

import pytest
from sybil import Document, Example, Sybil
from sybil.parsers.markdown import CodeBlockParser, PythonCodeBlockParser, SkipParser

import fusegrad

ROOT = Path(__file__).resolve().parents[2]

#: documents whose examples are not checked yet (written in parallel; remove a name to check it)
NOT_YET_CHECKED: set[str] = set()
#: the checked documents: the README and every page of the site
DOCUMENTS = ["README.md"] + [
    name
    for name in sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))
    if name not in NOT_YET_CHECKED
]
#: the languages of fences that are not examples (see the module docstring)
NOT_RUN = {"", "bash", "sh", "toml"}
#: the fences holding output, compared with ``last_output``
SHOWN = ("text", "c", "cuda", "wgsl")
FLAGS = doctest.ELLIPSIS
OUTPUT = "last_output"  # the namespace entry holding the output the next shown blocks are of


def check_output(want: str, got: str) -> str | None:
    """None if ``got`` is ``want`` (with ``...`` matching anything), else what differs."""
    checker = doctest.OutputChecker()
    if checker.check_output(want, got, FLAGS):
        return None
    example = doctest.Example("", want)
    return checker.output_difference(example, got, FLAGS)


def run_console(example: Example) -> str | None:
    """Run each ``$ command`` of a console block and compare the output shown under it."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    commands = re.split(r"^\$ ", str(example.parsed), flags=re.MULTILINE)[1:]
    for command in commands:
        line, _, want = command.partition("\n")
        done = subprocess.run(
            line, shell=True, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            return f"`{line}` failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        example.namespace[OUTPUT] = done.stdout
        if want.strip() and (difference := check_output(want, done.stdout)):
            return f"`{line}` printed other output:\n{difference}"
    return None


def check_shown_output(example: Example) -> str | None:
    """A shown block is a part of ``last_output``, ``...`` for lines left out."""
    got = example.namespace.get(OUTPUT)
    if got is None:
        return 'shown output with no command before it: mark it <!-- skip: next "why" -->'
    if check_output(f"...{example.parsed}...", got) is None:
        return None
    return f"not in the output of the command (or hidden block) before it:\n{example.parsed}"


SYBIL = Sybil(
    parsers=[
        PythonCodeBlockParser(future_imports=["annotations"], doctest_optionflags=FLAGS),
        CodeBlockParser("console", run_console),
        *(CodeBlockParser(language, check_shown_output) for language in SHOWN),
        SkipParser(),
    ],
)


def skipped(document: Document) -> list[tuple[int, str]]:
    """The line and reason of each ``skip: next`` or ``skip: start`` (a reason is required)."""
    found = []
    for _, region in document.regions:
        if isinstance(region.parsed, tuple) and region.parsed[0] in ("next", "start"):
            line = document.text.count("\n", 0, region.start) + 1
            reason = region.parsed[1]
            assert reason, f"{document.path}:{line}: say why the next block is not run"
            if not reason.startswith("if"):  # (a condition's skip shows when it is true)
                found.append((line, ast.literal_eval(reason)))
    return found


@pytest.mark.parametrize("name", DOCUMENTS)
def test_examples(name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Run the document's examples in order. The ones always skipped are ``test_not_run``'s;
    one skipped on a condition (no WebGPU adapter here) skips this test, after the others ran.
    Python examples run in an empty folder (what they write, a trace, stays out of the
    checkout); commands run from the checkout's root."""
    monkeypatch.chdir(tmp_path)  # (and back, whatever directory an example leaves)
    fusegrad.reset_caches()  # as in a new process: no plans or kernels kept in memory
    document = SYBIL.parse(ROOT / name)
    always = {reason for _, reason in skipped(document)}
    not_run = []
    for example in document:
        try:
            example.evaluate()
        except SkipTest as skip:
            not_run += [] if str(skip) in always else [f"line {example.line}: {skip}"]
    if not_run:
        pytest.skip(f"the other examples passed; not run here: {'; '.join(sorted(set(not_run)))}")


@pytest.mark.parametrize(
    "name,line,reason",
    [(name, *skip) for name in DOCUMENTS for skip in skipped(SYBIL.parse(ROOT / name))],
)
def test_not_run(name: str, line: int, reason: str):
    """One skipped test per example not run, so that each reason shows in pytest's summary."""
    pytest.skip(f"{name}:{line}: {reason}")


@pytest.mark.parametrize("name", DOCUMENTS)
def test_every_fence_is_a_known_kind(name: str):
    """A fence of a new language would be silently not run: it must be one of the known kinds."""
    fences = re.findall(r"^\s*```(\S*)", (ROOT / name).read_text(encoding="utf-8"), re.MULTILINE)
    languages = set(fences[::2])  # every other fence opens a block
    assert languages <= NOT_RUN | {"python", "console", *SHOWN}, languages


def test_a_wrong_output_fails(tmp_path: Path):
    """The checks can fail: a doctest, a command and a listing whose shown output is not what
    was printed, and a listing with no output before it; the right ones pass."""
    blocks = [
        "```text\n1\n```",  # no command before it: fails
        "```python\n>>> print(1 + 1)\n3\n```",  # fails
        "```python\n>>> print(2)\n2\n```",
        "```console\n$ echo 4\n5\n```",  # fails
        "```console\n$ printf 'a\\nb\\nc\\n'\na\n...\n```",
        "```text\nb\n```",
        "```text\nd\n```",  # fails
    ]
    page = tmp_path / "page.md"
    page.write_text("\n\n".join(blocks) + "\n")
    failed = []
    for i, example in enumerate(SYBIL.parse(page)):
        try:
            example.evaluate()
        except Exception as error:  # Sybil raises its own failure type for each
            failed.append((i, str(error).splitlines()[1]))
    assert [i for i, _ in failed] == [0, 1, 3, 6], failed
    assert "no command before it" in failed[0][1] and "Expected:" in failed[1][1]
    assert "`echo 4`" in failed[2][1] and "not in the output" in failed[3][1]
