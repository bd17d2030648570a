"""Programs that used to kill the process, each run in a process of its own, against PyTorch.

Zero-size tensors rendered an index ``% 0`` that gcc compiled to a trap (SIGILL); an integer
division by a zero element stopped the process with SIGFPE; a NaN folded into an integer cast
raised from Python's ``int``. A crash here fails one case, not the test run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:.*degrees of freedom:UserWarning")

nan = float("nan")

#: (name, fusegrad's program, torch's program): expressions of ``Tensor``/``torch`` and ``nan``
PROGRAMS = [
    (
        "cat of (45,0,9)",
        "Tensor.rand(45, 0, 9).cat(Tensor.rand(45, 0, 9), dim=0).realize()",
        "torch.cat([torch.rand(45, 0, 9), torch.rand(45, 0, 9)], 0)",
    ),
    (
        "cat of (4,0,3)",
        "Tensor.rand(4, 0, 3).cat(Tensor.rand(4, 0, 3), dim=0).realize()",
        "torch.cat([torch.rand(4, 0, 3), torch.rand(4, 0, 3)], 0)",
    ),
    (
        "stack",
        "Tensor.rand(4, 0, 3).stack(Tensor.rand(4, 0, 3)).realize()",
        "torch.stack([torch.rand(4, 0, 3), torch.rand(4, 0, 3)])",
    ),
    (
        "pad",
        "Tensor.rand(4, 0, 3).pad(((1, 1), None, None)).realize()",
        "torch.nn.functional.pad(torch.rand(4, 0, 3), (0, 0, 0, 0, 1, 1))",
    ),
    (
        "pad to values",
        "Tensor.rand(2, 0).pad((None, (1, 1)), value=7.0).realize()",
        "torch.nn.functional.pad(torch.rand(2, 0), (1, 1), value=7.0)",
    ),
    ("roll", "Tensor.rand(4, 0, 3).roll(1, 0).realize()", "torch.roll(torch.rand(4, 0, 3), 1, 0)"),
    ("tril", "Tensor.rand(3, 0).tril().realize()", "torch.tril(torch.rand(3, 0))"),
    ("triu", "Tensor.rand(0, 3, 3).triu(1).realize()", "torch.triu(torch.rand(0, 3, 3), 1)"),
    ("cumsum", "Tensor.rand(0, 3).cumsum(1).realize()", "torch.rand(0, 3).cumsum(1)"),
    ("std over an empty axis", "Tensor.rand(4, 0).std(1).realize()", "torch.rand(4, 0).std(1)"),
    ("var keeping an empty axis", "Tensor.rand(0, 4).var(1).realize()", "torch.rand(0, 4).var(1)"),
    (
        "matmul m=0",
        "(Tensor.rand(0, 5) @ Tensor.rand(5, 4)).realize()",
        "torch.rand(0, 5) @ torch.rand(5, 4)",
    ),
    (
        "matmul k=0",
        "(Tensor.rand(3, 0) @ Tensor.rand(0, 4)).realize()",
        "torch.rand(3, 0) @ torch.rand(0, 4)",
    ),
    (
        "conv2d of an empty batch",
        "Tensor.rand(0, 3, 8, 8).conv2d(Tensor.rand(4, 3, 3, 3)).realize()",
        "torch.nn.functional.conv2d(torch.rand(0, 3, 8, 8), torch.rand(4, 3, 3, 3))",
    ),
    (
        "reshape of an empty buffer",
        "Tensor.rand(0).reshape(3, 0, 5).contiguous().realize()",
        "torch.rand(0).reshape(3, 0, 5)",
    ),
    (
        "INT_MIN // -1",
        "Tensor([-2**31, 7]) // Tensor([-1, -1])",
        "torch.tensor([-2**31, 7], dtype=torch.int32) // torch.tensor([-1, -1], dtype=torch.int32)",
    ),
    (
        "std of NaN data, rounded",
        "Tensor.full((4, 4), nan).std(1).round()",
        "torch.full((4, 4), nan).std(1).round()",
    ),
    ("floor of NaN", "Tensor.full((3,), nan).floor()", "torch.full((3,), nan).floor()"),
    ("NaN // 2", "Tensor.full((3,), nan) // 2", "torch.full((3,), nan) // 2"),
    (
        "NaN to int32",
        "Tensor.full((3,), nan).cast('int32')",
        "torch.full((3,), nan).to(torch.int32)",
    ),
]

RUN = """
import json
from fusegrad import Tensor
nan = float("nan")
out = ({program}).numpy()
print(json.dumps({{"shape": list(out.shape), "values": out.tolist()}}))
"""


def run_alone(program: str, device: str = "CPU") -> dict:
    """The shape and values ``program`` gives on ``device``, computed in a new process."""
    env = {**os.environ, "DEV": device, "VERIFY": "1"}
    done = subprocess.run(
        [sys.executable, "-c", RUN.format(program=program)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, f"exit status {done.returncode}:\n{done.stderr[-2000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
@pytest.mark.parametrize("name, ours, theirs", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_a_formerly_crashing_program_gives_torchs_result(name, ours, theirs, device):
    got = run_alone(ours, device)
    want = eval(theirs, {"torch": torch, "nan": nan}).numpy()  # noqa: S307 - our own literals
    assert got["shape"] == list(want.shape)
    np.testing.assert_array_equal(
        np.array(got["values"], dtype=want.dtype).reshape(want.shape), want
    )


def test_integer_division_by_a_zero_element_gives_zero_rather_than_sigfpe():
    """PyTorch raises here; fusegrad defines x // 0 = x % 0 = 0 on every device (Ops.IDIV)."""
    assert run_alone("Tensor([1, 2, 3]) // Tensor([0, 1, 0])")["values"] == [0, 2, 0]
    assert run_alone("Tensor([1, 2, 3]) % Tensor([0, 1, 0])")["values"] == [0, 0, 0]
    assert run_alone("Tensor([1, 2, 3]) // 0")["values"] == [0, 0, 0]


REFUSED = """
from fusegrad import Tensor
from fusegrad.errors import UnsupportedOp
try:
    {program}
except UnsupportedOp as e:
    print("refused:", e)
"""


@pytest.mark.parametrize(
    "program",
    [
        "Tensor.ones(2**31, dtype='uint8').sum().item()",  # the loop bound wrapped: sum 0
        "Tensor.ones(2**16, 1).expand(2**16, 2**15).sum().item()",  # 2**31 through a view
        "Tensor.empty(2**31 + 64, dtype='uint8').contiguous().realize()",  # wrote out of bounds
    ],
)
@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
def test_two_to_the_31_elements_are_refused_clearly_not_wrapped(program, device):
    """Kernel index arithmetic is 32-bit: such a kernel is refused with a way out before any
    code is made (it summed to 0 or crashed with SIGSEGV)."""
    done = subprocess.run(
        [sys.executable, "-c", REFUSED.format(program=program)],
        env={**os.environ, "DEV": device},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused:" in done.stdout and "split the tensor" in done.stdout
