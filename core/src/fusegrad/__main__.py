"""The ``fusegrad`` command: ``fusegrad devices`` shows the plugins found, their devices, why
a device cannot be used, and which plugin supplies each part of a device (loudly when a plugin
replaces a part of another plugin's device). Also run as ``python -m fusegrad devices``.
The other verbs (``chat``, ``onnx``, ``cache``, ``profile``, ``export-web``, ``viz``) live in
their own modules; ``fusegrad --help`` lists them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from typing import Any

import fusegrad
from fusegrad.commands import add_cache_command, add_export_web_command, add_profile_command
from fusegrad.device import PARTS, Device, DeviceSpec
from fusegrad.errors import FusegradError
from fusegrad.models.chat import add_chat_command

try:  # the `onnx` command needs the onnx package (pip install fusegrad[onnx])
    from fusegrad.nn.onnx_cli import add_onnx_command

    ONNX_MISSING = ""
except ImportError as missing:
    ONNX_MISSING = str(missing)
from fusegrad.plugin.hookspecs import BACKEND_API_VERSION
from fusegrad.plugin.manager import PluginInfo, PluginManager, plugins
from fusegrad.viz.server import add_viz_command


def dev_strings(spec: DeviceSpec) -> list[str]:
    """The ``DEV=`` settings that select each instance of ``spec``: ``DEV=CPU``,
    ``DEV=OPENCL:1``."""
    return [f"DEV={spec.name}"] + [f"DEV={spec.name}:{i}" for i in range(1, spec.instances())]


def survey() -> dict[str, Any]:
    """Everything ``fusegrad devices`` reports, as plain data (also the ``--json`` output)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # plugin errors are reported below, each in its place
        pm = plugins()
        specs = pm.device_specs()
        default, default_error = _default()  # first: it records the devices that fail to open
    devices = []
    for info in pm.infos:
        for name in info.devices:
            spec = specs[name]
            why = spec.unavailable()
            devices.append(
                {
                    "name": name,
                    "plugin": info.name,
                    "priority": spec.priority,
                    "count": spec.instances(),
                    "available": why is None,
                    "reason": why,
                    "hardware": _describe(spec) if why is None else None,
                    "dev": dev_strings(spec),
                    "open_error": Device.open_errors.get(name),
                    **_parts_record(pm, name, info.name, usable=why is None),
                }
            )
    return {
        "fusegrad_version": fusegrad.__version__,
        "backend_api_version": BACKEND_API_VERSION,
        "plugins": [_plugin_record(info) for info in pm.infos],
        "devices": devices,
        "default": default,
        "default_from": "DEV" if os.environ.get("DEV") else "priority",
        "default_error": default_error,
    }


def _describe(spec: DeviceSpec) -> str | None:
    """The plugin's line naming the hardware behind ``spec`` (a WebGPU adapter), if it has one."""
    if spec.describe is None:
        return None
    try:
        return spec.describe()
    except Exception as e:  # noqa: BLE001 - a broken plugin must not hide the others
        return f"unknown ({type(e).__name__}: {e})"


def _default() -> tuple[str | None, str | None]:
    """The default device, or None and why there is none."""
    try:
        return Device.DEFAULT, None
    except FusegradError as e:
        return None, str(e)


def _parts_record(pm: PluginManager, device: str, owner: str, usable: bool) -> dict[str, Any]:
    """Who supplies each part of ``device``: its plugin, unless an override hook answers.

    Asks the override hooks as opening the device would, without opening it (nothing of the
    device's own runtime is loaded). None for a device that cannot be used here.
    """
    if not usable:
        return {"parts": None, "overrides": [], "parts_error": None}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a failing hook is shown in its plugin's block
            found = pm.part_overrides(device, PARTS)
    except FusegradError as e:
        return {"parts": None, "overrides": [], "parts_error": str(e)}
    parts = dict.fromkeys(PARTS, owner) | {part: plugin for part, (plugin, _) in found.items()}
    overrides = [
        {"part": part, "plugin": plugin, "replaces": owner}
        for part, plugin in parts.items()
        if plugin != owner
    ]
    return {"parts": parts, "overrides": overrides, "parts_error": None}


def _plugin_record(info: PluginInfo) -> dict[str, Any]:
    return {
        "name": info.name,
        "distribution": info.distribution,
        "version": info.version,
        "module": info.module,
        "api_version": info.api_version,
        "error": info.error,
        "hook_errors": dict(info.hook_errors),
        "devices": list(info.devices),
    }


def format_survey(report: dict[str, Any]) -> str:
    """The survey as text: one block per plugin, its devices indented under it."""
    api = report["backend_api_version"]
    lines = [f"fusegrad {report['fusegrad_version']} (backend API version {api})", "", "plugins:"]
    for plugin in report["plugins"]:
        declared = plugin["api_version"] if plugin["api_version"] is not None else "none"
        lines.append(
            f"  {plugin['name']}: {plugin['distribution']} {plugin['version']}, "
            f"module {plugin['module']}, built for backend API version {declared}"
        )
        if plugin["error"] is not None:
            lines.append(_indent(f"error: {plugin['error']}", 6))
        for hook, error in plugin["hook_errors"].items():
            lines.append(_indent(f"error in {hook}: {error}", 6))
        for device in (d for d in report["devices"] if d["plugin"] == plugin["name"]):
            lines.append(_device_line(device, report["default"]))
        replaced = [
            f"the {o['part']} of {d['name']}"
            for d in report["devices"]
            for o in d["overrides"]
            if o["plugin"] == plugin["name"]
        ]
        if plugin["error"] is None and not plugin["devices"]:
            overrides = f"; OVERRIDES {', '.join(replaced)}" if replaced else ""
            lines.append(f"      (offers no devices{overrides})")
    lines += _override_warnings(report)
    lines += ["", _default_line(report)]
    return "\n".join(lines)


