"""Plugin discovery: our own loop over the ``fusegrad`` entry points, so one broken plugin
never stops the others. Runs lazily, on the first device lookup, not at ``import fusegrad``."""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType

import pluggy

from fusegrad.errors import PluginError
from fusegrad.plugin import hookspecs


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
        self.rule_cache: dict = {}  # (stage, device) -> rewrite rules, built by codegen once
        self._specs: dict | None = None

    def load_module(self, info: PluginInfo, module: ModuleType) -> None:
        """Register a plugin module after checking its declared backend API version."""
        api = getattr(module, "FUSEGRAD_BACKEND_API", None)
        info.api_version = api
        if api is None:
            raise PluginError(
                f"{info.module} does not say which backend API version it was built for; "
                f"this fusegrad speaks version {hookspecs.BACKEND_API_VERSION}: set "
                f"FUSEGRAD_BACKEND_API = {hookspecs.BACKEND_API_VERSION} in it if it was made for that"
            )
        if api != hookspecs.BACKEND_API_VERSION:
            raise PluginError(
                f"built for backend API version {api}, but this fusegrad speaks version "
                f"{hookspecs.BACKEND_API_VERSION}; install a {info.distribution} release made for it"
            )
        self.register(module, name=info.name)

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
    from fusegrad.device import Device
    from fusegrad.engine import realize

    _manager = None
    Device._open.clear()
    Device._default = None
    realize._runners.clear()
    realize._plans.clear()
