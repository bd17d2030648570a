"""The wgpu runtime: one adapter and device per process, storage buffers, cached pipelines.

Synchronisation: kernels are submitted without waiting. WebGPU orders everything on one queue,
so a ``copyin`` (``queue.write_buffer``) is seen by the kernels submitted after it, and a
``copyout`` maps a staging buffer, which waits for every kernel submitted before it. A buffer
freed while a kernel still uses it stays alive in wgpu until that kernel is done.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from fusegrad.device import Allocator
from fusegrad.errors import DeviceUnavailable, UnsupportedOp

#: ``FUSEGRAD_WEBGPU_BACKEND=opengl`` (or vulkan, metal, d3d12) picks the adapter of that backend.
BACKEND_VARIABLE = "FUSEGRAD_WEBGPU_BACKEND"
#: Features used when the adapter has them.
WANTED_FEATURES = ("shader-f16", "shader-int64", "timestamp-query")
NO_ADAPTER = (
    "install a Vulkan driver (apt-get install mesa-vulkan-drivers libvulkan1) "
    "or an OpenGL one (libgl1-mesa-dri)"
)


@contextlib.contextmanager
def _without_mesa_warnings() -> Iterator[None]:
    """Mesa's drivers print "XDG_RUNTIME_DIR is invalid" on machines without a desktop session,
    straight to file descriptor 2: drop those lines, pass every other one on."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            for line in caught.read().decode(errors="replace").splitlines(keepends=True):
                if "XDG_RUNTIME_DIR" not in line:
                    sys.stderr.write(line)


@functools.cache
def find_adapter() -> Any:
    """The wgpu adapter to use: of ``$FUSEGRAD_WEBGPU_BACKEND`` if set, else wgpu's choice."""
    import wgpu

    wanted = os.environ.get(BACKEND_VARIABLE, "").strip().lower()
    with _without_mesa_warnings():
        if not wanted:
            return wgpu.gpu.request_adapter_sync(power_preference="high-performance")
        adapters = wgpu.gpu.enumerate_adapters_sync()
    for adapter in adapters:
        if adapter.info["backend_type"].lower() == wanted:
            return adapter
    found = ", ".join(a.info["backend_type"] for a in adapters) or "none"
    raise DeviceUnavailable(
        f"{BACKEND_VARIABLE}={wanted}: no adapter of that backend (found: {found})"
    )


def adapter_problem() -> str | None:
    """None when an adapter is found, else why not (the device probe)."""
    try:
        find_adapter()
    except Exception as e:  # noqa: BLE001 - any failure to find an adapter means "unavailable"
        return f"wgpu found no adapter ({type(e).__name__}: {e}); {NO_ADAPTER}"
    return None


@dataclass
class Context:
    """The opened adapter and device, their features and limits, and the pipelines built on it."""

    adapter: Any
    device: Any
    features: frozenset[str]
    limits: dict[str, int]
    adapter_name: str
    pipelines: dict[str, Any]

    @property
    def timestamps(self) -> bool:
        return "timestamp-query" in self.features

    @property
    def on_cpu(self) -> bool:
        """Whether the adapter runs shaders on the host's processor (llvmpipe, WARP)."""
        return str(self.adapter.info.get("adapter_type", "")).upper() == "CPU"

    def pipeline(self, source: str, entry: str) -> Any:
        """The compute pipeline of ``source`` (built once per process, one thread at a time: the
        engine compiles a plan's kernels on several threads)."""
        with _LOCK:
            return self._pipeline(source, entry)

    def _pipeline(self, source: str, entry: str) -> Any:
        if (hit := self.pipelines.get(source)) is None:
            module = self.device.create_shader_module(code=source)
            hit = self.device.create_compute_pipeline(
                layout="auto", compute={"module": module, "entry_point": entry}
            )
            self.pipelines[source] = hit
        return hit


_LOCK = threading.RLock()
_CONTEXT: list[Context] = []


def context() -> Context:
    """Open the device once per process, with the adapter's own limits (not WebGPU's defaults)."""
    with _LOCK:
        if not _CONTEXT:
            _CONTEXT.append(_open())
        return _CONTEXT[0]


def _open() -> Context:
    adapter = find_adapter()
    features = frozenset(f for f in WANTED_FEATURES if f in adapter.features)
    limits = {k: v for k, v in adapter.limits.items() if isinstance(v, int)}
    with _without_mesa_warnings():
        device = adapter.request_device_sync(
            required_features=sorted(features), required_limits=limits
        )
    info = adapter.info
    name = f"{info['device']} via {info['backend_type']}"
    return Context(adapter, device, features, dict(device.limits), name, {})


def _words(nbytes: int) -> int:
    """Bytes rounded up to whole 32-bit words: WebGPU copies and binds multiples of 4."""
    return max(4, nbytes + -nbytes % 4)