def _override_warnings(report: dict[str, Any]) -> list[str]:
    """One loud line per part a plugin replaces on another plugin's device."""
    found = [(d, o) for d in report["devices"] for o in d["overrides"]]
    if not found:
        return []
    lines = ["", "overrides (a plugin replaces part of another plugin's device):"]
    for device, o in found:
        plugin, part, owner = o["plugin"], o["part"], o["replaces"]
        lines.append(
            f"  WARNING: plugin {plugin!r} replaces the {part} of {device['name']} "
            f"(offered by {owner!r}); uninstall it to use the {part} of {owner!r}"
        )
    return lines


def _device_line(device: dict[str, Any], default: str | None) -> str:
    state = "available" if device["available"] else "unavailable"
    mark = (
        "  (default)" if default is not None and default.partition(":")[0] == device["name"] else ""
    )
    line = f"      {device['name']:<10} priority {device['priority']:<4} {state:<12} "
    line += "  ".join(device["dev"]) + mark
    if device.get("hardware"):
        line += "\n" + _indent(f"hardware: {device['hardware']}", 10)
    if not device["available"]:
        line += "\n" + _indent(f"why: {device['reason']}", 10)
    if device["open_error"] is not None:
        line += "\n" + _indent(f"cannot be opened: {device['open_error']}", 10)
    if device["parts_error"] is not None:
        line += "\n" + _indent(f"parts: unknown, {device['parts_error']}", 10)
    if device["parts"] is not None:
        line += "\n" + _indent(f"parts: {_parts_line(device)}", 10)
    return line


def _parts_line(device: dict[str, Any]) -> str:
    """``allocator, renderer, program from cpu; compiler from other (OVERRIDE)``."""
    by_plugin: dict[str, list[str]] = {}
    for part, plugin in device["parts"].items():
        by_plugin.setdefault(plugin, []).append(part)
    return "; ".join(
        f"{', '.join(parts)} from {plugin}" + ("" if plugin == device["plugin"] else " (OVERRIDE)")
        for plugin, parts in by_plugin.items()
    )


def _default_line(report: dict[str, Any]) -> str:
    if report["default"] is None:
        return f"default device: none ({report['default_error']})"
    if report["default_from"] == "DEV":
        return f"default device: {report['default']} (chosen by DEV)"
    return (
        f"default device: {report['default']} "
        "(the available device of highest priority; set DEV=NAME to choose another)"
    )


def _indent(text: str, spaces: int) -> str:
    return "\n".join(" " * spaces + line for line in str(text).splitlines() or [""])


def devices_command(args: argparse.Namespace) -> int:
    """``fusegrad devices [--json]``."""
    report = survey()
    print(json.dumps(report, indent=2) if args.json else format_survey(report))
    return 0


def onnx_missing(args: argparse.Namespace) -> int:
    """``fusegrad onnx`` without the onnx package: say how to get it."""
    print(
        f"fusegrad onnx needs the onnx package ({ONNX_MISSING}); "
        "install it with: pip install 'fusegrad[onnx]'",
        file=sys.stderr,
    )
    return 1


def make_parser() -> argparse.ArgumentParser:
    """The command line: ``fusegrad <command> [options]``."""
    parser = argparse.ArgumentParser(
        prog="fusegrad",
        description="fusegrad: lazy tensors, fused kernels, every device a plugin.",
    )
    parser.add_argument("--version", action="version", version=f"fusegrad {fusegrad.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="command")
    devices = commands.add_parser(
        "devices",
        help="list the plugins found, their devices, and which one is the default",
        description="List every plugin found (and why one failed to load), the devices it "
        "offers, whether each can be used here, and the DEV= setting that selects it.",
    )
    devices.add_argument("--json", action="store_true", help="print machine-readable JSON")
    devices.set_defaults(run=devices_command)
    add_chat_command(commands)
    add_cache_command(commands)
    add_profile_command(commands)
    add_export_web_command(commands)
    add_viz_command(commands)
    if not ONNX_MISSING:
        add_onnx_command(commands)
    else:
        onnx = commands.add_parser("onnx", help="run an ONNX model (needs fusegrad[onnx])")
        onnx.add_argument("rest", nargs=argparse.REMAINDER)
        onnx.set_defaults(run=onnx_missing)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``fusegrad`` command with ``argv`` (default ``sys.argv[1:]``); return the exit
    code."""
    parser = make_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return args.run(args)
    except BrokenPipeError:
        # the reader stopped reading (`fusegrad devices --json | head -1`): end quietly, with
        # Python's exit code for it; stdout goes to devnull so that its final flush fails not
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
