"""Tensor-core matmuls (core's codegen/tensorcore.py, ``mma.sync.m16n8k16`` as inline PTX).

No GPU is needed. The programs are checked two ways:

- numerically, by ``WarpEmulator``: it runs the linear program for every thread of every group
  at once (numpy lanes) and carries out each ``WMMA`` as the hardware does, gathering a warp's
  fragments into matrices by the PTX ISA's fragment layout (written out again here, apart from
  core's, so a wrong layout in either fails), multiplying and scattering the result back. The
  results must equal the PYTHON device's (the oracle) bit for bit: the inputs are multiples of
  1/8, so every sum is exact in float32, whatever the order;
- by compiling with nvcc to cubins for sm_80 and sm_90, whose SASS must hold ``HMMA.16816``
  (where cuobjdump and nvdisasm can be found).
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import shutil
import subprocess

import numpy as np
import pytest

from fusegrad import Tensor, dtypes
from fusegrad.codegen.grid import launch_size
from fusegrad.codegen.kernel import generate
from fusegrad.codegen.tensorcore import (
    MMA_M16N8K16,
    STAGE,
    TensorCores,
    plan_tensor_cores,
    tensor_core_options,
    tensor_core_program,
)
from fusegrad.dtype import DType
from fusegrad.helpers import context
from fusegrad.schedule.kernelize import KernelStep, abstract
from fusegrad.uop.alu import ARRAY
from fusegrad.uop.ops import GroupOp, Ops, UOp, toposort
from fusegrad_cuda.compiler import NVCCCompiler, find_nvcc, toolkit_folders
from fusegrad_cuda.renderer import CUDARenderer

HALVES = [dtypes.float16, dtypes.bfloat16]
ARCHS = ["sm_80", "sm_90"]

# ---- the hardware's fragment layout, from the PTX ISA ("mma.m16n8k16", .f16 and .bf16) ------- -
# lane = 4 * groupID + threadID_in_group; element i of each fragment:
#   A (16x16): row groupID (+8 for a2,a3,a6,a7), col 2*threadID_in_group + (i & 1) (+8 for a4..a7)
#   B (16x8):  row 2*threadID_in_group + (i & 1) (+8 for b2,b3), col groupID
#   C (16x8):  row groupID (+8 for c2,c3), col 2*threadID_in_group + (i & 1)
A_ROW_PLUS_8 = (0, 0, 1, 1, 0, 0, 1, 1)
A_COL_PLUS_8 = (0, 0, 0, 0, 1, 1, 1, 1)
B_ROW_PLUS_8 = (0, 0, 1, 1)
C_ROW_PLUS_8 = (0, 0, 1, 1)


def ptx_layout(lane: np.ndarray) -> tuple[list, list, list]:
    """For each element of the A, B and C fragments, the (row, col) each lane holds."""
    group, quad = lane // 4, lane % 4
    a = [(group + 8 * A_ROW_PLUS_8[i], 2 * quad + (i & 1) + 8 * A_COL_PLUS_8[i]) for i in range(8)]
    b = [(2 * quad + (i & 1) + 8 * B_ROW_PLUS_8[i], group) for i in range(4)]
    c = [(group + 8 * C_ROW_PLUS_8[i], 2 * quad + (i & 1)) for i in range(4)]
    return a, b, c


def test_the_layout_covers_each_fragment_element_once():
    a, b, c = ptx_layout(np.arange(32))
    for positions, shape in ((a, (16, 16)), (b, (16, 8)), (c, (16, 8))):
        seen = np.zeros(shape, int)
        for rows, cols in positions:
            np.add.at(seen, (rows, cols), 1)
        assert (seen == 1).all()


def test_each_register_holds_two_neighbours_along_k():
    """What packing two elements into a register assumes of core's layout."""
    core, lane = MMA_M16N8K16[0], np.arange(32)
    for r in range(core.registers[0]):
        row, k = core.a_position(lane, 2 * r)
        assert all(
            np.array_equal(x, y) for x, y in zip(core.a_position(lane, 2 * r + 1), (row, k + 1))
        )
    for r in range(core.registers[1]):
        k, col = core.b_position(lane, 2 * r)
        assert all(
            np.array_equal(x, y) for x, y in zip(core.b_position(lane, 2 * r + 1), (k + 1, col))
        )


