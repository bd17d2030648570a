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

from fusegrad import Tensor, dtypes
from fusegrad.codegen.kernel import generate
from fusegrad.codegen.lower import index_type
from fusegrad.errors import UnsupportedOp
from fusegrad.renderer import Renderer
from tests.conftest import available

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


BIG = """
import json
from fusegrad import Tensor
n = 2**31
x = Tensor.full((64,), 7, dtype="uint8").pad(((n, 0),)).contiguous().realize()  # 2 GiB
rows = x.reshape(2**25 + 1, 64)
print(json.dumps({
    "past 2**31": x[n + 5].item(), "below": [x[5].item(), x[n - 1].item()],
    "sum": x.sum(dtype="int64").item(), "flipped": x.flip(0)[62:66].tolist(),
    "rows": rows.max(1)[-2:].tolist(), "last row": rows[-1].sum().item(),
    "ones": Tensor.ones(2**16, 1).expand(2**16, 2**15 + 1).cast("int64").sum().item(),
}))
"""


@pytest.mark.parametrize("device", ["CPU"] + [d for d in ("OPENCL",) if available(d)])
def test_two_to_the_31_elements_index_with_64_bit_counters(device):
    """A kernel over 2**31 or more elements counts in 64 bits (codegen/lower.py's index_type):
    with 32-bit counters the loop bound wrapped (a sum of 0) or a store landed outside its
    buffer (SIGSEGV). Positions past 2**31 are written and read back, through pad, flip,
    reshape, reductions and a view that expands to 2**31 elements."""
    done = subprocess.run(
        [sys.executable, "-c", BIG],
        env={**os.environ, "DEV": device},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got == {
        "past 2**31": 7,
        "below": [0, 0],
        "sum": 7 * 64,
        "flipped": [7, 7, 0, 0],
        "rows": [0, 7],
        "last row": 7 * 64,
        "ones": 2**16 * (2**15 + 1),
    }


def test_two_to_the_31_elements_are_refused_clearly_where_no_64_bit_integers():
    """WGSL has no 64-bit integers: such a kernel is refused before any code is made, with a
    way out, instead of wrapping around."""

    class NoInt64(Renderer):
        supported_dtypes = frozenset(d for d in Renderer.supported_dtypes if d.itemsize < 8)

    big = Tensor.ones(2**16, 1, dtype="int32").expand(2**16, 2**15).sum()
    [ast] = [s.ast for s in big.schedule() if index_type(s.ast) == dtypes.int64]
    with pytest.raises(UnsupportedOp, match="64-bit index arithmetic.*split the tensor"):
        generate(ast, NoInt64())
