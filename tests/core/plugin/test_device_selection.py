"""Choosing a device (``device.py``): ``Device[name]``, ``Device.DEFAULT`` and ``DEV=``, with
devices that are missing, unavailable, or whose probe is broken."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fusegrad import Device, Tensor
from fusegrad.errors import DeviceNotFound, DeviceUnavailable

from .conftest import FakePlugins, devices_plugin, good_plugin

UNAVAILABLE = 'DeviceSpec("NOPE", 1000, lambda: "libnope.so not found; install nope-runtime")'
RAISING_PROBE = 'DeviceSpec("OOPS", 2000, lambda: 1 / 0)'


def available_specs() -> list:
    return [s for s in Device.specs().values() if s.unavailable() is None]


def test_unavailable_device_says_why(fake_plugins: FakePlugins):
    fake_plugins.install("fake_nope", devices_plugin(f"[{UNAVAILABLE}]"))
    with pytest.raises(DeviceUnavailable, match="NOPE.*libnope.so not found; install nope-runtime"):
        Device["NOPE"]
    assert Device.DEFAULT != "NOPE"  # the highest priority, but it cannot be used


def test_probe_that_raises_makes_the_device_unavailable(fake_plugins: FakePlugins):
    fake_plugins.install("fake_oops", devices_plugin(f"[{RAISING_PROBE}]"))
    with pytest.raises(DeviceUnavailable, match="OOPS.*probe raised ZeroDivisionError"):
        Device["OOPS"]
    assert Device.DEFAULT != "OOPS"


def test_unknown_device_lists_the_devices_found():
    with pytest.raises(DeviceNotFound) as e:
        Device["NOSUCHDEVICE"]
    message = str(e.value)
    assert "'NOSUCHDEVICE'" in message and "fusegrad[nosuchdevice]" in message
    found = message.split("found: ")[1].split(")")[0].split(", ")
    assert found == sorted(Device.specs()) and "PYTHON" in found


def test_unknown_device_in_a_tensor_fails_when_used():
    with pytest.raises(DeviceNotFound, match="'NOSUCHDEVICE'"):
        (Tensor([1.0], device="nosuchdevice") + 1).numpy()


def test_default_is_the_available_device_of_highest_priority():
    best = max(available_specs(), key=lambda s: s.priority)
    assert Device.DEFAULT == best.name
    assert Tensor([1]).device == best.name


def test_default_skips_higher_unavailable_devices(fake_plugins: FakePlugins):
    fake_plugins.install("fake_good", good_plugin())  # FAKE, priority 50
    specs = f'[DeviceSpec("LOW", 1, lambda: None), {UNAVAILABLE}, {RAISING_PROBE}]'
    fake_plugins.install("fake_high", devices_plugin(specs))
    assert Device.DEFAULT == "FAKE"


@pytest.mark.parametrize("dev", ["PYTHON", "python", "PYTHON:0"])
def test_dev_selects_the_default(monkeypatch: pytest.MonkeyPatch, dev: str):
    monkeypatch.setenv("DEV", dev)
    assert Device.DEFAULT == "PYTHON"
    assert Tensor([1, 2]).device == "PYTHON"
    assert (Tensor([1, 2]) + 1).numpy().tolist() == [2, 3]


def test_dev_selects_an_instance(fake_plugins: FakePlugins, monkeypatch: pytest.MonkeyPatch):
    fake_plugins.install("fake_good", good_plugin(count=2))
    monkeypatch.setenv("DEV", "fake:1")
    assert Device.DEFAULT == "FAKE:1"
    assert (Tensor([1, 2]) + 1).numpy().tolist() == [2, 3]


def test_dev_in_a_fresh_process_selects_the_default():
    env = {**os.environ, "DEV": "PYTHON"}
    script = "from fusegrad import Device, Tensor; print(Device.DEFAULT, Tensor([1]).device)"
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["PYTHON", "PYTHON"]


def test_dev_naming_a_missing_instance_fails_clearly_every_time(monkeypatch: pytest.MonkeyPatch):
    if "CPU" not in Device.specs() or Device.specs()["CPU"].unavailable() is not None:
        pytest.skip("the CPU backend is not installed and usable here")
    monkeypatch.setenv("DEV", "CPU:1")
    for _ in range(2):  # a failed choice is not remembered as the default
        with pytest.raises(DeviceNotFound, match=r"DEV=CPU:1: no device 'CPU:1': CPU has 1 device"):
            _ = Device.DEFAULT


def test_dev_naming_an_unavailable_device_says_why(fake_plugins: FakePlugins, monkeypatch):
    fake_plugins.install("fake_nope", devices_plugin(f"[{UNAVAILABLE}]"))
    monkeypatch.setenv("DEV", "NOPE")
    with pytest.raises(DeviceUnavailable, match="DEV=NOPE: .*libnope.so not found"):
        _ = Device.DEFAULT


def test_setting_default_checks_the_device():
    Device.DEFAULT = "python"
    assert Device.DEFAULT == "PYTHON"
    with pytest.raises(DeviceNotFound):
        Device.DEFAULT = "NOSUCHDEVICE"
    assert Device.DEFAULT == "PYTHON"