class SharedArray:
    """A shared array of every group in the emulation, with what each element last saw: the
    barrier epoch and lane of its last write, the epoch of its last read. A read of an element
    another lane wrote since the last barrier, or a write over one read since then, is a race
    that the lockstep emulation would hide: it fails."""

    def __init__(self, groups: int, size: int, dtype: np.dtype):
        self.data = np.zeros((groups, size), dtype)
        self.written = np.full((groups, size), -1)
        self.writer = np.full((groups, size), -1)
        self.read = np.full((groups, size), -1)

    def load(self, group: np.ndarray, lane: np.ndarray, idx: np.ndarray, epoch: int):
        raced = (self.written[group, idx] == epoch) & (self.writer[group, idx] != lane)
        assert not raced.any(), "a shared element is read before the barrier after its write"
        self.read[group, idx] = epoch
        return self.data[group, idx]

    def store(self, group: np.ndarray, lane: np.ndarray, idx: np.ndarray, value, epoch: int):
        assert not (self.read[group, idx] == epoch).any(), "a shared element is overwritten in use"
        self.data[group, idx] = value
        self.written[group, idx], self.writer[group, idx] = epoch, lane


class WarpEmulator:
    """Runs a tensor-core program for ``groups`` x ``threads`` threads as numpy lanes. Its loops
    are uniform, so every lane runs each op together (a warp's 32 lanes in a ``WMMA`` too);
    shared memory is checked for races between barriers (``SharedArray``)."""

    def __init__(self, program: list[UOp], groups: int, threads: int):
        self.program, self.threads, self.groups = program, threads, groups
        self.lanes = np.arange(groups * threads)
        self.group, self.lane = self.lanes // threads, self.lanes % threads
        self.epoch = 0  # barriers passed
        self.position = {u: i for i, u in enumerate(program)}
        ends = {u.src[0]: i for i, u in enumerate(program) if u.op is Ops.END}
        self.end_of = {self.position[r]: i for r, i in ends.items()}

    def run(self, buffers: dict[int, np.ndarray]) -> None:
        values: dict[UOp, object] = {}
        pc = 0
        while pc < len(self.program):
            u = self.program[pc]
            if u.op is Ops.RANGE:
                values[u] = 0
                if u.src[0].arg <= 0:
                    pc = self.end_of[pc]
            elif u.op is Ops.END:
                values[u.src[0]] += 1
                if values[u.src[0]] < u.src[0].src[0].arg:
                    pc = self.position[u.src[0]]
            else:
                values[u] = self.step(u, [values.get(s) for s in u.src], buffers)
            pc += 1

    def step(self, u: UOp, src: list, buffers: dict[int, np.ndarray]) -> object:
        if u.op is Ops.PARAM:
            return buffers[u.arg[0]]
        if u.op is Ops.DEFINE_REG:
            return np.zeros((len(self.lanes), u.arg[1]), u.dtype.np)
        if u.op is Ops.DEFINE_LOCAL:
            return SharedArray(self.groups, u.arg[1], u.dtype.np)
        if u.op is Ops.BARRIER:
            self.epoch += 1
        elif u.op is Ops.CONST:
            return np.array(u.arg, u.dtype.np)
        elif u.op is Ops.SPECIAL:
            return self.lane if u.arg[0] == "lidx0" else self.group
        elif u.op is Ops.INDEX:
            return u.src[0].op, src[0], np.broadcast_to(src[1], self.lanes.shape)
        elif u.op is Ops.LOAD:
            return self.load(src)
        elif u.op is Ops.STORE:
            self.store(*src[0], src[1])
        elif u.op is Ops.WMMA:
            self.mma(u, src)
        elif u.op is Ops.CAST:
            return np.asarray(src[0]).astype(u.dtype.np)
        elif u.op is Ops.BITCAST:
            return np.asarray(src[0]).view(u.dtype.np)
        elif u.op in GroupOp.ALU:
            return np.asarray(ARRAY[u.op](*src)).astype(u.dtype.np)
        return None

    def load(self, src: list) -> np.ndarray:
        kind, buf, idx = src[0]
        if kind is Ops.DEFINE_REG:
            return buf[self.lanes, idx]
        if kind is Ops.DEFINE_LOCAL:
            return buf.load(self.group, self.lane, idx, self.epoch)
        if len(src) == 3:  # a gated load: the alternative where the gate is off
            return np.where(src[1], buf[np.where(src[1], idx, 0)], src[2])
        return buf[idx]

    def store(self, kind: Ops, buf, idx: np.ndarray, value) -> None:
        if kind is Ops.DEFINE_REG:
            buf[self.lanes, idx] = value
        elif kind is Ops.DEFINE_LOCAL:
            buf.store(self.group, self.lane, idx, value, self.epoch)
        else:
            buf[idx] = value

    def mma(self, u: UOp, src: list) -> None:
        """``acc[base..base+3] += A @ B`` for each warp, from the lanes' fragment registers."""
        _, acc, base = src[0]
        frags = [e for r in src[1:] for e in unpack(r, u.arg[0].dtype_in, self.lanes.shape)]
        warps, lane = self.lanes // 32, self.lanes % 32
        a_at, b_at, c_at = ptx_layout(lane)
        a = np.zeros((warps.max() + 1, 16, 16))
        b = np.zeros((warps.max() + 1, 16, 8))
        for i, (rows, cols) in enumerate(a_at):
            a[warps, rows, cols] = frags[i]
        for i, (rows, cols) in enumerate(b_at):
            b[warps, rows, cols] = frags[8 + i]
        d = a @ b
        for i, (rows, cols) in enumerate(c_at):
            acc[self.lanes, base + i] += d[warps, rows, cols].astype(acc.dtype)


