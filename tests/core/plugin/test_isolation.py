"""Plugins cannot break the core: a hook that raises is isolated to its plugin (warned once,
disabled for that hook, shown by ``fusegrad devices``), an undeclared override of another
plugin's device is refused, a device that cannot open is not the default, a hung probe times
out, and an allocator's buffers are checked when handed out."""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Iterator

import numpy as np
import pytest

from fusegrad import Device, Tensor
from fusegrad.__main__ import format_survey, survey
from fusegrad.device import DeviceSpec
from fusegrad.errors import DeviceUnavailable, PluginError
from fusegrad.plugin import manager
from fusegrad.runtime.python import PythonAllocator, PythonCompiler

from .conftest import FakePlugins, good_plugin

HEADER = """
from fusegrad.plugin import BACKEND_API_VERSION, hookimpl
from fusegrad.runtime.python import PythonAllocator, PythonCompiler

FUSEGRAD_BACKEND_API = BACKEND_API_VERSION
"""

RUN_RAISES = (
    HEADER
    + """
calls = []

@hookimpl
def fusegrad_kernel_run(name, device, seconds):
    calls.append(name)
    raise ZeroDivisionError("profiler bug")
"""
)

RUN_LISTENS = (
    HEADER
    + """
events = []

@hookimpl
def fusegrad_kernel_run(name, device, seconds):
    events.append(device)
"""
)

COMPILED_RAISES = (
    HEADER
    + """
@hookimpl
def fusegrad_kernel_compiled(name, device, source, seconds):
    raise KeyError("viewer bug")
"""
)

RULES_RAISE = (
    HEADER
    + """
@hookimpl
def fusegrad_rewrite_rules(stage, device):
    raise RuntimeError("rules bug")
"""
)

ALLOCATOR_RAISES = (
    HEADER
    + """
FUSEGRAD_OVERRIDES = {"PYTHON": ["allocator"]}

@hookimpl(tryfirst=True)
def fusegrad_allocator(device):
    raise RuntimeError("no memory pool here")
"""
)

#: Replaces the PYTHON device's compiler; ``DECLARE`` is replaced by a declaration or nothing.
FOREIGN_COMPILER = (
    HEADER
    + """
DECLARE

class Foreign(PythonCompiler):
    identity = "foreign"

@hookimpl(tryfirst=True)
def fusegrad_compiler(device):
    return Foreign() if device == "PYTHON" else None
"""
)

OPEN_FAILS = """
from fusegrad.device import DeviceSpec
from fusegrad.plugin import BACKEND_API_VERSION, hookimpl

FUSEGRAD_BACKEND_API = BACKEND_API_VERSION


def open_runtime(name):
    raise OSError("driver version mismatch")


@hookimpl
def fusegrad_devices():
    return [DeviceSpec("BROKE", 900, lambda: None, open=open_runtime)]
"""

#: FAKE's allocator hands out ``BAD``: a buffer of the wrong size or type.
BAD_ALLOCATOR = (
    good_plugin()
    + """

class BadAllocator(CountingAllocator):
    def alloc(self, nbytes):
        return BAD


def open_runtime(name):
    return Runtime(name, BadAllocator(), PythonRenderer(name), PythonCompiler(), PythonProgram)
"""
)


def add_one(device: str) -> list[float]:
    return (Tensor([1, 2, 3], device=device) + 1).numpy().tolist()


def info(name: str) -> manager.PluginInfo:
    return next(i for i in manager.plugins().infos if i.name == name)


def test_kernel_run_that_raises_is_warned_once_and_disabled(fake_plugins: FakePlugins):
    fake_plugins.install("fake_badrun", RUN_RAISES)
    fake_plugins.install("fake_goodrun", RUN_LISTENS)
    with pytest.warns(UserWarning, match=r"'fake_badrun'.*fusegrad_kernel_run.*ZeroDivision"):
        assert add_one("PYTHON") == [2, 3, 4]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        assert add_one("PYTHON") == [2, 3, 4]
    assert len(sys.modules["fake_badrun"].calls) == 1  # not asked again
    assert sys.modules["fake_goodrun"].events == ["PYTHON", "PYTHON"]  # others still are
    errors = info("fake_badrun").hook_errors
    assert errors == {"fusegrad_kernel_run": "ZeroDivisionError: profiler bug"}
    text = format_survey(survey())
    assert "      error in fusegrad_kernel_run: ZeroDivisionError: profiler bug" in text
    plugins = {p["name"]: p for p in survey()["plugins"]}
    assert plugins["fake_badrun"]["hook_errors"] == errors


def test_kernel_compiled_that_raises_is_isolated(fake_plugins: FakePlugins):
    fake_plugins.install("fake_badcompiled", COMPILED_RAISES)
    with pytest.warns(UserWarning, match=r"'fake_badcompiled'.*fusegrad_kernel_compiled.*KeyErr"):
        assert add_one("PYTHON") == [2, 3, 4]
    assert "fusegrad_kernel_compiled" in info("fake_badcompiled").hook_errors


def test_rewrite_rules_that_raise_leave_core_rules(fake_plugins: FakePlugins):
    fake_plugins.install("fake_badrules", RULES_RAISE)
    with pytest.warns(UserWarning, match=r"'fake_badrules'.*fusegrad_rewrite_rules.*rules bug"):
        x = Tensor(np.arange(4, dtype=np.float32), device="PYTHON")
        assert (x * 3).numpy().tolist() == [0, 3, 6, 9]


