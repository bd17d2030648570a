"""The schedule of a graph is the same in every process: where ``_kernel_cuts`` cuts a graph
can depend on the order it walks the kernels in, and walking a set (ordered by the nodes'
addresses) once gave the GPT example's training step 186 to 190 kernels from one process to
the next. Each run here moves where the process's objects live before building the step."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"

SCRIPT = """
import sys
junk = [[i] * (i % 7) for i in range(int(sys.argv[1]))]  # (moves where later objects live)
sys.path.insert(0, sys.argv[2])
import gpt
from fusegrad import Tensor, nn
from fusegrad.codegen.kernel import kernel_name
from fusegrad.nn.state import get_parameters
cfg = gpt.Config()
model = gpt.GPT(cfg)
opt = nn.optim.AdamW(get_parameters(model), lr=3e-4, weight_decay=0.1)
batch = Tensor(gpt.token_stream(cfg, 1)[0])
Tensor.training = True
loss = model(batch[:, :-1]).reshape(-1, cfg.vocab).cross_entropy(batch[:, 1:].reshape(-1))
loss.backward()
steps = Tensor.schedule(loss, *opt.schedule_step())
print(" ".join(kernel_name(s.ast) + ":" + str(s.slots) for s in steps))
"""


def test_the_gpt_steps_schedule_is_the_same_wherever_its_nodes_live():
    schedules = set()
    for junk in (0, 17, 333, 5000, 77777, 123457):
        run = subprocess.run(
            [sys.executable, "-c", SCRIPT, str(junk), str(EXAMPLES)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        schedules.add(run.stdout)
    assert len(schedules) == 1, [len(s.split()) for s in schedules]