def unpack(register: np.ndarray, dtype: DType, shape: tuple[int, ...]) -> list[np.ndarray]:
    """The two 16-bit elements of 32-bit fragment registers (PTX: the lower-numbered element in
    the low half), as float64 values of ``dtype``."""
    words = np.broadcast_to(np.asarray(register, np.uint32), shape)
    halves = [(words & 0xFFFF).astype(np.uint16), (words >> 16).astype(np.uint16)]
    if dtype == dtypes.bfloat16:
        return [(h.astype(np.uint32) << 16).view(np.float32).astype(np.float64) for h in halves]
    return [h.view(np.float16).astype(np.float64) for h in halves]


# ---- kernels -----------------------------------------------------------------------------------


def bits_of(values: np.ndarray, dtype: DType) -> np.ndarray:
    """``values`` (exact in ``dtype``) as the PYTHON device and the emulation hold them."""
    if dtype == dtypes.bfloat16:
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return values.astype(dtype.np)


def case(kind: str, dtype: DType, seed: int = 0):
    """``([(input on PYTHON, its values)], result tensor)``: a matmul in ``kind``'s layout, its
    inputs multiples of 1/8 in [-2, 2) (every float32 sum of their products exact)."""
    rng = np.random.default_rng(seed)
    shapes = {
        "64x64x64": ((64, 64), (64, 64)),
        "128x256x64": ((128, 64), (64, 256)),
        "batched": ((4, 64, 32), (4, 32, 48)),
        "ragged": ((100, 40), (40, 72)),
        "transposed": ((64, 128), (64, 96)),
        "bias_relu": ((64, 48), (48, 80)),
        "tiny": ((5, 3), (3, 7)),
        "attention": ((2, 3, 32, 16), (2, 3, 40, 16)),  # q @ k.T, per batch and head
    }[kind]
    data = [rng.integers(-16, 16, s).astype(np.float32) / 8 for s in shapes]
    a, b = (Tensor(x, device="PYTHON").cast(dtype).realize() for x in data)
    inputs = [(a, data[0]), (b, data[1])]
    if kind == "transposed":
        out = a.T @ b
    elif kind == "attention":
        out = a @ b.transpose(-1, -2)
    else:
        out = a @ b
    if kind == "bias_relu":
        values = rng.integers(-16, 16, 80).astype(np.float32) / 8
        bias = Tensor(values, device="PYTHON").cast(dtype).realize()
        inputs.append((bias, values))
        out = (out + bias).relu()
    return inputs, out