def test_override_that_raises_leaves_the_devices_own_part(fake_plugins: FakePlugins):
    fake_plugins.install("fake_badalloc", ALLOCATOR_RAISES)
    with pytest.warns(UserWarning, match=r"'fake_badalloc'.*fusegrad_allocator.*no memory pool"):
        runtime = Device["PYTHON"]
    assert type(runtime.allocator) is PythonAllocator and runtime.suppliers["allocator"] == "python"
    assert add_one("PYTHON") == [2, 3, 4]
    assert "no memory pool" in info("fake_badalloc").hook_errors["fusegrad_allocator"]


def test_override_that_is_not_the_part_leaves_the_devices_own_part(fake_plugins: FakePlugins):
    """An answer without the part's methods (here an allocator that is a plain object) is refused
    like a raising one, naming what it lacks."""
    fake_plugins.install(
        "fake_notalloc",
        ALLOCATOR_RAISES.replace('raise RuntimeError("no memory pool here")', "return object()"),
    )
    with pytest.warns(UserWarning, match=r"'fake_notalloc'.*fusegrad_allocator.*without alloc\(\)"):
        runtime = Device["PYTHON"]
    assert type(runtime.allocator) is PythonAllocator
    assert add_one("PYTHON") == [2, 3, 4]


def test_undeclared_override_of_another_plugins_device_is_refused(fake_plugins: FakePlugins):
    fake_plugins.install("fake_foreign", FOREIGN_COMPILER.replace("DECLARE", ""))
    with pytest.warns(UserWarning, match=r"'fake_foreign'.*PYTHON.*FUSEGRAD_OVERRIDES"):
        runtime = Device["PYTHON"]
    assert type(runtime.compiler) is PythonCompiler
    assert "without declaring" in info("fake_foreign").hook_errors["fusegrad_compiler"]


def test_declared_override_is_used(fake_plugins: FakePlugins):
    declared = 'FUSEGRAD_OVERRIDES = {"PYTHON": ["compiler"]}'
    fake_plugins.install("fake_foreign", FOREIGN_COMPILER.replace("DECLARE", declared))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert type(Device["PYTHON"].compiler).__name__ == "Foreign"


def test_malformed_override_declaration_is_refused_at_load(fake_plugins: FakePlugins):
    declared = 'FUSEGRAD_OVERRIDES = {"PYTHON": "compiler"}'
    fake_plugins.install("fake_foreign", FOREIGN_COMPILER.replace("DECLARE", declared))
    with pytest.warns(UserWarning, match="fake_foreign"):
        manager.plugins()
    assert "FUSEGRAD_OVERRIDES" in info("fake_foreign").error
    assert type(Device["PYTHON"].compiler) is PythonCompiler


def test_device_that_cannot_open_is_not_the_default(fake_plugins: FakePlugins):
    fake_plugins.install("fake_broke", OPEN_FAILS)
    with pytest.warns(UserWarning, match=r"BROKE.*cannot be opened.*driver version mismatch"):
        assert Device.DEFAULT != "BROKE"
    report = survey()
    broke = next(d for d in report["devices"] if d["name"] == "BROKE")
    assert "driver version mismatch" in broke["open_error"]
    assert "cannot be opened: OSError: driver version mismatch" in format_survey(report)


@pytest.fixture
def hanging_probe(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """A probe that waits until the test ends; probes time out after 0.2 seconds."""
    monkeypatch.setenv("FUSEGRAD_PROBE_TIMEOUT", "0.2")
    release = threading.Event()
    yield release
    release.set()


def test_probe_that_hangs_times_out(hanging_probe: threading.Event):
    spec = DeviceSpec("HANG", 1, hanging_probe.wait)
    why = spec.unavailable()
    assert why is not None and "did not answer within 0.2 s" in why
    assert "FUSEGRAD_PROBE_TIMEOUT" in why
    assert spec.unavailable() == why  # asked again while it still hangs: no second wait
    assert DeviceSpec("QUICK", 1, lambda: None).unavailable() is None
    assert DeviceSpec("NO", 1, lambda: "no driver").unavailable() == "no driver"


HANGS = """
import threading

from fusegrad.device import DeviceSpec
from fusegrad.plugin import BACKEND_API_VERSION, hookimpl

FUSEGRAD_BACKEND_API = BACKEND_API_VERSION
release = threading.Event()


@hookimpl
def fusegrad_devices():
    return [DeviceSpec("HANG", 999, release.wait)]
"""


def test_hung_device_is_not_the_default(fake_plugins: FakePlugins, hanging_probe):
    fake_plugins.install("fake_hang", HANGS)
    try:
        assert Device.DEFAULT != "HANG"
        with pytest.raises(DeviceUnavailable, match="HANG.*did not answer within"):
            Device["HANG"]
    finally:
        sys.modules["fake_hang"].release.set()


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("None", "returned None"),
        ("bytearray(1)", r"1 byte\(s\), but 12 were asked for"),
        ("bytes(64)", "read-only"),
    ],
)
def test_allocator_buffers_are_checked_when_handed_out(fake_plugins: FakePlugins, bad, why):
    fake_plugins.install("fake_badmem", BAD_ALLOCATOR.replace("BAD", bad))
    with pytest.raises(PluginError, match=rf"plugin 'fake_badmem'.*FAKE.*{why}"):
        add_one("FAKE")


def test_the_parts_are_the_same_for_the_device_and_the_hooks():
    from fusegrad import device
    from fusegrad.plugin import hookspecs

    assert device.PARTS == hookspecs.PARTS
    assert all(hasattr(hookspecs, f"fusegrad_{part}") for part in device.PARTS)
