"""Apple GPUs through pyobjc's Metal framework (macOS only): buffers, libraries, compute pipelines.

Everything here imports ``Metal`` (pyobjc-framework-Metal); the plugin module imports this only
when the METAL device is opened, after its probe found macOS, pyobjc and a GPU.
"""

from __future__ import annotations

import functools
import struct
import time
from typing import Any

import Metal

from fusegrad.device import Allocator, whole_groups
from fusegrad.errors import CompileError
from fusegrad_metal.renderer import THREADGROUP_SIZE


@functools.cache
def metal_device() -> Any:
    """The system's default GPU and one command queue for it."""
    device = Metal.MTLCreateSystemDefaultDevice()
    return device, device.newCommandQueue()


def wait_for(queue: Any) -> None:
    """Block until every command buffer committed to ``queue`` so far has completed."""
    command = queue.commandBuffer()
    command.commit()
    command.waitUntilCompleted()


class MetalAllocator(Allocator):
    """Shared-storage ``MTLBuffer``s: the CPU and GPU see the same memory, copies are memmoves."""

    def alloc(self, nbytes: int) -> Any:
        device, _ = metal_device()
        return device.newBufferWithLength_options_(nbytes, Metal.MTLResourceStorageModeShared)

    def copyin(self, handle: Any, src: memoryview) -> None:
        """Copy host bytes in, once the kernels committed before have finished with the buffer."""
        wait_for(metal_device()[1])
        handle.contents().as_buffer(handle.length())[: src.nbytes] = src

    def copyout(self, dest: memoryview, handle: Any) -> None:
        """Copy to the host once the kernels committed before have finished."""
        wait_for(metal_device()[1])
        dest[:] = handle.contents().as_buffer(handle.length())[: dest.nbytes]


def compile_library(source: str) -> Any:
    """Build MSL ``source`` into an ``MTLLibrary``, without fast math; ``CompileError`` if it
    fails."""
    device, _ = metal_device()
    options = Metal.MTLCompileOptions.new()
    options.setFastMathEnabled_(False)  # results must match the CPU backend's tolerances
    library, error = device.newLibraryWithSource_options_error_(source, options, None)
    if library is None:
        raise CompileError(f"the Metal kernel below failed to compile:\n{error}\n\n{source}")
    return library


class MetalProgram:
    """A compute pipeline for one kernel; calls dispatch it over the output and commit.

    Metal compiles from source at run time, so the "binary" the compiler hands over is the
    source's UTF-8 bytes.
    """

    def __init__(self, name: str, binary: bytes):
        self.name = name
        device, self.queue = metal_device()
        function = compile_library(binary.decode()).newFunctionWithName_(name)
        self.pipeline, error = device.newComputePipelineStateWithFunction_error_(function, None)
        if self.pipeline is None:
            raise CompileError(f"Metal could not make a pipeline for kernel {name}: {error}")

    def __call__(
        self,
        *buffers: Any,
        global_size: tuple[int, ...] | None = None,
        local_size: tuple[int, ...] | None = None,
        vals: tuple[int, ...] = (),
        wait: bool = False,
    ) -> float | None:
        """Dispatch whole threadgroups (of ``local_size`` threads if given) over ``global_size``;
        the kernel guards a flat index."""
        most = self.pipeline.maxTotalThreadsPerThreadgroup()
        if local_size is not None and local_size[0] > most:
            raise CompileError(
                f"kernel {self.name} needs threadgroups of {local_size[0]} threads, but its "
                f"pipeline allows {most}; run it with NOOPT=1 (one thread per output)"
            )
        group_size = local_size[0] if local_size else min(THREADGROUP_SIZE, most)
        groups, group = whole_groups(global_size, group_size)
        command = self.queue.commandBuffer()
        encoder = command.computeCommandEncoder()
        encoder.setComputePipelineState_(self.pipeline)
        for i, buffer in enumerate(buffers):
            encoder.setBuffer_offset_atIndex_(buffer, 0, i)
        for i, value in enumerate(vals):  # variables' values, after the buffers (see the renderer)
            encoder.setBytes_length_atIndex_(struct.pack("<i", value), 4, len(buffers) + i)
        size, threads = Metal.MTLSizeMake(groups, 1, 1), Metal.MTLSizeMake(group, 1, 1)
        encoder.dispatchThreadgroups_threadsPerThreadgroup_(size, threads)
        encoder.endEncoding()
        start = time.perf_counter()
        command.commit()
        if not wait:
            return None
        command.waitUntilCompleted()
        if (gpu := command.GPUEndTime() - command.GPUStartTime()) > 0:
            return gpu
        return time.perf_counter() - start

    def __repr__(self) -> str:
        return f"<MetalProgram {self.name}>"