def emulate(
    inputs: list[tuple[Tensor, np.ndarray]], out: Tensor, dtype: DType, **plan_args
) -> np.ndarray:
    """``out`` computed by the tensor-core program for sm_80 (``plan_args``: the plan's sizes
    and staging, as ``plan_tensor_cores`` takes them), in the emulator."""
    (step,) = [s for s in out.schedule() if isinstance(s, KernelStep)]
    renderer = CUDARenderer("CUDA", "sm_80")
    plan = plan_tensor_cores(step.ast, renderer, **plan_args)
    assert plan is not None and plan.stage == plan_args.get("stage", STAGE)
    with context(VERIFY=1):
        program = tensor_core_program(step.ast, renderer, plan)
    _, slots, _ = abstract([out.uop])
    data = {next(u.arg for u in toposort([t.uop]) if u.op is Ops.BUFFER): x for t, x in inputs}
    size = step.ast.src[0].src[0].arg[1]
    buffers = {0: np.zeros(size, bits_of(np.zeros(1), dtype).dtype)}
    for i, slot in enumerate(step.slots[1:], 1):
        buffers[i] = bits_of(data[slots[slot]].reshape(-1), dtype)
    global_size, local_size = launch_size(program, renderer)
    WarpEmulator(program, global_size[0] // local_size[0], local_size[0]).run(buffers)
    return buffers[0]


@pytest.mark.parametrize("stage", [STAGE, 0], ids=["shared", "direct"])
@pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name)
@pytest.mark.parametrize(
    "kind",
    ["64x64x64", "128x256x64", "batched", "ragged", "transposed", "bias_relu", "tiny", "attention"],
)
def test_the_emulated_tensor_core_program_equals_the_oracle(kind, dtype, stage):
    inputs, out = case(kind, dtype)
    got = emulate(inputs, out, dtype, stage=stage)
    want = bits_of(out.numpy().reshape(-1).astype(np.float32), dtype)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    "warps, tiles, stage",
    [((1, 1), (1, 1), 0), ((4, 2), (1, 2), 16), ((2, 4), (4, 8), 64), ((1, 1), (1, 1), 32)],
)
def test_other_plans_compute_the_same(warps, tiles, stage):
    inputs, out = case("ragged", dtypes.bfloat16, seed=1)
    got = emulate(inputs, out, dtypes.bfloat16, warps=warps, tiles=tiles, stage=stage)
    np.testing.assert_array_equal(got, bits_of(out.numpy().reshape(-1), dtypes.bfloat16))


# ---- which kernels run on tensor cores ---------------------------------------------------------


def ast_of(out: Tensor) -> UOp:
    """The kernel computing ``out`` (the last of its schedule)."""
    return [s for s in out.schedule() if isinstance(s, KernelStep)][-1].ast


def half_matmul(m: int, k: int, n: int, dtype: DType = dtypes.float16) -> UOp:
    a, b = (
        Tensor.empty(m, k, device="PYTHON", dtype=dtype),
        Tensor.empty(k, n, device="PYTHON", dtype=dtype),
    )
    return ast_of(a @ b)


def test_a_half_matmul_gets_2x2_warps_of_2x4_tiles_staged_in_shared_memory():
    ast, renderer = half_matmul(256, 64, 256), CUDARenderer("CUDA", "sm_80")
    plan = plan_tensor_cores(ast, renderer)
    assert plan == TensorCores(0, 1, MMA_M16N8K16[0], (2, 2), (2, 4), stage=STAGE)
    assert plan.block == (64, 64) and plan.threads == 128
    with context(VERIFY=1):
        source = CUDARenderer("CUDA", "sm_80").render("k", tensor_core_program(ast, renderer, plan))
    # the operands' tiles in shared memory: filled, a barrier, the warps' fragments, a barrier
    assert source.count("__shared__ unsigned int") == 2 and source.count("__syncthreads();") == 2
    assert source.count('asm volatile("mma.sync') == 1 and "float acc0[32];" in source


def test_a_small_output_shrinks_the_plan():
    plan = plan_tensor_cores(half_matmul(16, 32, 8), CUDARenderer("CUDA", "sm_80"))
    assert plan is not None and plan.block == (16, 8) and plan.threads == 32


def test_only_half_matmuls_on_sm80_and_later_get_tensor_cores():
    renderer = CUDARenderer("CUDA", "sm_80")
    assert plan_tensor_cores(half_matmul(64, 64, 64, dtypes.float32), renderer) is None
    assert plan_tensor_cores(half_matmul(64, 64, 64), CUDARenderer("CUDA", "sm_75")) is None
    assert CUDARenderer("CUDA", "sm_90").tensor_cores == MMA_M16N8K16
    with context(NOOPT=1):
        assert plan_tensor_cores(half_matmul(64, 64, 64), renderer) is None
    x = Tensor.empty(1, 8, 16, 16, device="PYTHON", dtype=dtypes.float16)
    w = Tensor.empty(16, 8, 3, 3, device="PYTHON", dtype=dtypes.float16)
    assert plan_tensor_cores(ast_of(x.conv2d(w)), renderer) is None  # a sum over 3 axes


def test_beam_times_the_default_plan_first_and_other_sizes():
    options = tensor_core_options(half_matmul(256, 64, 256), CUDARenderer("CUDA", "sm_80"))
    assert options[0] == plan_tensor_cores(half_matmul(256, 64, 256), CUDARenderer("CUDA", "sm_80"))
    assert len(options) > 5 and len(set(options)) == len(options)


