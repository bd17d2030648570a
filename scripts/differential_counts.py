"""How much the differential tests (tests/core/differential) cover: op families, ops, cases.

    python scripts/differential_counts.py          # count what is collected
    python scripts/differential_counts.py --run    # and run it: passed / xfailed / failed

A case's id is "op-variant" (the op before the first "-"); each runs once per device, so a
collected test is ``test_<group>[op-variant-DEVICE]`` in the family's file.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = "tests/core/differential"


def pytest(*args: str) -> str:
    cmd = [sys.executable, "-m", "pytest", SUITE, "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True).stdout


def main() -> int:
    ids = [line for line in pytest("--collect-only").splitlines() if "::" in line]
    families: dict[str, set[str]] = defaultdict(set)
    cases, devices = set(), set()
    for node in ids:
        path, _, rest = node.partition("::")
        match = re.search(r"\[(.*)-([A-Z]+)\]$", rest)
        if match is None:
            continue
        case, device = match.groups()
        families[Path(path).stem.removeprefix("test_")].add(case.split("-", 1)[0])
        cases.add((path, case))
        devices.add(device)
    ops = set().union(*families.values())
    print(f"families: {len(families)} ({', '.join(sorted(families))})")
    print(f"ops covered: {len(ops)}")
    print(f"cases: {len(cases)}, run on {len(devices)} devices ({', '.join(sorted(devices))}): {len(ids)} tests")
    if "--run" in sys.argv:
        summary = pytest("-n", "2").strip().splitlines()[-1]
        print(f"run: {summary}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
