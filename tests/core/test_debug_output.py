"""``DEBUG=4`` follows a realize from the tensor graph to the C source, each stage named, with
the rules that fired and why the schedule cut the graph; ``docs/architecture.md`` shows the same
stages, so its newcomer's path cannot drift from what the code prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from fusegrad import Tensor
from fusegrad.codegen.kernel import DECOMPOSITION, PROGRAM_RULES, SIMPLIFICATION

ROOT = Path(__file__).resolve().parents[2]

#: the program docs/architecture.md's "A newcomer's path" shows the output of
PROGRAM = (
    "from fusegrad import Tensor; a=Tensor.ones(4,4).contiguous().realize(); "
    "b=Tensor.ones(4,4).contiguous().realize(); print((a+b).sum().item())"
)

#: the stages of one realize, in the order DEBUG=4 prints them
STAGES = [
    "tensor graph",
    "schedule",
    "kernel AST",
    "optimisation",
    "lowered",
    SIMPLIFICATION,
    DECOMPOSITION,
    PROGRAM_RULES,
    "linear program",
    "rendered source",
]


def debug_output() -> str:
    """What the documented program prints with DEBUG=4 on the CPU device."""
    env = {**os.environ, "DEBUG": "4", "DEV": "CPU"}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def headers(text: str) -> list[str]:
    return re.findall(r"^--- (.+) ---$", text, flags=re.MULTILINE)


def test_debug4_prints_every_stage_of_the_sum_in_order_with_rules_and_cuts():
    out = debug_output()
    last_realize = out[out.rindex("--- tensor graph ---") :]
    assert headers(last_realize) == STAGES
    assert re.search(r"^   \d+ REDUCE_AXIS +float32 +\(1, 1\) +\[\d+\]", last_realize, re.MULTILINE)
    assert "r_1_4_4" in last_realize and "reads 0, 1" in last_realize
    assert "cut: a result asked for" in last_realize
    fired = re.findall(r"^rules fired: (.+)$", last_realize, flags=re.MULTILINE)
    assert any(re.match(r"[\w.]+(:\d+)? x\d+", names) for names in fired), fired
    assert "void r_1_4_4(" in last_realize
    assert out.rstrip().endswith("32.0")


def test_architecture_page_shows_each_stage_of_the_newcomers_path():
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    path = page[page.index("## A newcomer's path") :]
    assert headers(path)[: len(STAGES)] == STAGES
    assert "(a+b).sum()" in path


def test_the_schedule_says_why_it_cut_each_kernel():
    x = Tensor.ones(4, 4).contiguous().realize()
    steps = (x - x.max(1, keepdim=True)).exp().sum().schedule()
    assert [s.reason for s in steps] == [
        "a reduce read through an EXPAND, PAD or GATHER inside another reduce (it would run again)",
        "a result asked for (a realized tensor)",
    ]