def test_generate_launches_the_plan_it_picks():
    """Once codegen/kernel.py calls the tensor-core plan (docs/tensor_cores.md, "Not done"),
    ``generate`` launches a half matmul with the plan's groups and threads."""
    ast, renderer = half_matmul(128, 64, 256), CUDARenderer("CUDA", "sm_80")
    kernel = generate(ast, renderer)
    if "mma.sync" not in kernel.source:
        pytest.skip("codegen/kernel.py does not call the tensor-core plan yet")
    plan = plan_tensor_cores(ast, renderer)
    assert kernel.local_size == (plan.threads,)
    assert kernel.global_size == (plan.groups((128, 256)) * plan.threads,)


# ---- compiled for real architectures -----------------------------------------------------------


def find_tool(name: str) -> str | None:
    """cuobjdump or nvdisasm: on PATH, in a CUDA toolkit, or from NVIDIA's pip wheels."""
    folders = [os.path.join(f, "bin") for f in toolkit_folders()]
    if (spec := importlib.util.find_spec("nvidia")) is not None:
        wheels = spec.submodule_search_locations or []
        folders += [f for p in wheels for f in glob.glob(os.path.join(p, "*", "bin"))]
    return shutil.which(name) or shutil.which(name, path=os.pathsep.join(folders))


@functools.cache
def kernel_source(dtype: DType, arch: str, stage: int) -> str:
    """The CUDA source of the bias + relu case on tensor cores, staged ``stage`` deep."""
    inputs, out = case("bias_relu", dtype)
    ast = ast_of(out)
    renderer = CUDARenderer("CUDA", arch)
    plan = plan_tensor_cores(ast, renderer, stage=stage)
    assert plan is not None and plan.stage == stage
    with context(VERIFY=1):
        program = tensor_core_program(ast, renderer, plan)
    return renderer.render("mma_bias_relu", program)


@functools.cache
def cubin(dtype: DType, arch: str, stage: int) -> bytes:
    return NVCCCompiler(arch).compile(kernel_source(dtype, arch, stage))


COMPILED = [
    pytest.mark.skipif(find_nvcc() is None, reason="nvcc not found on this machine"),
    pytest.mark.parametrize("arch", ARCHS),
    pytest.mark.parametrize("dtype", HALVES, ids=lambda d: d.name),
    pytest.mark.parametrize("stage", [STAGE, 0], ids=["shared", "direct"]),
]


def compiled(test):
    """``test`` for each architecture, dtype and staging, where nvcc is found."""
    for mark in reversed(COMPILED):
        test = mark(test)
    return test


@compiled
def test_tensor_core_matmuls_compile_to_cubins(arch, dtype, stage):
    ptx_type = "bf16" if dtype == dtypes.bfloat16 else "f16"
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{ptx_type}" in kernel_source(dtype, arch, stage)
    assert cubin(dtype, arch, stage)[:4] == b"\x7fELF"


@compiled
@pytest.mark.skipif(
    find_tool("cuobjdump") is None or find_tool("nvdisasm") is None,
    reason="no cuobjdump and nvdisasm (pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)",
)
def test_their_sass_runs_hmma_with_the_accumulators_in_registers(arch, dtype, stage, tmp_path):
    (tmp_path / "k.cubin").write_bytes(cubin(dtype, arch, stage))
    command = [find_tool("cuobjdump"), "-sass", str(tmp_path / "k.cubin")]
    # (cuobjdump runs nvdisasm, which it looks for on PATH)
    path = os.pathsep.join([os.path.dirname(find_tool("nvdisasm")), os.environ.get("PATH", "")])
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PATH": path})
    assert done.returncode == 0, done.stderr
    sass = done.stdout
    hmma = [line for line in sass.splitlines() if "HMMA.16816.F32" in line]
    assert hmma and all(("BF16" in line) == (dtype == dtypes.bfloat16) for line in hmma)
    assert "STL" not in sass  # no accumulator spilled to local memory
    if stage:  # each fragment register is one 32-bit load from shared memory
        assert " LDS " in sass and "LDS.U16" not in sass


def test_a_half_matmul_past_two_to_the_31_products_gets_tensor_cores():
    """4096³ products: its kernel counts in 32 bits, so the tensor-core plan applies (it once
    counted in 64 and ran one thread per output: 5 TFLOP/s on an H200, against cuBLAS's 611)."""
    kernel = generate(half_matmul(4096, 4096, 4096), CUDARenderer("CUDA", "sm_90"))
    assert "mma.sync.aligned.m16n8k16" in kernel.source and "long long" not in kernel.source
