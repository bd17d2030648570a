"""Plugin discovery: our own loop over the ``fusegrad`` entry points, so one broken plugin
never stops the others. Runs lazily, on the first device lookup, not at ``import fusegrad``."""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any

import pluggy

from fusegrad import caches
from fusegrad.codegen.rules import CodegenRules
from fusegrad.errors import PluginError
from fusegrad.plugin import hookspecs

#: What a plugin built for an older backend API version must change, by that version.
UPGRADES = {
    1: "version 2 replaced the hooks fusegrad_allocator/renderer/compiler/program, which every "
    "backend answered for its own device, with DeviceSpec(..., open=f), where f(name) returns "
    "the device's Runtime; those hooks now only override a part of another plugin's device. "
    "Give each DeviceSpec an open= (see docs/backend-guide.md) and set FUSEGRAD_BACKEND_API = 2",
}


@dataclass
class PluginInfo:
    """What ``fusegrad devices`` shows about one plugin."""

    name: str
    module: str
    distribution: str
    version: str
    api_version: int | None = None
    error: str | None = None
    devices: list[str] = field(default_factory=list)


class PluginManager(pluggy.PluginManager):
    """pluggy's manager plus the record of what was found and what failed."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        self.add_hookspecs(hookspecs)
        self.infos: list[PluginInfo] = []
        self.has_run_listeners: bool | None = None  # cached by the engine's hot path
        self._specs: dict | None = None

    def load_module(self, info: PluginInfo, module: ModuleType) -> None:
        """Register a plugin module after checking its declared backend API version."""
        api = getattr(module, "FUSEGRAD_BACKEND_API", None)
        info.api_version = api
        if api is None:
            raise PluginError(
                f"{info.module} does not say which backend API version it was built for; "
                f"this fusegrad speaks version {hookspecs.BACKEND_API_VERSION}: set "
                f"FUSEGRAD_BACKEND_API = {hookspecs.BACKEND_API_VERSION} in it if it was made "
                "for that"
            )
        if api != hookspecs.BACKEND_API_VERSION:
            raise PluginError(_version_mismatch(info, api))
        self.register(module, name=info.name)

    def device_owner(self, device: str) -> str:
        """The name of the plugin that offers ``device`` (``"OPENCL:1"`` -> ``"opencl"``)."""
        base = device.partition(":")[0]
        return next((info.name for info in self.infos if base in info.devices), "?")

    def part_overrides(self, device: str, parts: tuple[str, ...]) -> dict[str, tuple[str, Any]]:
        """Which of ``device``'s ``parts`` (``device.PARTS``) plugins replace, each as (plugin
        name, part).

        Asks the override hooks ``fusegrad_<part>`` in pluggy's order (``tryfirst`` first); the
        first answer that is not None wins, and its plugin is named so it can be shown.
        """
        found: dict[str, tuple[str, Any]] = {}
        for part in parts:
            for impl in reversed(getattr(self.hook, f"fusegrad_{part}").get_hookimpls()):
                if impl.hookwrapper or getattr(impl, "wrapper", False):
                    continue
                try:
                    answer = impl.function(device=device)
                except Exception as e:
                    raise PluginError(
                        f"plugin {impl.plugin_name!r} failed in fusegrad_{part}(device={device!r})"
                        f": {type(e).__name__}: {e}"
                    ) from e
                if answer is not None:
                    found[part] = (impl.plugin_name, answer)
                    break
        return found

    def codegen_rules(self, device: str) -> CodegenRules:
        """Core's rewrite rules plus every plugin's for ``device`` (hook
        ``fusegrad_rewrite_rules``), asked once, when the device is opened."""
        return CodegenRules.with_plugins(
            self.hook.fusegrad_rewrite_rules(stage="kernel", device=device),
            self.hook.fusegrad_rewrite_rules(stage="program", device=device),
        )

    def device_specs(self) -> dict:
        """Every device every plugin announced, by name (first announcement wins)."""
        if self._specs is None:
            specs: dict = {}
            for info in self.infos:
                if info.error is not None:
                    continue
                module = self.get_plugin(info.name)
                impl = getattr(module, "fusegrad_devices", None)
                if impl is None:
                    continue
                try:
                    announced = list(impl() or [])
                except Exception as e:  # noqa: BLE001 - a broken plugin must not break the others
                    info.error = f"fusegrad_devices raised {type(e).__name__}: {e}"
                    warnings.warn(f"fusegrad plugin {info.name!r}: {info.error}", stacklevel=2)
                    self.unregister(name=info.name)  # its other hooks must not answer either
                    continue
                for spec in announced:
                    if spec.name in specs:
                        warnings.warn(
                            f"fusegrad plugin {info.name!r} also offers device {spec.name!r}; "
                            "the first plugin to offer it keeps it",
                            stacklevel=2,
                        )
                        continue
                    specs[spec.name] = spec
                    info.devices.append(spec.name)
            self._specs = specs
        return self._specs


def _version_mismatch(info: PluginInfo, api: object) -> str:
    """Why a plugin built for backend API version ``api`` is refused, and what to change."""
    speaks = hookspecs.BACKEND_API_VERSION
    message = (
        f"plugin {info.name!r} ({info.distribution} {info.version}) is built for backend API "
        f"version {api}, but this fusegrad speaks version {speaks}"
    )
    if isinstance(api, int) and api in UPGRADES:
        return f"{message}: {UPGRADES[api]}, or install a {info.distribution} release made for it"
    return f"{message}; install a {info.distribution} release made for version {speaks}"


def _builtin_plugins() -> list[tuple[str, str, str]]:
    return [("python", "fusegrad.runtime.python_plugin", "fusegrad")]


_manager: PluginManager | None = None


def discover() -> PluginManager:
    """Load every plugin: the built-in ones, then each entry point in the group ``fusegrad``."""
    pm = PluginManager()
    candidates: list[tuple[str, str, str, str | None]]
    candidates = [(n, m, d, None) for n, m, d in _builtin_plugins()]
    for ep in metadata.entry_points(group=hookspecs.PROJECT):
        dist = ep.dist.name if ep.dist is not None else "?"
        version = ep.dist.version if ep.dist is not None else "?"
        candidates.append((ep.name, ep.value, dist, version))
    for name, target, dist, known_version in candidates:
        info = PluginInfo(name, target, dist, known_version or _version_of(dist))
        pm.infos.append(info)
        if pm.has_plugin(name):
            info.error = f"another plugin is already registered as {name!r}"
            continue
        try:
            pm.load_module(info, _load(target))
        except Exception as e:  # noqa: BLE001 - recorded, warned, and shown by `fusegrad devices`
            if pm.get_plugin(name) is not None:
                pm.unregister(name=name)  # pluggy keeps the hooks it registered before failing
            info.error = f"{type(e).__name__}: {e}"
            warnings.warn(
                f"fusegrad plugin {name!r} ({dist}) was not loaded: {info.error}", stacklevel=2
            )
    return pm


def _load(target: str) -> ModuleType:
    """Import an entry point's target, ``package.module`` or ``package.module:object``."""
    module, _, attribute = target.partition(":")
    loaded = importlib.import_module(module.strip())
    for name in filter(None, attribute.strip().split(".")):
        loaded = getattr(loaded, name)
    return loaded


def _version_of(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def plugins() -> PluginManager:
    """The process's plugin manager, discovered on first use."""
    global _manager
    if _manager is None:
        _manager = discover()
    return _manager


def reset() -> None:
    """Forget discovered plugins, opened devices and the kernels compiled for them.

    Tests that install plugins use it. Compiled kernels hold the previous devices' programs, so
    they are forgotten too, or a replaced compiler would never be asked.
    """
    global _manager
    _manager = None
    caches.reset()