class WebGPUAllocator(Allocator):
    """Storage buffers the kernels read and write, and the host copies in and out of."""

    def __init__(self) -> None:
        self.ctx = context()
        self.largest = min(
            self.ctx.limits["max-buffer-size"], self.ctx.limits["max-storage-buffer-binding-size"]
        )

    def alloc(self, nbytes: int) -> Any:
        import wgpu

        if _words(nbytes) > self.largest:
            raise UnsupportedOp(
                f"WEBGPU ({self.ctx.adapter_name}) cannot hold a {nbytes}-byte buffer: the adapter "
                f"binds at most {self.largest} bytes; split the tensor or use another device"
            )
        usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
        return self.ctx.device.create_buffer(size=_words(nbytes), usage=usage)

    def copyin(self, handle: Any, src: memoryview) -> None:
        data = np.frombuffer(src, dtype=np.uint8)
        if data.size % 4:
            data = np.concatenate([data, np.zeros(-data.size % 4, np.uint8)])
        self.ctx.device.queue.write_buffer(handle, 0, data)

    def copyout(self, dest: memoryview, handle: Any) -> None:
        out = np.frombuffer(dest, dtype=np.uint8)
        if out.size:
            data = self.ctx.device.queue.read_buffer(handle, 0, _words(out.size))
            out[:] = np.frombuffer(data, dtype=np.uint8)[: out.size]


_DISPATCH = re.compile(r"^// dispatch (\d+) (\d+) (\d+)")
_BINDING = re.compile(r"@binding\((\d+)\) var<(storage|uniform)")


class WebGPUProgram:
    """A compiled kernel: its pipeline, which bindings it uses, and its dispatch size.

    ``vals`` (integer scalars) go into one uniform buffer, bound after the storage buffers, when
    the kernel declares one (``var<uniform> vals``); no buffer is made per scalar per call.
    """

    def __init__(self, name: str, binary: bytes):
        self.ctx = context()
        self.name, self.source = name, binary.decode()
        self.pipeline = self.ctx.pipeline(self.source, name)
        self.layout = self.pipeline.get_bind_group_layout(0)
        match = _DISPATCH.match(self.source)
        self.dispatch = tuple(int(g) for g in match.groups()) if match else (1, 1, 1)
        self.storage = [int(b) for b, kind in _BINDING.findall(self.source) if kind == "storage"]
        self.uniform = next(
            (int(b) for b, kind in _BINDING.findall(self.source) if kind == "uniform"), None
        )
        self.vals_buffer: Any = None
        self.timer: Any = None

    def __call__(
        self,
        *buffers: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        """Submit the kernel; with ``wait``, wait for it and return its time in seconds."""
        device = self.ctx.device
        entries = [{"binding": b, "resource": {"buffer": buffers[b]}} for b in self.storage]
        if self.uniform is not None:
            entries.append({"binding": self.uniform, "resource": {"buffer": self.pack_vals(vals)}})
        bind_group = device.create_bind_group(layout=self.layout, entries=entries)
        encoder = device.create_command_encoder()
        timed = wait and self.ctx.timestamps
        writes = self.timestamp_writes() if timed else None
        compute = encoder.begin_compute_pass(timestamp_writes=writes)
        compute.set_pipeline(self.pipeline)
        compute.set_bind_group(0, bind_group)
        compute.dispatch_workgroups(*self.dispatch)
        compute.end()
        if timed:
            encoder.resolve_query_set(self.timer[0], 0, 2, self.timer[1], 0)
        start = time.perf_counter()
        device.queue.submit([encoder.finish()])
        if not wait:
            return None
        if timed:
            stamps = np.frombuffer(device.queue.read_buffer(self.timer[1]), dtype=np.uint64)
            return float(stamps[1] - stamps[0]) * 1e-9  # WebGPU timestamps count nanoseconds
        device.queue.on_submitted_work_done_sync()
        return time.perf_counter() - start

    def timestamp_writes(self) -> dict:
        """A query set of two timestamps (start and end of the pass) and the buffer they go to."""
        import wgpu

        if self.timer is None:
            device = self.ctx.device
            queries = device.create_query_set(type="timestamp", count=2)
            usage = wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC
            self.timer = (queries, device.create_buffer(size=16, usage=usage))
        return {
            "query_set": self.timer[0],
            "beginning_of_pass_write_index": 0,
            "end_of_pass_write_index": 1,
        }

    def pack_vals(self, vals: tuple[int, ...]) -> Any:
        """All scalars of this call in one uniform buffer (16-byte aligned, as uniforms must be)."""
        import wgpu

        data = np.zeros(max(4, -(-len(vals) // 4) * 4), dtype=np.int32)
        data[: len(vals)] = vals
        if self.vals_buffer is None or self.vals_buffer.size != data.nbytes:
            usage = wgpu.BufferUsage.UNIFORM | wgpu.BufferUsage.COPY_DST
            self.vals_buffer = self.ctx.device.create_buffer(size=data.nbytes, usage=usage)
        self.ctx.device.queue.write_buffer(self.vals_buffer, 0, data)
        return self.vals_buffer

    def __repr__(self) -> str:
        return f"<WebGPUProgram {self.name} dispatch={self.dispatch}>"
