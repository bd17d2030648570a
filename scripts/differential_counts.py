"""How much the differential tests (tests/core/differential) cover: op families, ops, cases.

    python scripts/differential_counts.py                  # count what pytest collects
    python scripts/differential_counts.py --run [-n 4]     # and run it: passed / xfailed / failed

A family is one file (``test_<family>.py``). A case's id is "op-variant", the op (``OpCase.op``)
before the first "-", and each case runs once per device, so a collected test reads
``test_<group>[op-variant-DEVICE]``.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = "tests/core/differential"
OUTCOMES = ("passed", "xfailed", "failed", "xpassed", "skipped", "error")


def pytest(*args: str) -> str:
    """pytest's output on the suite; a collection error is shown, not hidden in a low count."""
    cmd = [sys.executable, "-m", "pytest", SUITE, "-q", "-p", "no:cacheprovider", *args]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: some tests failed, reported below
        print(f"warning: pytest {' '.join(args)} exited {done.returncode}:", file=sys.stderr)
        print(done.stdout[-2000:] + done.stderr[-2000:], file=sys.stderr)
    return done.stdout


def collect() -> tuple[dict[str, set[str]], dict[str, set[str]], set[str], list[str]]:
    """Per family its ops and its cases ("test::case"), the devices, and every test id."""
    ids = [line for line in pytest("--collect-only").splitlines() if "::" in line]
    ops: dict[str, set[str]] = defaultdict(set)
    cases: dict[str, set[str]] = defaultdict(set)
    devices: set[str] = set()
    for node in ids:
        path, _, rest = node.partition("::")
        match = re.fullmatch(r"(\w+)\[(.*)-([A-Z]+)\]", rest)
        if match is None:
            continue  # a test that is not one case on one device
        test, case, device = match.groups()
        family = Path(path).stem.removeprefix("test_")
        ops[family].add(case.split("-", 1)[0])
        cases[family].add(f"{test}::{case}")
        devices.add(device)
    return ops, cases, devices, ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--run", action="store_true", help="run the tests and count outcomes")
    parser.add_argument("-n", default="1", help="pytest-xdist workers for --run (default 1)")
    args = parser.parse_args()
    ops, cases, devices, ids = collect()
    print(f"{'family':<12} {'ops':>5} {'cases':>6}")
    for family in sorted(ops):
        print(f"{family:<12} {len(ops[family]):>5} {len(cases[family]):>6}")
    n_cases = sum(map(len, cases.values()))
    print(f"op families: {len(ops)}")
    print(f"distinct ops covered: {len(set().union(*ops.values()))}")
    print(f"cases: {n_cases}")
    on = f"{len(devices)} devices ({', '.join(sorted(devices))})"
    print(f"parametrised tests: {len(ids)} (the cases on {on})")
    if args.run:
        summary = pytest("-n", args.n).strip().splitlines()[-1]
        found = re.findall(r"(\d+) (\w+)", summary.replace("errors", "error"))
        counts = {o: int(n) for n, o in found if o in OUTCOMES}
        print(
            "run: "
            + ", ".join(f"{counts.get(o, 0)} {o}" for o in OUTCOMES[:3])
            + "".join(f", {counts[o]} {o}" for o in OUTCOMES[3:] if o in counts)
        )
        return int(counts.get("failed", 0) > 0 or counts.get("error", 0) > 0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
