"""The TEMPLATE device: a fusegrad backend plugin to copy when writing a new one.

This module holds the hook implementations only, and imports nothing heavy: fusegrad imports it
when it discovers plugins, also in programs that never use this device. Import your runtime
library (pyopencl, a driver binding...) inside the hooks, which run when the device is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusegrad.device import DeviceSpec
from fusegrad.plugin import hookimpl

if TYPE_CHECKING:
    from fusegrad.device import Allocator, Compiler
    from fusegrad.renderer import Renderer

#: The backend API version this plugin was written for; fusegrad refuses a plugin whose
#: version differs from its own, saying which. Keep pyproject.toml's keyword in step.
FUSEGRAD_BACKEND_API = 1
#: The device's name, as users write it (``Tensor(..., device="TEMPLATE")``, ``DEV=TEMPLATE``).
NAME = "TEMPLATE"
#: Orders devices for ``Device.DEFAULT``: PYTHON is 0, CPU 10, GPUs 20 and more. A template
#: should never become anyone's default device, so it sits below PYTHON.
PRIORITY = -1


def is_mine(device: str) -> bool:
    """Whether ``device`` (``"TEMPLATE"``, ``"TEMPLATE:1"``) names this plugin's device.

    Every firstresult hook below answers None for other names: that is how several plugins
    share the hooks.
    """
    return device.partition(":")[0] == NAME


def probe() -> str | None:
    """None when the device can be used here, else why not and how to fix it.

    Called lazily by ``fusegrad devices`` and ``Device.DEFAULT``. Check that your runtime library
    imports and finds hardware; return a sentence such as ``"pyopencl is not installed: pip
    install pyopencl"``. The template needs only numpy, which fusegrad already requires.
    """
    return None


@hookimpl
def fusegrad_devices() -> list[DeviceSpec]:
    """Announce the device; ``count`` is how many instances (``TEMPLATE:0``...) exist."""
    return [DeviceSpec(NAME, PRIORITY, probe, count=1)]


@hookimpl
def fusegrad_allocator(device: str) -> Allocator | None:
    if not is_mine(device):
        return None
    from fusegrad_template.device import TemplateAllocator

    return TemplateAllocator()


@hookimpl
def fusegrad_renderer(device: str) -> Renderer | None:
    if not is_mine(device):
        return None
    from fusegrad_template.renderer import TemplateRenderer

    return TemplateRenderer(device)


@hookimpl
def fusegrad_compiler(device: str) -> Compiler | None:
    if not is_mine(device):
        return None
    from fusegrad_template.compiler import TemplateCompiler

    return TemplateCompiler()


@hookimpl
def fusegrad_program(device: str) -> type | None:
    if not is_mine(device):
        return None
    from fusegrad_template.device import TemplateProgram

    return TemplateProgram
