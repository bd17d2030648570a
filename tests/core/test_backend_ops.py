"""Every installed renderer handles every op of ``BACKEND_OPS`` that core may hand it.

Core hands a renderer only linear programs of ``BACKEND_OPS`` (uop/ops.py), but not all of them to
every target: grid targets get SPECIAL, targets with shared memory DEFINE_LOCAL, BARRIER and
IF/ENDIF (so do loop targets: codegen/gated.py; and those with ``pack_bytes`` or
``transpose_block`` DEFINE_LOCAL, and with ``transpose_block`` TRANSPOSE_BLOCK,
codegen/packed.py), targets with ``min_storage_bits`` > 8 the packed stores
ATOMIC_AND/ATOMIC_OR, loop targets with ``prefetch_bytes`` PREFETCH (codegen/prefetch.py), and
only the ALU ops in ``native_ops`` (decomposition replaces the others). For each renderer, a few
small kernels are generated (no device needed, nothing compiled); each required op must appear
in one of them, and each must render. The PYTHON device's programs are also run, by its
interpreter.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
from kernel_corpus import CASES, kernels_of, symbolic_kernels

from fusegrad.codegen.kernel import generate
from fusegrad.errors import UnsupportedOp
from fusegrad.renderer import Renderer
from fusegrad.runtime.python import PythonCompiler, PythonProgram, PythonRenderer
from fusegrad.uop.ops import BACKEND_OPS, GroupOp, Ops, UOp

#: (module, class) of each renderer; those whose distribution is not installed are skipped
RENDERERS = {
    "PYTHON": ("fusegrad.runtime.python", "PythonRenderer"),
    "CPU": ("fusegrad_cpu.renderer", "CPURenderer"),
    "OPENCL": ("fusegrad_opencl.renderer", "OpenCLRenderer"),
    "CUDA": ("fusegrad_cuda.renderer", "CUDARenderer"),
    "METAL": ("fusegrad_metal.renderer", "MetalRenderer"),
    "WEBGPU": ("fusegrad_webgpu.renderer", "WGSLRenderer"),
}

#: corpus cases that together use every backend op (see ``required_ops``)
CASE_NAMES = (
    "elementwise_float32",
    "elementwise_int8",
    "elementwise_bool",
    "math_float32",
    "math_float64",
    "integer_ops_int32",
    "cast_float32_to_int32",
    "bitcast_float32_uint32",
    "constants_inf_nan",
    "sum_axis",
    "max_axis",
    "matmul_small",
    "grouped_sum",
    "matvec_blocks",
    "row_write",
    "scores",
)


def renderer_for(device: str) -> Renderer:
    module, name = RENDERERS[device]
    return getattr(pytest.importorskip(module), name)(device)


def required_ops(renderer: Renderer) -> set[Ops]:
    """The ops of ``BACKEND_OPS`` core may hand ``renderer``, given its capabilities."""
    ops = set(BACKEND_OPS - GroupOp.ALU) | (set(renderer.native_ops) & GroupOp.ALU)
    if renderer.grid_dims is None:
        ops.discard(Ops.SPECIAL)
    if not renderer.has_local:
        ops -= {Ops.BARRIER}
        if not (renderer.pack_bytes or renderer.transpose_block):
            ops.discard(Ops.DEFINE_LOCAL)  # (loop targets pack operands in it: codegen/packed.py)
        if renderer.grid_dims is not None:  # (loop targets gate in-place row writes)
            ops -= {Ops.IF, Ops.ENDIF}
    if renderer.min_storage_bits <= 8:
        ops -= {Ops.ATOMIC_AND, Ops.ATOMIC_OR}
    if not renderer.prefetch_bytes:
        ops.discard(Ops.PREFETCH)
    if not renderer.transpose_block or renderer.grid_dims is not None:
        ops.discard(Ops.TRANSPOSE_BLOCK)
    return ops


@cache
def asts() -> tuple[UOp, ...]:
    return tuple(ast for name in CASE_NAMES for ast in kernels_of(CASES[name]())) + tuple(
        symbolic_kernels()
    )


def programs(renderer: Renderer) -> list[tuple[str, list[UOp]]]:
    """The linear programs of the test kernels for ``renderer`` (those in dtypes it holds)."""
    captured: list[tuple[str, list[UOp]]] = []

    class Capture(type(renderer)):  # type: ignore[misc]
        def render(self, name: str, program: list[UOp]) -> str:
            captured.append((name, program))
            return ""

    capture = Capture.__new__(Capture)
    capture.__dict__.update(renderer.__dict__)
    for ast in asts():
        try:
            generate(ast, capture)
        except UnsupportedOp:  # a dtype the target lacks: its own backend tests say so
            continue
    return captured


def run_python(name: str, program: list[UOp]) -> None:
    """Run ``program`` with the PYTHON device's interpreter on zeroed buffers."""
    params = sorted((u for u in program if u.op is Ops.PARAM), key=lambda u: u.arg[0])
    buffers = [np.zeros(p.arg[1] * p.dtype.itemsize, np.uint8) for p in params]
    variables = sorted({u.arg for u in program if u.op is Ops.DEFINE_VAR})
    size = next((u.arg[1] for u in program if u.op is Ops.SPECIAL), 1)
    binary = PythonCompiler().compile(PythonRenderer().render(name, program))
    PythonProgram(name, binary)(
        *buffers, global_size=(size, 1, 1), vals=tuple(v[1] for v in variables)
    )


@pytest.mark.parametrize("device", list(RENDERERS))
def test_every_renderer_handles_every_backend_op_it_may_be_given(device):
    renderer = renderer_for(device)
    kernels = programs(renderer)
    required, seen, failed = required_ops(renderer), set(), {}
    for name, program in kernels:
        ops = {u.op for u in program}
        assert ops <= BACKEND_OPS, f"{name} holds ops outside BACKEND_OPS: {ops - BACKEND_OPS}"
        try:
            renderer.render(name, program)
            if device == "PYTHON":
                run_python(name, program)
        except Exception as e:  # noqa: BLE001 - any failure is reported with the ops it names
            named = {op for op in ops if f"{op.name}" in str(e)} or ops
            failed.update({op: f"{type(e).__name__}: {e}" for op in named})
            failed.update(
                {op: f"used only by kernels that failed ({name})" for op in ops - failed.keys()}
            )
            continue
        seen |= ops
    missing = {
        op: failed.get(op, "no test kernel uses it: add one to CASE_NAMES")
        for op in required - seen
    }
    assert not missing, f"{type(renderer).__name__} ({device}) does not handle: " + "; ".join(
        f"{op.name} ({why})" for op, why in sorted(missing.items(), key=lambda kv: kv[0].name)
    )
