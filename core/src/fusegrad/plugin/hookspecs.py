"""The hooks a fusegrad plugin may implement.

A plugin is a module registered under the entry-point group ``fusegrad`` (see the backend author's
guide). It sets ``FUSEGRAD_BACKEND_API = BACKEND_API_VERSION`` and implements any of these
functions, decorated with ``fusegrad.plugin.hookimpl``. Hook modules must import nothing heavy:
import your runtime library inside the function that needs it (a ``DeviceSpec``'s ``open``).

A backend implements ``fusegrad_devices``: each ``DeviceSpec`` it returns carries ``open(name)``,
which builds the device's four parts as one ``Runtime``. The four part hooks
(``fusegrad_allocator`` ...) are overrides: they let a plugin replace one part of a device that
another plugin opens, and ``fusegrad devices`` shows who replaced what. Such a plugin declares
what it replaces, by device name: ``FUSEGRAD_OVERRIDES = {"CPU": ["compiler"]}``.

A plugin cannot break the core:

- A hook that raises when called (``fusegrad_kernel_run``, ``fusegrad_allocator``, any of them)
  loses only its own answer: the device keeps working (with its own part, core's rules...), a
  warning names the plugin, the hook and the exception, that plugin is not asked that hook
  again in the process, and ``fusegrad devices`` lists the error under the plugin.
- An answer to a part hook for a device the plugin does not offer and did not declare in
  ``FUSEGRAD_OVERRIDES`` is refused the same way.
- A probe gets ``FUSEGRAD_PROBE_TIMEOUT`` seconds (default 10); one that does not answer, or
  raises, makes its device unavailable, with that reason.
- ``Device.DEFAULT`` skips a device that probes available but whose ``open`` fails (with a
  warning; ``fusegrad devices`` says why it cannot be opened).
- A buffer an allocator hands out that is None, or host memory that is read-only or smaller
  than asked for, is refused with an error naming the plugin that supplied the allocator.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from fusegrad.device import Allocator, Compiler, DeviceSpec
    from fusegrad.renderer import Renderer
    from fusegrad.uop.pattern import PatternMatcher

PROJECT = "fusegrad"
#: The version of this hook interface. A plugin built for another one is refused with a message.
#: 2: a device is opened by its ``DeviceSpec.open``; the part hooks only override.
BACKEND_API_VERSION = 2
#: The parts of an opened device, each replaceable through its hook ``fusegrad_<part>`` (a
#: plugin declares which in ``FUSEGRAD_OVERRIDES``). ``device.PARTS`` is the same tuple: device.py
#: may not import this module, which loads pluggy (a test keeps the two equal).
PARTS = ("allocator", "renderer", "compiler", "program")

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def fusegrad_devices() -> list[DeviceSpec]:
    """Return the devices this plugin offers, as ``DeviceSpec(name, priority, probe, count, open)``.

    Called once, the first time any device is looked up. Every plugin's answers are collected.
    ``priority`` orders devices for ``Device.DEFAULT`` (PYTHON is 0, CPU 10, GPUs 20 and more).
    ``probe()`` is called lazily and returns None when usable, else the reason it is not.
    ``open(name)`` is called once per instance (``"OPENCL:1"``), when it is first used, and
    returns its ``Runtime(name, allocator, renderer, compiler, program)``; import the runtime
    library there. Since API version 1; ``open`` since API version 2.
    """


@hookspec(firstresult=True)
def fusegrad_allocator(device: str) -> Allocator | None:
    """Override: return an ``Allocator`` to use for ``device`` (``"CPU"``, ``"OPENCL:1"``), or None.

    Called once, when the device is first opened, after its ``DeviceSpec.open``. The first
    non-None answer replaces the allocator ``open`` built (mark the hook ``tryfirst=True`` to be
    asked before other overrides); ``fusegrad devices`` names the plugin that replaced it.
    Answer None for every device you do not mean to change; an answer for another plugin's
    device needs ``FUSEGRAD_OVERRIDES = {"CPU": ["allocator"]}`` in your module, or it is
    refused. ``alloc(nbytes)`` must return a handle to at least ``nbytes`` bytes (host memory is
    checked). Since API version 1; an override since API version 2.
    """


@hookspec(firstresult=True)
def fusegrad_renderer(device: str) -> Renderer | None:
    """Override: return a ``Renderer`` to use for ``device``, or None.

    Called once, when the device is first opened, after its ``DeviceSpec.open``. The first
    non-None answer replaces the renderer ``open`` built; ``fusegrad devices`` names the plugin
    that replaced it. Since API version 1; an override since API version 2.
    """


@hookspec(firstresult=True)
def fusegrad_compiler(device: str) -> Compiler | None:
    """Override: return a ``Compiler`` to use for ``device``, or None.

    Called once, when the device is first opened, after its ``DeviceSpec.open``. The first
    non-None answer replaces the compiler ``open`` built: this is how a plugin swaps only the
    compiler of another backend (e.g. other C compiler flags for CPU), and ``fusegrad devices``
    says so. The compiler's ``identity`` must differ from the one it replaces, so cached
    binaries don't mix. Since API version 1; an override since API version 2.
    """


@hookspec(firstresult=True)
def fusegrad_program(device: str) -> type | None:
    """Override: return a program class to use for ``device``, or None.

    ``cls(name, binary)`` makes a callable kernel, the contract ``Runtime.program`` follows: it
    takes ``(*buffer_handles, global_size=, local_size=, vals=, wait=)`` and returns the kernel's
    time in seconds when ``wait`` is true. On grid devices ``global_size`` is the threads the
    kernel needs and ``local_size`` the threads per group (None: choose): launch whole groups
    covering ``global_size``. Called once, when the device is first opened, after its
    ``DeviceSpec.open``; the first non-None answer wins. Since API version 1; an override since
    API version 2.
    """


@hookspec
def fusegrad_rewrite_rules(stage: str, device: str) -> PatternMatcher | None:
    """Return extra rewrite rules for a named pipeline stage, or None.

    Stages: ``"kernel"`` (the kernel graph before optimisation) and ``"program"`` (the linear
    program's graph before rendering). Rules from all plugins are appended after core's, for
    devices whose name is ``device``. Called once per stage when the device is opened; the rules
    are kept on its ``Runtime`` and passed to code generation. A plugin that raises adds no
    rules, with a warning. Since API version 1.
    """


@hookspec
def fusegrad_kernel_compiled(name: str, device: str, source: str, seconds: float) -> None:
    """Called after a kernel is compiled for ``device``, with its source and the seconds it took.

    For profilers and the graph viewer. Called on every compile, also when the binary came from
    the disk cache; not when a kernel compiled earlier in the process is reused. Kernels compiled
    together (``Compiler.compile_batch``) share the batch's time evenly. Every plugin's
    implementation is called; return nothing. An exception disables this hook for your
    plugin, with a warning. Since API version 1.
    """


@hookspec
def fusegrad_kernel_run(name: str, device: str, seconds: float | None) -> None:
    """Called after each kernel launch on ``device``, with its run time in seconds.

    For profilers. ``seconds`` is None unless timing is on (``DEBUG>=2``), since measuring it
    means waiting for the kernel to finish. Every plugin's implementation is called; return
    nothing. An exception disables this hook for your plugin, with a warning.
    Since API version 1.
    """


def hook_names() -> list[str]:
    """All hook names defined here (tests check every one is documented)."""
    return [n for n, v in globals().items() if n.startswith("fusegrad_") and callable(v)]
