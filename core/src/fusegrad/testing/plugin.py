"""The pytest plugin of the conformance suite: the ``--fusegrad-device`` option, the fixtures the
suite's tests use, and the summary of what the device's capabilities made the suite skip.

Loaded by every pytest run where fusegrad is installed (entry point ``pytest11``), so it does
nothing unless asked and imports fusegrad only when a conformance test needs it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

#: The folder of the suite's tests: only tests in it are switched by ``--fusegrad-device``.
SUITE = Path(__file__).resolve().parent


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fusegrad", "fusegrad backend conformance suite")
    group.addoption(
        "--fusegrad-device",
        metavar="NAME",
        default=None,
        help="run fusegrad's conformance suite (pytest --pyargs fusegrad.testing) against the "
        "installed device NAME, comparing each result with the PYTHON device",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "conformance: a test of fusegrad's backend conformance suite"
    )


def in_suite(item: pytest.Item) -> bool:
    """Whether ``item`` is one of the conformance suite's tests."""
    return SUITE in Path(str(item.path)).resolve().parents


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    device = config.getoption("--fusegrad-device")
    idle = pytest.mark.skip(
        reason="fusegrad conformance suite: give --fusegrad-device=NAME to run it"
    )
    for item in items:
        if in_suite(item):
            item.add_marker(pytest.mark.conformance)
            if device is None:
                item.add_marker(idle)


def pytest_sessionstart(session: pytest.Session) -> None:
    """Open the device once, before any test, so a wrong name is one clear error, not 500."""
    name = session.config.getoption("--fusegrad-device")
    if name is None:
        return
    from fusegrad.device import Device  # deferred: fusegrad loads only for a conformance run
    from fusegrad.errors import FusegradError  # deferred: as above

    try:
        Device[name]
    except FusegradError as e:
        raise pytest.UsageError(f"--fusegrad-device={name}: {e}") from None


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    name = config.getoption("--fusegrad-device")
    if name is None:
        return None
    from fusegrad.device import Device  # deferred: fusegrad loads only for a conformance run

    renderer = Device[name].renderer
    held = ", ".join(d.name for d in sorted(renderer.supported_dtypes, key=lambda d: d.priority))
    launch = "loops" if renderer.grid_dims is None else f"a {renderer.grid_dims}-d grid"
    return [
        f"fusegrad conformance: device {Device.canonicalize(name)} against PYTHON "
        f"(renderer {type(renderer).__name__}, launched over {launch})",
        f"  dtypes declared: {held}",
    ]


@pytest.fixture(scope="session")
def conformance_device(request: pytest.FixtureRequest) -> str:
    """The device under test, canonical (``"CPU"``, ``"OPENCL:1"``)."""
    from fusegrad.device import Device  # deferred: fusegrad loads only for a conformance run

    name = request.config.getoption("--fusegrad-device")
    if name is None:
        pytest.skip("fusegrad conformance suite: give --fusegrad-device=NAME to run it")
    return Device.canonicalize(name)


@pytest.fixture(scope="session")
def conformance_renderer(conformance_device: str) -> Any:
    """The renderer of the device under test: its capabilities decide what is skipped."""
    from fusegrad.device import Device  # deferred: fusegrad loads only for a conformance run

    return Device[conformance_device].renderer


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """List what the device's declared capabilities made the suite skip, grouped by reason."""
    name = config.getoption("--fusegrad-device")
    if name is None:
        return
    counts: Counter[str] = Counter()
    skipped: dict[str, list[str]] = defaultdict(list)
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if not isinstance(report, pytest.TestReport) or "conformance" not in report.keywords:
                continue
            if outcome == "passed" and report.when != "call":
                continue
            counts[outcome] += 1
            if outcome == "skipped":
                skipped[_skip_reason(report)].append(report.nodeid.rpartition("::")[2])
    terminalreporter.section(f"fusegrad conformance: {name}")
    terminalreporter.write_line(
        f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
        + (f", {counts['error']} errors" if counts["error"] else "")
    )
    for reason, tests in sorted(skipped.items()):
        shown = ", ".join(tests[:4]) + (f" and {len(tests) - 4} more" if len(tests) > 4 else "")
        terminalreporter.write_line(f"skipped {len(tests)}: {reason}")
        terminalreporter.write_line(f"    {shown}")
