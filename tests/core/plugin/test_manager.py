"""Plugin discovery (``plugin/manager.py``): entry points found, broken plugins recorded and
warned about, version mismatches refused, devices opened by their ``DeviceSpec.open``, and
overrides of one part of a device, each recorded with the plugin that supplied it."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from fusegrad import Device, Tensor
from fusegrad.codegen.kernel import generate
from fusegrad.codegen.rules import CORE_RULES
from fusegrad.device import PARTS
from fusegrad.errors import DeviceNotFound, PluginError
from fusegrad.plugin import BACKEND_API_VERSION, manager
from fusegrad.runtime.python import PythonAllocator, PythonCompiler, PythonProgram, PythonRenderer

from .conftest import FakePlugins, devices_plugin, good_plugin

BROKEN_IMPORT = 'raise ImportError("libfake.so: cannot open shared object file")\n'

#: Replaces only the PYTHON device's compiler, and records every source it compiles.
COMPILER_OVERRIDE = """
from fusegrad.plugin import BACKEND_API_VERSION, hookimpl
from fusegrad.runtime.python import PythonCompiler

FUSEGRAD_BACKEND_API = BACKEND_API_VERSION
FUSEGRAD_OVERRIDES = {"PYTHON": ["compiler"]}


class TracingCompiler(PythonCompiler):
    identity = "tracing-python-compiler"
    compiled = []

    def compile(self, source):
        TracingCompiler.compiled.append(source)
        return super().compile(source)


@hookimpl(tryfirst=True)
def fusegrad_compiler(device):
    return TracingCompiler() if device.partition(":")[0] == "PYTHON" else None
"""


#: Replaces all four parts of the FAKE device, to show that each override hook is asked.
EVERY_PART = """
from fusegrad.plugin import BACKEND_API_VERSION, hookimpl
from fusegrad.runtime.python import PythonAllocator, PythonCompiler, PythonProgram, PythonRenderer

FUSEGRAD_BACKEND_API = BACKEND_API_VERSION
FUSEGRAD_OVERRIDES = {"FAKE": ["allocator", "renderer", "compiler", "program"]}


class MyAllocator(PythonAllocator):
    pass


class MyRenderer(PythonRenderer):
    pass


class MyCompiler(PythonCompiler):
    identity = "my-python-compiler"


class MyProgram(PythonProgram):
    pass


def fake(device):
    return device.partition(":")[0] == "FAKE"


@hookimpl
def fusegrad_allocator(device):
    return MyAllocator() if fake(device) else None


@hookimpl
def fusegrad_renderer(device):
    return MyRenderer(device) if fake(device) else None


@hookimpl
def fusegrad_compiler(device):
    return MyCompiler() if fake(device) else None


@hookimpl
def fusegrad_program(device):
    return MyProgram if fake(device) else None
"""

#: A backend written for backend API version 1: its device's parts came from the part hooks.
API_1_BACKEND = """
from fusegrad.device import DeviceSpec
from fusegrad.plugin import hookimpl
from fusegrad.runtime.python import PythonAllocator

FUSEGRAD_BACKEND_API = 1


@hookimpl
def fusegrad_devices():
    return [DeviceSpec("OLD", 1, lambda: None)]


@hookimpl
def fusegrad_allocator(device):
    return PythonAllocator() if device == "OLD" else None
"""


#: A deliberately wrong rule, to see it applied: on PYTHON every x * c becomes x + c.
MUL_BECOMES_ADD = """
from fusegrad.plugin import BACKEND_API_VERSION, hookimpl
from fusegrad.uop.ops import Ops, UOp
from fusegrad.uop.pattern import PatternMatcher, UPat

FUSEGRAD_BACKEND_API = BACKEND_API_VERSION


@hookimpl
def fusegrad_rewrite_rules(stage, device):
    if stage != "kernel" or device != "PYTHON":
        return None
    x_times_c = UPat(Ops.MUL, src=(UPat.var("x"), UPat.cvar("c")))
    return PatternMatcher([(x_times_c, lambda x, c: x + c)])
