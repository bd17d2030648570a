"""The TEMPLATE device: a fusegrad backend plugin to copy when writing a new one.

This module holds the hook implementations only, and imports nothing heavy: fusegrad imports it
when it discovers plugins, also in programs that never use this device. Import your runtime
library (pyopencl, a driver binding...) inside ``open_runtime``, which runs when the device is
opened.
"""

from __future__ import annotations

from fusegrad.device import DeviceSpec, Runtime
from fusegrad.plugin import hookimpl

#: The backend API version this plugin was written for; fusegrad refuses a plugin whose
#: version differs from its own, saying which. Keep pyproject.toml's keyword in step.
FUSEGRAD_BACKEND_API = 2
#: The device's name, as users write it (``Tensor(..., device="TEMPLATE")``, ``DEV=TEMPLATE``).
NAME = "TEMPLATE"
#: Orders devices for ``Device.DEFAULT``: PYTHON is 0, CPU 10, GPUs 20 and more. A template
#: should never become anyone's default device, so it sits below PYTHON.
PRIORITY = -1


def probe() -> str | None:
    """None when the device can be used here, else why not and how to fix it.

    Called lazily by ``fusegrad devices`` and ``Device.DEFAULT``. Check that your runtime library
    imports and finds hardware; return a sentence such as ``"pyopencl is not installed: pip
    install pyopencl"``. The template needs only numpy, which fusegrad already requires.
    """
    return None


def open_runtime(name: str) -> Runtime:
    """Build the device's four parts for instance ``name`` (``"TEMPLATE"``, ``"TEMPLATE:1"``).

    Called once per instance, the first time it is used: import your runtime library here,
    never at the top of this module. Replace each part with yours, one at a time.
    """
    from fusegrad_template.compiler import TemplateCompiler
    from fusegrad_template.device import TemplateAllocator, TemplateProgram
    from fusegrad_template.renderer import TemplateRenderer

    return Runtime(
        name, TemplateAllocator(), TemplateRenderer(name), TemplateCompiler(), TemplateProgram
    )


@hookimpl
def fusegrad_devices() -> list[DeviceSpec]:
    """Announce the device; ``count`` is how many instances (``TEMPLATE:0``...) exist."""
    return [DeviceSpec(NAME, PRIORITY, probe, count=1, open=open_runtime)]
