"""Buffers, the four objects a backend provides, and the ``Device`` registry.

A backend provides an ``Allocator`` (memory), a ``Renderer`` (linear UOps -> source), a
``Compiler`` (source -> bytes) and a ``Program`` class (bytes -> callable). Its ``DeviceSpec``
builds them, as a ``Runtime``, with ``open(name)`` the first time ``Device[name]`` is used; then
any plugin may replace one of them through the override hooks (see ``plugin/hookspecs.py``).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import os
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from fusegrad import caches, profiler
from fusegrad.codegen.rules import CORE_RULES, CodegenRules
from fusegrad.dtype import DType
from fusegrad.errors import CompileError, DeviceNotFound, DeviceUnavailable, PluginError
from fusegrad.kernel_cache import entry_path, evict, read_entry, write_entry

if TYPE_CHECKING:
    from fusegrad.plugin.manager import PluginManager
    from fusegrad.renderer import Renderer

#: The parts of an opened device (``Runtime``); each is also an override hook ``fusegrad_<part>``
#: (``plugin.hookspecs.PARTS``, kept equal by a test: importing that module would load pluggy).
PARTS = ("allocator", "renderer", "compiler", "program")


class Allocator:
    """Device memory. Subclasses implement the four methods; handles are opaque to core."""

    def alloc(self, nbytes: int) -> Any:
        raise NotImplementedError

    def free(self, handle: Any, nbytes: int) -> None:
        """Release memory; the default lets the garbage collector do it."""

    def alloc_zeroed(self, nbytes: int) -> Any:
        """Memory of ``nbytes`` zeros. The default writes them; a backend whose fresh memory
        comes zeroed (host pages from the operating system) returns it as it is, so that the
        parts never written cost no memory."""
        handle = self.alloc(nbytes)
        self.copyin(handle, memoryview(bytes(nbytes)))
        return handle

    def copyin(self, handle: Any, src: memoryview) -> None:
        raise NotImplementedError

    def copyout(self, dest: memoryview, handle: Any) -> None:
        raise NotImplementedError

    def transfer(self, dest: Any, source: Allocator, handle: Any, nbytes: int) -> bool:
        """Optional direct copy between devices: copy ``nbytes`` from ``handle``, memory of
        allocator ``source`` (another device's, maybe another backend's), into ``dest``, one of
        this allocator's handles, and return True; return False where this backend has no
        direct path from ``source``, and core copies through host memory (``copyout`` then
        ``copyin``). Called for every copy between devices (``Tensor.to``, sharding)."""
        return False


class Compiler:
    """Turns source into bytes. ``compile_cached`` keeps results on disk, keyed by source +
    identity."""

    #: Changes whenever the output for the same source would change (compiler version, flags).
    identity: str = ""
    #: Set False for compilers too cheap to be worth a disk round trip (the PYTHON device's).
    disk_cache: bool = True

    def compile(self, source: str) -> bytes:
        raise NotImplementedError

    def compile_batch(self, sources: list[str]) -> list[bytes | CompileError]:
        """Compile several sources; each one's bytes, or the ``CompileError`` it raised.

        The default compiles them one at a time. A compiler that can build several kernels for
        the price of one (one C translation unit) overrides it; each result must still work
        on its own, since it is cached under its own source.
        """
        results: list[bytes | CompileError] = []
        for source in sources:
            try:
                results.append(self.compile(source))
            except CompileError as e:
                results.append(e)
        return results

    def compile_cached(self, source: str) -> bytes:
        """Compile, or read a previous result; entries are written atomically, never half, and
        checked when read (``kernel_cache``): a bad one is deleted and compiled again."""
        (result,) = self.compile_cached_batch([source])
        if isinstance(result, CompileError):
            raise result
        return result

    def compile_cached_batch(self, sources: list[str]) -> list[bytes | CompileError]:
        """``compile_cached`` for several sources: the ones not on disk go to one ``compile_batch``.

        Each result is stored under its own source's key, and only once it compiled: a source
        that fails stores nothing and leaves the others' entries alone.
        """
        if not self._uses_disk_cache():
            return self.compile_batch(sources)
        keys = [self._cache_key(source) for source in sources]
        stored = [read_entry(key) for key in keys]  # each checked: a bad entry is a miss
        missing = [source for source, binary in zip(sources, stored) if binary is None]
        built = iter(self.compile_batch(missing) if missing else [])
        results: list[bytes | CompileError] = []
        for key, binary in zip(keys, stored):
            if binary is None:
                result = next(built)
                if isinstance(result, bytes):
                    write_entry(key, result)
                results.append(result)
            else:
                results.append(binary)
        return results

    def evict(self, source: str, why: str) -> bool:
        """Forget the disk cache's entry for ``source`` (it did not load); False if none is kept."""
        if not self._uses_disk_cache():
            return False
        key = self._cache_key(source)
        if not os.path.exists(entry_path(key)):
            return False
        evict(key, why)
        return True

    def _uses_disk_cache(self) -> bool:
        """Whether results go through the disk cache (read each time: tests turn it off)."""
        return self.disk_cache and not os.environ.get("FUSEGRAD_DISABLE_CACHE")

    def _cache_key(self, source: str) -> str:
        """The sha256 (hex) an entry is stored under: the compiler's identity and the source."""
        return hashlib.sha256(f"{self.identity}\0{source}".encode()).hexdigest()


