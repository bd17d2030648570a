"""Plugin discovery: our own loop over the ``fusegrad`` entry points, so one broken plugin
never stops the others. Runs lazily, on the first device lookup, not at ``import fusegrad``."""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from types import ModuleType
from typing import Any

import pluggy
from pluggy import HookImpl

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
    #: hooks that raised (or answered what they may not) when called, by hook name; each is
    #: disabled for this plugin after its first error
    hook_errors: dict[str, str] = field(default_factory=dict)


class PluginManager(pluggy.PluginManager):
    """pluggy's manager plus the record of what was found and what failed."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT)
        self.add_hookspecs(hookspecs)
        self.infos: list[PluginInfo] = []
        self.has_run_listeners: bool | None = None  # cached by the engine's hot path
        self._specs: dict | None = None
        # every hook call goes through _call_isolated (the attribute pluggy's own hook-call
        # monitoring replaces); pluggy's caller still serves hooks with wrappers
        self._pluggy_call = self._inner_hookexec
        self._inner_hookexec = self._call_isolated
        self._failed: set[tuple[str, str]] = set()  # (plugin, hook) never asked again

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
        _check_overrides(info, getattr(module, "FUSEGRAD_OVERRIDES", {}))
        self.register(module, name=info.name)

    def _call_isolated(
        self,
        hook_name: str,
        hook_impls: Sequence[HookImpl],
        caller_kwargs: Mapping[str, object],
        firstresult: bool,
    ) -> object:
        """Call ``hook_impls`` as pluggy would, but a plugin that raises only loses its own
        answer: it is warned about, recorded for ``fusegrad devices``, and never asked that
        hook again. Wrappers need pluggy's own caller (and lose the isolation)."""
        if any(impl.hookwrapper or impl.wrapper for impl in hook_impls):
            return self._pluggy_call(hook_name, hook_impls, caller_kwargs, firstresult)
        results: list[object] = []
        for impl in reversed(hook_impls):  # pluggy's order: tryfirst, then the latest registered
            if self._failed and (impl.plugin_name, hook_name) in self._failed:
                continue
            try:
                result = impl.function(*[caller_kwargs[name] for name in impl.argnames])
            except Exception as e:  # noqa: BLE001 - one broken plugin must not break the core
                self.hook_failed(impl.plugin_name, hook_name, f"{type(e).__name__}: {e}")
                continue
            if result is not None:
                if firstresult:
                    return result
                results.append(result)
        return None if firstresult else results

    def hook_failed(self, plugin: str, hook: str, error: str) -> None:
        """Record that ``plugin`` failed in ``hook``, warn once, and stop asking it that hook."""
        self._info(plugin).hook_errors[hook] = error
        self._failed.add((plugin, hook))
        warnings.warn(
            f"fusegrad plugin {plugin!r} failed in {hook} and is no longer asked it: {error}",
            stacklevel=3,
        )

    def _info(self, plugin: str) -> PluginInfo:
        found = next((info for info in self.infos if info.name == plugin), None)
        if found is None:  # registered by hand (tests), not discovered
            found = PluginInfo(plugin, "?", "?", "?")
            self.infos.append(found)
        return found

    def device_owner(self, device: str) -> str:
        """The name of the plugin that offers ``device`` (``"OPENCL:1"`` -> ``"opencl"``)."""
        base = device.partition(":")[0]
        return next((info.name for info in self.infos if base in info.devices), "?")

    def part_overrides(self, device: str, parts: tuple[str, ...]) -> dict[str, tuple[str, Any]]:
        """Which of ``device``'s ``parts`` (``hookspecs.PARTS``) plugins replace, each as (plugin
        name, part).

        Asks the override hooks ``fusegrad_<part>`` in pluggy's order (``tryfirst`` first); the
        first answer that is not None wins, and its plugin is named so it can be shown. A hook
        that raises, or answers for another plugin's device without declaring the override in
        ``FUSEGRAD_OVERRIDES``, is skipped, warned about and asked no more.
        """
        found: dict[str, tuple[str, Any]] = {}
        for part in parts:
            hook = f"fusegrad_{part}"
            for impl in reversed(getattr(self.hook, hook).get_hookimpls()):
                plugin = impl.plugin_name
                if impl.hookwrapper or impl.wrapper or (plugin, hook) in self._failed:
                    continue
                try:
                    answer = impl.function(device=device)
                except Exception as e:  # noqa: BLE001 - the device keeps its own part
                    self.hook_failed(plugin, hook, f"{type(e).__name__}: {e}")
                    continue
                if answer is not None and not self._may_override(plugin, part, device):
                    self.hook_failed(plugin, hook, self._undeclared(plugin, part, device))
                elif answer is not None and (lacking := _lacking(part, answer)):
                    self.hook_failed(
                        plugin,
                        hook,
                        f"answered a {part} ({type(answer).__name__}) without {lacking}; "
                        f"refused: return an object with the {part}'s methods (see "
                        "docs/backend-guide.md)",
                    )
                elif answer is not None:
                    found[part] = (plugin, answer)
                    break
        return found

    def _may_override(self, plugin: str, part: str, device: str) -> bool:
        """Whether ``plugin`` owns ``device`` or declared that it replaces this part of it."""
        base = device.partition(":")[0]
        if self.device_owner(device) == plugin:
            return True
        declared = getattr(self.get_plugin(plugin), "FUSEGRAD_OVERRIDES", {})
        return part in declared.get(base, ())

    def _undeclared(self, plugin: str, part: str, device: str) -> str:
        base = device.partition(":")[0]
        return (
            f"answered the {part} of {device}, which plugin {self.device_owner(device)!r} "
            f"offers, without declaring the override; refused. Set FUSEGRAD_OVERRIDES = "
            f"{{{base!r}: [{part!r}]}} in plugin {plugin!r} if it means to replace it"
        )

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


#: What each part must have (the device contract in device.py): methods, or being callable
PART_METHODS = {
    "allocator": ("alloc", "free", "copyin", "copyout"),
    "renderer": ("render",),
    "compiler": ("compile", "compile_cached", "compile_cached_batch"),
}


def _lacking(part: str, answer: object) -> str:
    """The methods an override's answer for ``part`` lacks, as text ("" when none)."""
    if part == "program":
        return "" if callable(answer) else "being callable"
    missing = [m for m in PART_METHODS.get(part, ()) if not callable(getattr(answer, m, None))]
    return ", ".join(f"{m}()" for m in missing)


def _check_overrides(info: PluginInfo, declared: object) -> None:
    """``FUSEGRAD_OVERRIDES`` must map device names to the parts a plugin replaces."""
    ok = isinstance(declared, dict) and all(
        isinstance(device, str)
        and isinstance(parts, list | tuple | set | frozenset)
        and all(part in hookspecs.PARTS for part in parts)
        for device, parts in declared.items()
    )
    if not ok:
        raise PluginError(
            f"plugin {info.name!r}: FUSEGRAD_OVERRIDES must map a device name to the parts it "
            f"replaces, each one of {', '.join(hookspecs.PARTS)} (e.g. {{'CPU': ['compiler']}}); "
            f"found {declared!r}"
        )


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
