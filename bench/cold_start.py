"""Cold start: the seconds of a first training step with an empty kernel cache (issue #19).

    python bench/cold_start.py [gpt] [mnist] [--repeat N]

Each measurement runs in a fresh Python process whose ``FUSEGRAD_CACHE`` is a new empty folder,
so every kernel of the step is generated and compiled, as on a user's first run. The time is
that of the first step alone (forward, backward, optimizer, and reading the loss); starting
Python, importing fusegrad and building the model are left out. ``bench/bench_gpt.py`` can call
``cold_first_step("gpt")`` (``from cold_start import cold_first_step``). The machine's load
average and the processor seconds are printed with the figures, since the compiler processes
share the cores with whatever else runs: the processor seconds, split into the compilers' and
the Python process's own (starting Python, imports and building the model included: about
0.5 s for the GPT), hardly change with the load, and are the figures to compare.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from typing import NamedTuple

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "examples")

#: The child's program for each workload: it builds the model, then prints the first step's
#: seconds as its last line (then ``CPU_SECONDS`` adds the processor time spent).
STEPS = {
    "gpt": """
import time
import gpt
from fusegrad import Tensor
cfg = gpt.Config()
model, data = gpt.GPT(cfg), gpt.token_stream(cfg, 1)
step = gpt.make_step(model)
batch = Tensor(data[0])
start = time.perf_counter()
step(batch).item()
print(time.perf_counter() - start)
""",
    "mnist": """
import time
import bench_mnist
x, y = bench_mnist.batch()
print(bench_mnist.fusegrad_step(x, y)[1])
""",
}


#: Appended to a workload's program: the processor seconds of the whole child (building the
#: model too) and of its compiler processes alone, which, unlike the step's seconds, other jobs
#: on the machine hardly change; and the number of kernels it compiled.
CPU_SECONDS = """
import resource
from fusegrad import GlobalCounters
used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
print(sum(u.ru_utime + u.ru_stime for u in used), used[1].ru_utime + used[1].ru_stime)
print(GlobalCounters.compiles)
"""


class ColdStart(NamedTuple):
    """One cold first step: its seconds, the processor seconds of its process (compilers
    included), those of the compiler processes alone, and the kernels compiled."""

    seconds: float
    processor_seconds: float
    compiler_seconds: float
    kernels: int


def cold_first_step(workload: str, env: dict[str, str] | None = None) -> ColdStart:
    """The first training step of ``workload`` (``"gpt"`` or ``"mnist"``) in a new process with
    an empty kernel cache: its seconds, and the processor seconds that process and its
    compilers used; ``env`` adds to the child's environment."""
    if workload not in STEPS:
        raise ValueError(f"unknown workload {workload!r}; choose one of {', '.join(STEPS)}")
    with tempfile.TemporaryDirectory(prefix="fusegrad-cold-cache-") as cache:
        path = os.pathsep.join([EXAMPLES, HERE, os.environ.get("PYTHONPATH", "")])
        child_env = {**os.environ, **(env or {}), "FUSEGRAD_CACHE": cache, "PYTHONPATH": path}
        child_env.pop("FUSEGRAD_DISABLE_CACHE", None)
        code = STEPS[workload] + CPU_SECONDS
        done = subprocess.run(
            [sys.executable, "-c", code], env=child_env, capture_output=True, text=True
        )
    if done.returncode != 0:
        raise RuntimeError(f"the cold {workload} step failed:\n{done.stderr}")
    *_, seconds, cpu, compilers, kernels = done.stdout.split()
    return ColdStart(float(seconds), float(cpu), float(compilers), int(kernels))


def load_average() -> str:
    """The 1-minute load average (what else was running), or '?' where the OS does not say."""
    try:
        return f"{os.getloadavg()[0]:.2f}"
    except OSError:
        return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "workloads", nargs="*", metavar="WORKLOAD", help="gpt, mnist (default: both)"
    )
    parser.add_argument("--repeat", type=int, default=1, help="measure each N times (median)")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores, load average {load_average()} before")
    for workload in args.workloads or STEPS:
        runs = [cold_first_step(workload) for _ in range(args.repeat)]
        times = [run.seconds for run in runs]
        shown = ", ".join(f"{t:.2f}" for t in times)
        processor = statistics.median(run.processor_seconds for run in runs)
        compilers = statistics.median(run.compiler_seconds for run in runs)
        print(
            f"{workload:<6s} first step seconds (cold) {statistics.median(times):6.2f}  "
            f"[{shown}]  processor seconds {processor:6.2f} (compilers {compilers:.2f}, "
            f"Python {processor - compilers:.2f} with imports and model; "
            f"{runs[0].kernels} kernels)  "
            f"load average {load_average()}"
        )


if __name__ == "__main__":
    main()