class Program(Protocol):
    """A compiled kernel: ``Program(name, binary)`` then ``program(*handles, ...)``."""

    def __call__(
        self,
        *buffers: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None: ...


def whole_groups(global_size: tuple[int, ...] | None, group: int) -> tuple[int, int]:
    """(groups, threads per group) covering a flat ``global_size`` (one thread when None) in
    whole groups of at most ``group``: the launch of a kernel whose renderer sets ``guard_grid``."""
    n = global_size[0] if global_size else 1
    threads = min(n, group)
    return (n + threads - 1) // threads, threads


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """A device a plugin offers: its name, its priority for ``Device.DEFAULT``, a probe, and
    the factory that opens it.

    ``probe()`` returns None when the device can be used here, else the reason it cannot
    ("pyopencl not installed"). It runs lazily: ``Device.DEFAULT`` probes devices from the
    highest priority down and stops at the first usable one, so a probe may import its runtime.
    ``count`` (how many instances: NAME, NAME:1, ...) may be a function, asked when needed.
    ``open(name)`` returns the ``Runtime`` of instance ``name`` (``"OPENCL:1"``); it is called
    once per instance, the first time it is used, and is where the runtime library is imported.
    ``describe()`` (optional) names the hardware behind a usable device in a line ("llvmpipe
    (LLVM 15.0.6), Vulkan"), for ``fusegrad devices``; it is asked only after the probe said yes.
    """

    name: str
    priority: int
    probe: Any  # Callable[[], str | None]
    count: Any = 1  # int, or Callable[[], int]
    open: Any = None  # Callable[[str], Runtime]; required to use the device (backend API 2)
    describe: Any = None  # Callable[[], str | None]

    def instances(self) -> int:
        """How many devices of this kind there are (``count``, called if it is a function)."""
        return self.count() if callable(self.count) else self.count

    def unavailable(self) -> str | None:
        """Run the probe: None when usable, else why not. A probe that raises counts as a "no",
        and so does one that does not answer within ``FUSEGRAD_PROBE_TIMEOUT`` seconds (it goes
        on in its thread; asked again meanwhile, the answer is the same "no" at once)."""
        waiting = _HUNG_PROBES.get(self.probe)
        if waiting is not None and waiting.is_alive():
            return _no_answer()
        answer: list[str | None] = []

        def ask() -> None:
            try:
                answer.append(self.probe())
            except Exception as e:  # noqa: BLE001 - one broken probe must not hide the others
                answer.append(f"its availability probe raised {type(e).__name__}: {e}")

        thread = threading.Thread(target=ask, name=f"probe {self.name}", daemon=True)
        thread.start()
        thread.join(_probe_timeout())
        if not answer:
            _HUNG_PROBES[self.probe] = thread
            return _no_answer()
        return answer[0]


#: probes still running past their time (by probe function): not asked again while they run
_HUNG_PROBES: dict[Any, threading.Thread] = {}
#: seconds a probe may take, unless ``FUSEGRAD_PROBE_TIMEOUT`` says otherwise (a cold GPU driver
#: can take several seconds to answer the first time)
PROBE_TIMEOUT = 10.0


def _probe_timeout() -> float:
    """``FUSEGRAD_PROBE_TIMEOUT`` in seconds; ``PROBE_TIMEOUT`` when unset or not a number."""
    try:
        return float(os.environ.get("FUSEGRAD_PROBE_TIMEOUT", PROBE_TIMEOUT))
    except ValueError:
        return PROBE_TIMEOUT


def _no_answer() -> str:
    """Why a probe still running past its time counts as "unavailable", and what to set."""
    return (
        f"its availability probe did not answer within {_probe_timeout():g} s (a hung driver?); "
        "set FUSEGRAD_PROBE_TIMEOUT to wait longer"
    )


@dataclass
class Runtime:
    """An opened device: the four backend objects, and what core adds when it opens one."""

    name: str
    allocator: Allocator
    renderer: Renderer
    compiler: Compiler
    program: type
    #: codegen's rewrite rules for this device, the plugins' included (set when it is opened)
    rules: CodegenRules = CORE_RULES
    #: the plugin that supplied each part, by part name ("compiler": "cpu"), set when opened
    suppliers: dict[str, str] = field(default_factory=dict)


class Buffer:
    """A 1-d array of ``size`` elements of ``dtype`` on ``device``; memory is allocated on first
    use."""

    __slots__ = (
        "device",
        "size",
        "dtype",
        "zeroed",
        "version",
        "replaced_at",
        "prefer",
        "_handle",
        "_allocator",
        "__weakref__",
    )
    #: how many times a tensor has let go of its buffer for another value (``mark_replaced``)
    replacements = 0

    def __init__(self, device: str, size: int, dtype: DType, zeroed: bool = False, prefer: int = 0):
        self.device, self.size, self.dtype = device, size, dtype
        #: allocated as zeros (``Allocator.alloc_zeroed``), not from the pool of freed memory
        self.zeroed = zeroed
        #: counts the writes into this buffer (copyin, kernel launches): TinyJit re-runs a
        #: launch it keeps from one replay to the next when a buffer it reads has changed
        self.version = 0
        #: ``replacements`` when a tensor last let go of this buffer; 0 if none ever did
        self.replaced_at = 0
        #: ``id`` of the freed memory to take back first, if the pool still has it (a plan asks
        #: for what the same buffer of its last run had: ``run_plan``); 0: none in particular
        self.prefer = prefer
        self._handle: Any = None
        self._allocator: Allocator | None = None

    def __repr__(self) -> str:
        return f"<Buffer {self.device} {self.dtype.name}[{self.size}]>"

    def mark_replaced(self) -> None:
        """A tensor that held this buffer holds another value now (a whole-tensor ``assign``, a
        loaded state dict, not written in place): TinyJit captures that read this buffer
        through that tensor are out of date, and capture again."""
        Buffer.replacements += 1
        self.replaced_at = Buffer.replacements

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def handle(self) -> Any:
        """The backend's memory handle, allocating it on first use (reusing freed memory)."""
        if self._handle is None:
            self._allocator = allocator = Device[self.device].allocator
            nbytes = max(self.nbytes, 1)
            if self.zeroed:
                self._handle = _checked(allocator.alloc_zeroed(nbytes), nbytes, self.device)
                return self._handle
            free = _pool(allocator).get(nbytes, [])
            if self.prefer and free and (taken := _take(free, self.prefer)) is not None:
                self._handle = _reusable(taken)
                _POOLED[0] -= nbytes
            while free and self._handle is None:
                self._handle = _reusable(free.pop())
                _POOLED[0] -= nbytes
            if self._handle is None:
                self._handle = _checked(allocator.alloc(nbytes), nbytes, self.device)
        return self._handle

    @property
    def is_allocated(self) -> bool:
        return self._handle is not None

    def copyin(self, data: np.ndarray) -> Buffer:
        """Copy a host array in (its bytes must match this buffer's size)."""
        flat = np.ascontiguousarray(data).reshape(-1)
        if flat.nbytes != self.nbytes:
            raise ValueError(f"copyin of {flat.nbytes} bytes into a {self.nbytes}-byte buffer")
        if self.nbytes:
            start = time.perf_counter()
            Device[self.device].allocator.copyin(self.handle, flat.data.cast("B"))
            if (active := profiler.ACTIVE) is not None:
                active.copy("copyin", self.device, start, self.nbytes)
        self.version += 1
        return self

    def numpy(self) -> np.ndarray:
        """A host copy of the contents."""
        out = np.empty(self.size, dtype=self.dtype.np)
        if self.nbytes:
            start = time.perf_counter()
            Device[self.device].allocator.copyout(out.data.cast("B"), self.handle)
            if (active := profiler.ACTIVE) is not None:
                active.copy("copyout", self.device, start, self.nbytes)
        return out

    def __del__(self) -> None:
        if self._handle is not None and self._allocator is not None:
            try:
                if gc.is_finalized(self._handle):
                    return  # released by its own finalizer (see ``_reusable``): not freed again
                nbytes = max(self.nbytes, 1)
                if _POOLED[0] + nbytes <= POOL_LIMIT:  # keep it: the next buffer this size takes it
                    _pool(self._allocator).setdefault(nbytes, []).append(self._handle)
                    _POOLED[0] += nbytes
                else:
                    self._allocator.free(self._handle, nbytes)
            except Exception:  # noqa: BLE001 - interpreter shutdown (``gc`` may be None by then)
                pass


def _checked(handle: Any, nbytes: int, device: str) -> Any:
    """A fresh buffer from a plugin's allocator, checked: not None and, when it is host memory
    (a buffer Python can see), writable and at least ``nbytes`` long."""
    problem = None
    if handle is None:
        problem = "returned None"
    elif isinstance(handle, (bytes, bytearray, memoryview, np.ndarray)):
        view = memoryview(handle.data if isinstance(handle, np.ndarray) else handle)
        if view.readonly:
            problem = f"handed out read-only memory ({type(handle).__name__})"
        elif view.nbytes < nbytes:
            problem = f"handed out {view.nbytes} byte(s), but {nbytes} were asked for"
    if problem is None:
        return handle
    supplier = Device[device].suppliers.get("allocator", "?")
    raise PluginError(
        f"plugin {supplier!r}: the allocator of device {device} {problem}; an allocator must "
        "return a writable buffer of at least the bytes asked for (fix or uninstall the plugin)"
    )


#: bytes of freed device memory kept for reuse; fresh memory costs page faults (or a driver call)
POOL_LIMIT = int(os.environ.get("FUSEGRAD_POOL_BYTES", 1 << 30))
_POOLED = [0]


def _take(free: list[Any], wanted: int) -> Any:
    """The handle whose ``id`` is ``wanted``, taken out of ``free``; None when ``free`` does
    not hold it. Any pooled handle of the size would do: the ``id`` only says which memory was
    this buffer's the last time (once that handle is gone its id may name another one, which is
    then taken: no harm)."""
    for i in range(len(free) - 1, -1, -1):
        if id(free[i]) == wanted:
            return free.pop(i)
    return None


def _reusable(handle: Any) -> Any:
    """``handle`` from the pool, or None when it may not be used again: a buffer collected
    with a reference cycle puts its handle in the pool while the same collection runs the
    handle's own finalizer (a wgpu buffer releases itself), in whichever order. Reusing such a
    handle once gave the next buffer of its size a dead one: a TypeError, or wgpu-native
    aborting the process."""
    return None if gc.is_finalized(handle) else handle


def _pool(allocator: Allocator) -> dict[int, list[Any]]:
    """Freed handles of ``allocator`` by size."""
    pool = allocator.__dict__.get("_fusegrad_pool")
    if pool is None:
        pool = allocator.__dict__["_fusegrad_pool"] = {}
        _POOLS.add(allocator)
    return pool


#: the allocators that have a pool
_POOLS: weakref.WeakSet[Allocator] = weakref.WeakSet()


def release_pooled_memory() -> int:
    """Give the memory the pool keeps for reuse back to each allocator, and return its bytes:
    for after a phase whose buffer sizes will not come again (a model's loading, whose
    file-sized staging copies would otherwise stay resident)."""
    released = 0
    for allocator in list(_POOLS):
        pool = _pool(allocator)
        for nbytes, handles in pool.items():
            for handle in handles:
                if not gc.is_finalized(handle):  # (see ``_reusable``)
                    allocator.free(handle, nbytes)
                released += nbytes
        pool.clear()
    _POOLED[0] = 0
    return released


class _DeviceRegistry:
    """``Device[name]`` opens a device; ``Device.DEFAULT`` is the best available one."""

    def __init__(self) -> None:
        self._open: dict[str, Runtime] = {}
        self._default: str | None = None
        #: devices that probed usable but failed to open while the default was chosen, and why
        self.open_errors: dict[str, str] = {}
        caches.register("open devices", self._forget)

    def _forget(self) -> None:
        """Open devices anew when next used, and choose the default again (plugins may have
        changed: ``plugin.manager.reset``). Nothing is closed: live buffers keep their memory."""
        self._open.clear()
        self._default = None
        self.open_errors.clear()

    def canonicalize(self, name: str) -> str:
        """``"cpu"`` -> ``"CPU"``, ``"opencl:1"`` -> ``"OPENCL:1"``, ``"CPU:0"`` -> ``"CPU"``."""
        base, _, index = name.partition(":")
        base = base.upper()
        return base if index in ("", "0") else f"{base}:{index}"

    def specs(self) -> dict[str, DeviceSpec]:
        return plugin_manager().device_specs()

    def __getitem__(self, name: str) -> Runtime:
        if (rt := self._open.get(name)) is not None:
            return rt
        canonical = self.canonicalize(name)
        if (rt := self._open.get(canonical)) is None:
            rt = self._open[canonical] = self._open_device(canonical)
        self._open[name] = rt
        return rt

    def _open_device(self, name: str) -> Runtime:
        """The runtime of ``name``: its plugin's ``open``, then other plugins' overrides."""
        spec = self._usable_spec(name)
        owner = plugin_manager().device_owner(spec.name)
        if spec.open is None:
            raise PluginError(
                f"plugin {owner!r} offers device {spec.name} but gives no way to open it; since "
                "backend API version 2 its DeviceSpec needs open=, a function from the device "
                "name to a Runtime (see docs/backend-guide.md)"
            )
        runtime = spec.open(name)
        if not isinstance(runtime, Runtime):
            raise PluginError(
                f"plugin {owner!r}: DeviceSpec.open({name!r}) returned {type(runtime).__name__}, "
                "not a fusegrad.device.Runtime"
            )
        return self._with_overrides(runtime, owner)

    def _with_overrides(self, runtime: Runtime, owner: str) -> Runtime:
        """``runtime`` with any part another plugin overrides replaced, the supplier of each
        part recorded, and the plugins' rewrite rules resolved (so codegen never asks them)."""
        pm = plugin_manager()
        suppliers = dict.fromkeys(PARTS, owner)
        parts: dict[str, Any] = {}
        for part, (plugin, value) in pm.part_overrides(runtime.name, PARTS).items():
            parts[part], suppliers[part] = value, plugin
        missing = [p for p in PARTS if parts.get(p, getattr(runtime, p)) is None]
        if missing:
            what = ", ".join(missing)
            raise PluginError(f"device {runtime.name}: plugin {owner!r} opened it without {what}")
        rules = pm.codegen_rules(runtime.name)
        return replace(runtime, **parts, rules=rules, suppliers=suppliers)

    def _usable_spec(self, name: str) -> DeviceSpec:
        """The spec of the installed, usable device ``name``, or an error saying why not."""
        base = name.partition(":")[0]
        specs = self.specs()
        if base not in specs:
            found = ", ".join(sorted(specs)) or "none"
            raise DeviceNotFound(
                f"no installed backend provides {base!r} (found: {found}); "
                f"install it with `pip install fusegrad[{base.lower()}]` or run `fusegrad devices`"
            )
        spec = specs[base]
        if (why := spec.unavailable()) is not None:
            raise DeviceUnavailable(f"device {base} is installed but cannot be used here: {why}")
        index = name.partition(":")[2] or "0"
        count = spec.instances()
        if not index.isdigit() or int(index) >= count:
            numbers = ", ".join([base] + [f"{base}:{i}" for i in range(1, count)])
            raise DeviceNotFound(
                f"no device {name!r}: {base} has {count} device(s) here (valid names: {numbers})"
            )
        return spec

    def _best_openable(self) -> str:
        """The usable device of highest priority that opens (probing only until one does); one
        that probes usable but fails to open is passed over with a warning (``open_errors``)."""
        for spec in sorted(self.specs().values(), key=lambda s: -s.priority):
            if spec.unavailable() is not None:
                continue
            try:
                self[spec.name]
            except Exception as e:  # noqa: BLE001 - a broken driver must not hide the others
                self.open_errors[spec.name] = f"{type(e).__name__}: {e}"
                warnings.warn(
                    f"device {spec.name} probes available but cannot be opened "
                    f"({self.open_errors[spec.name]}); choosing the next device",
                    stacklevel=4,
                )
                continue
            return spec.name
        raise DeviceNotFound("no device is available; run `fusegrad devices` to see why")

    @property
    def DEFAULT(self) -> str:  # noqa: N802 - tinygrad-compatible name
        """``DEV=NAME[:N]`` if set, else the available device of highest priority."""
        if self._default is None:
            if dev := os.environ.get("DEV"):
                name = self.canonicalize(dev)
                try:
                    self[name]  # fail now, clearly, if it cannot be opened
                except (DeviceNotFound, DeviceUnavailable) as e:
                    raise type(e)(f"DEV={dev}: {e}") from None
                self._default = name  # only once it is known to work
            else:
                self._default = self._best_openable()
        return self._default

    @DEFAULT.setter
    def DEFAULT(self, name: str) -> None:  # noqa: N802
        self[name]
        self._default = self.canonicalize(name)


def plugin_manager() -> PluginManager:
    """The plugin manager, discovered on first use."""
    return _plugins()()


@functools.cache
def _plugins() -> Callable[[], PluginManager]:
    """``fusegrad.plugin.manager.plugins``, imported on first use, not at the top: ``import
    fusegrad`` discovers no plugin. Once: an import statement costs a microsecond, and every
    realize asks for the manager."""
    from fusegrad.plugin.manager import plugins  # deferred: the plugin machinery is heavy

    return plugins


Device = _DeviceRegistry()