"""


def info(name: str) -> manager.PluginInfo:
    """The discovery record of the plugin called ``name`` (its devices are asked for first)."""
    manager.plugins().device_specs()
    return next(i for i in manager.plugins().infos if i.name == name)


def add_one(device: str) -> list[float]:
    return (Tensor([1, 2, 3], device=device) + 1).numpy().tolist()


def test_builtin_python_plugin_is_always_found():
    python = info("python")
    assert (python.distribution, python.module, python.error) == (
        "fusegrad",
        "fusegrad.runtime.python_plugin",
        None,
    )
    assert python.api_version == BACKEND_API_VERSION and python.devices == ["PYTHON"]


def test_good_plugin_is_recorded_and_runs_a_computation(fake_plugins: FakePlugins):
    fake_plugins.install("fake_good", good_plugin(), dist="fake-good", version="2.5")
    fake = info("fake_good")
    assert (fake.distribution, fake.version, fake.module) == ("fake-good", "2.5", "fake_good")
    assert (fake.api_version, fake.error, fake.devices) == (BACKEND_API_VERSION, None, ["FAKE"])
    assert add_one("FAKE") == [2, 3, 4]
    assert add_one("fake") == [2, 3, 4]  # device names are case-insensitive
    assert len(sys.modules["fake_good"].allocations) >= 2  # FAKE's allocator held the buffers
    assert isinstance(Device["FAKE"].allocator, sys.modules["fake_good"].CountingAllocator)


def test_entry_point_may_name_an_object_in_a_module(fake_plugins: FakePlugins):
    source = good_plugin() + "\n\nclass hooks:\n    pass\n"
    source += (
        "\nfor _n in dir():\n    if _n.startswith('fusegrad_') or _n == 'FUSEGRAD_BACKEND_API':"
    )
    source += "\n        setattr(hooks, _n, staticmethod(globals()[_n]))\n"
    fake_plugins.install("fake_object", source, target="fake_object:hooks")
    assert info("fake_object").error is None and info("fake_object").module == "fake_object:hooks"
    assert add_one("FAKE") == [2, 3, 4]


def test_device_instances_beyond_count_are_refused(fake_plugins: FakePlugins):
    fake_plugins.install("fake_good", good_plugin(count=2))
    assert add_one("FAKE:1") == [2, 3, 4]
    assert Device["FAKE:0"] is Device["FAKE"] and Device["FAKE:1"] is not Device["FAKE"]
    with pytest.raises(DeviceNotFound, match=r"'FAKE:2'.*2 device\(s\).*FAKE, FAKE:1"):
        Device["FAKE:2"]
    with pytest.raises(DeviceNotFound, match="'FAKE:x'"):
        Device["FAKE:x"]


def test_plugin_that_fails_to_import_is_recorded_and_warned(fake_plugins: FakePlugins):
    fake_plugins.install("fake_broken", BROKEN_IMPORT, dist="fake-broken")
    with pytest.warns(
        UserWarning, match=r"'fake_broken' \(fake-broken\) was not loaded: ImportError"
    ):
        broken = info("fake_broken")
    assert broken.error == "ImportError: libfake.so: cannot open shared object file"
    assert broken.devices == [] and not manager.plugins().has_plugin("fake_broken")
    assert add_one("PYTHON") == [2, 3, 4]  # everything else keeps working


def test_broken_plugin_never_breaks_import_fusegrad(fake_plugins: FakePlugins):
    fake_plugins.install("fake_broken", BROKEN_IMPORT)
    script = (
        "import fusegrad; print((fusegrad.Tensor([1, 2], device='PYTHON') + 1).numpy().tolist())"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=fake_plugins.subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[2, 3]"
    assert "'fake_broken'" in done.stderr and "ImportError: libfake.so" in done.stderr


def test_plugin_built_for_another_api_version_is_refused(fake_plugins: FakePlugins):
    fake_plugins.install(
        "fake_future", devices_plugin('[DeviceSpec("FUTURE", 1, lambda: None)]', "999")
    )
    with pytest.warns(UserWarning, match="fake_future"):
        future = info("fake_future")
    assert future.api_version == 999
    assert "backend API version 999" in future.error and "speaks version 2" in future.error
    assert "plugin 'fake_future' (fake-future 1.0) is built for" in future.error
    assert "FUTURE" not in Device.specs()


def test_plugin_without_api_version_is_refused(fake_plugins: FakePlugins):
    fake_plugins.install("fake_unversioned", "from fusegrad.plugin import hookimpl\n")
    with pytest.warns(UserWarning, match="fake_unversioned"):
        unversioned = info("fake_unversioned")
    assert "FUSEGRAD_BACKEND_API = 2" in unversioned.error


def test_plugin_whose_devices_hook_raises_is_recorded_and_silenced(fake_plugins: FakePlugins):
    source = devices_plugin("1 / 0") + (
        "\nfrom fusegrad.runtime.python import PythonCompiler\n\n"
        "class Foreign(PythonCompiler):\n    pass\n\n"
        "@hookimpl(tryfirst=True)\ndef fusegrad_compiler(device):\n    return Foreign()\n"
    )
    fake_plugins.install("fake_raising", source)
    with pytest.warns(UserWarning, match="fusegrad_devices raised ZeroDivisionError"):
        specs = Device.specs()
    assert "PYTHON" in specs
    assert info("fake_raising").error.startswith("fusegrad_devices raised ZeroDivisionError")
    assert type(Device["PYTHON"].compiler) is PythonCompiler  # its other hooks do not answer


def test_plugin_with_a_malformed_hook_leaves_no_hook_behind(fake_plugins: FakePlugins):
    source = """
        from fusegrad.plugin import BACKEND_API_VERSION, hookimpl
        from fusegrad.runtime.python import PythonAllocator

        FUSEGRAD_BACKEND_API = BACKEND_API_VERSION

        class Foreign(PythonAllocator):
            pass

        @hookimpl(tryfirst=True)
        def fusegrad_allocator(device):
            return Foreign()

        @hookimpl
        def fusegrad_compiler(device, flags):  # no such argument in the hook specification
            return None
        """
    fake_plugins.install("fake_malformed", source)
    with pytest.warns(UserWarning, match="fake_malformed"):
        assert "flags" in info("fake_malformed").error
    assert type(Device["PYTHON"].allocator) is PythonAllocator


def test_tryfirst_plugin_replaces_only_the_compiler(fake_plugins: FakePlugins):
    assert add_one("PYTHON") == [2, 3, 4]  # compiled once with the built-in compiler
    fake_plugins.install("fake_compiler", COMPILER_OVERRIDE)
    runtime = Device["PYTHON"]
    tracing = sys.modules["fake_compiler"].TracingCompiler
    assert (
        type(runtime.compiler) is tracing and runtime.compiler.identity == "tracing-python-compiler"
    )
    assert type(runtime.allocator) is PythonAllocator and type(runtime.renderer) is PythonRenderer
    assert runtime.program is PythonProgram
    assert runtime.suppliers == {
        "allocator": "python",
        "renderer": "python",
        "compiler": "fake_compiler",
        "program": "python",
    }
    assert add_one("PYTHON") == [2, 3, 4]  # reset() forgot the kernel compiled before
    assert len(tracing.compiled) == 1 and '"name"' in tracing.compiled[0]


def test_every_part_can_be_overridden_and_its_supplier_is_recorded(fake_plugins: FakePlugins):
    fake_plugins.install("fake_good", good_plugin())
    fake_plugins.install("fake_parts", EVERY_PART)
    assert add_one("FAKE") == [2, 3, 4]
    parts = sys.modules["fake_parts"]
    runtime = Device["FAKE"]
    assert type(runtime.allocator) is parts.MyAllocator
    assert type(runtime.renderer) is parts.MyRenderer
    assert type(runtime.compiler) is parts.MyCompiler and runtime.program is parts.MyProgram
    assert runtime.suppliers == dict.fromkeys(PARTS, "fake_parts")
    assert sys.modules["fake_good"].opened == ["FAKE"]  # still opened by its own plugin
    assert Device["PYTHON"].suppliers == dict.fromkeys(PARTS, "python")


def test_override_that_raises_names_its_plugin_and_is_skipped(fake_plugins: FakePlugins):
    source = """
        from fusegrad.plugin import BACKEND_API_VERSION, hookimpl

        FUSEGRAD_BACKEND_API = BACKEND_API_VERSION

        @hookimpl
        def fusegrad_renderer(device):
            raise RuntimeError("no GPU here")
        """
    fake_plugins.install("fake_raising_part", source)
    with pytest.warns(UserWarning, match=r"'fake_raising_part' failed in fusegrad_renderer"):
        assert type(Device["PYTHON"].renderer) is PythonRenderer


def test_device_is_opened_once_per_instance_by_its_spec(fake_plugins: FakePlugins):
    fake_plugins.install("fake_good", good_plugin(count=2))
    assert Device["fake:1"] is Device["FAKE:1"] and Device["FAKE:1"].name == "FAKE:1"
    assert Device["FAKE:1"].renderer.device == "FAKE:1"
    assert sys.modules["fake_good"].opened == ["FAKE:1"]
    assert Device["FAKE:1"].suppliers == dict.fromkeys(PARTS, "fake_good")


def test_device_spec_without_open_cannot_be_opened(fake_plugins: FakePlugins):
    fake_plugins.install("fake_openless", devices_plugin('[DeviceSpec("SHUT", 1, lambda: None)]'))
    with pytest.raises(PluginError, match=r"'fake_openless' offers device SHUT.*needs open="):
        Device["SHUT"]


def test_plugin_built_for_api_version_1_is_refused_by_name(fake_plugins: FakePlugins):
    fake_plugins.install("fake_old", API_1_BACKEND, dist="fake-old", version="0.3")
    with pytest.warns(UserWarning, match=r"'fake_old' \(fake-old\) was not loaded"):
        old = info("fake_old")
    assert old.api_version == 1 and not manager.plugins().has_plugin("fake_old")
    assert old.error.startswith(
        "PluginError: plugin 'fake_old' (fake-old 0.3) is built for backend API version 1, "
        "but this fusegrad speaks version 2: "
    )
    assert "DeviceSpec(..., open=f)" in old.error and "FUSEGRAD_BACKEND_API = 2" in old.error
    with pytest.raises(DeviceNotFound, match="'OLD'"):
        Device["OLD"]


def test_second_plugin_offering_a_device_is_ignored_with_a_warning(fake_plugins: FakePlugins):
    fake_plugins.install(
        "fake_impostor", devices_plugin('[DeviceSpec("PYTHON", 99, lambda: "no")]')
    )
    with pytest.warns(UserWarning, match="'fake_impostor' also offers device 'PYTHON'"):
        specs = Device.specs()
    assert specs["PYTHON"].priority == 0
    assert info("fake_impostor").devices == [] and info("python").devices == ["PYTHON"]


def test_kernel_compiled_event_reaches_listeners(fake_plugins: FakePlugins):
    source = """
        from fusegrad.plugin import BACKEND_API_VERSION, hookimpl

        FUSEGRAD_BACKEND_API = BACKEND_API_VERSION
        events = []

        @hookimpl
        def fusegrad_kernel_compiled(name, device, source, seconds):
            events.append((name, device, source, seconds))
        """
    fake_plugins.install("fake_listener", source)
    x = Tensor(np.arange(4, dtype=np.float32), device="PYTHON")
    assert (x * 3).numpy().tolist() == [0, 3, 6, 9]
    [(name, device, kernel_source, seconds)] = sys.modules["fake_listener"].events
    assert device == "PYTHON" and name in kernel_source and seconds >= 0


def test_kernel_run_event_reaches_listeners(fake_plugins: FakePlugins):
    source = """
        from fusegrad.plugin import BACKEND_API_VERSION, hookimpl

        FUSEGRAD_BACKEND_API = BACKEND_API_VERSION
        events = []

        @hookimpl
        def fusegrad_kernel_run(name, device, seconds):
            events.append((name, device, seconds))
        """
    fake_plugins.install("fake_runlistener", source)
    assert add_one("PYTHON") == [2, 3, 4]
    assert [device for _, device, _ in sys.modules["fake_runlistener"].events] == ["PYTHON"]


def test_rewrite_rules_hook_changes_the_kernel(fake_plugins: FakePlugins):
    fake_plugins.install("fake_rules", MUL_BECOMES_ADD)
    x = Tensor(np.arange(4, dtype=np.float32), device="PYTHON")
    assert (x * 3).numpy().tolist() == [3, 4, 5, 6]


def test_rewrite_rules_are_resolved_when_the_device_opens(fake_plugins: FakePlugins, monkeypatch):
    """Plugin rules live on the Runtime; ``generate`` takes them and never asks the plugins."""
    fake_plugins.install("fake_rules", MUL_BECOMES_ADD)
    x = Tensor(np.arange(4, dtype=np.float32), device="PYTHON")
    (step,) = (x * 3).schedule()
    runtime = Device["PYTHON"]
    assert [fn.__module__ for _, fn in runtime.rules.kernel.rules][-1] == "fake_rules"

    def no_plugins():
        raise AssertionError("generate asked the plugin manager")

    monkeypatch.setattr(manager, "plugins", no_plugins)
    with_rules = generate(step.ast, runtime.renderer, runtime.rules)
    without = generate(step.ast, runtime.renderer)  # core's rules alone
    assert with_rules.source != without.source
    assert generate(step.ast, runtime.renderer, CORE_RULES).source == without.source
