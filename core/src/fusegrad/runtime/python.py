"""The PYTHON device: an interpreter of linear programs, the oracle of the conformance suite.

Its "source" is the linear program as JSON; its "binary" the same bytes. Kernels are launched
over a one-dimensional grid and every grid index runs at once as a numpy lane, so a value is a
numpy array over the lanes; loops run one trip at a time, in Python. Every op follows the
backend contract's semantics (C's integer division and remainder, wrap-around integers), as the
ALU table that constant folding reads too says (``uop/alu.py``, its ``array`` column).
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

import numpy as np

from fusegrad.device import Allocator, Compiler
from fusegrad.dtype import dtypes
from fusegrad.renderer import Renderer
from fusegrad.uop.alu import ARRAY
from fusegrad.uop.ops import GroupOp, Ops, UOp


class PythonAllocator(Allocator):
    """Host memory as numpy byte arrays."""

    def alloc(self, nbytes: int) -> np.ndarray:
        # whole 32-bit words, so that a program with packed narrow types can view it as uint32
        return np.zeros(nbytes + -nbytes % 4, dtype=np.uint8)

    def copyin(self, handle: np.ndarray, src: memoryview) -> None:
        handle[: src.nbytes] = np.frombuffer(src, dtype=np.uint8)

    def copyout(self, dest: memoryview, handle: np.ndarray) -> None:
        out = np.frombuffer(dest, dtype=np.uint8)
        out[:] = handle[: out.size]


class PythonRenderer(Renderer):
    """Serialises the linear program; launched over one grid dimension of numpy lanes."""

    grid_dims = 1

    def render(self, name: str, program: list[UOp]) -> str:
        position = {u: i for i, u in enumerate(program)}
        rows = [
            [u.op.name, u.dtype.name, [position[s] for s in u.src], _plain(u.arg)] for u in program
        ]
        return json.dumps({"name": name, "program": rows})


def _plain(arg: Any) -> Any:
    if isinstance(arg, tuple):
        return [_plain(a) for a in arg]
    if isinstance(arg, Enum):  # an op, a loop's kind or hint
        return arg.name
    return arg


class PythonCompiler(Compiler):
    """Nothing to compile: the JSON is the program."""

    identity = "python-interpreter-1"
    disk_cache = False

    def compile(self, source: str) -> bytes:
        json.loads(source)  # a malformed program fails here, as a compile error would
        return source.encode()


_ATOMICS = {Ops.ATOMIC_AND: np.bitwise_and, Ops.ATOMIC_OR: np.bitwise_or}


class PythonProgram:
    """Interprets one linear program."""

    def __init__(self, name: str, binary: bytes):
        data = json.loads(binary)
        self.name = name
        self.rows = [
            (Ops[op], dtypes.from_name(dt) if dt != "void" else dtypes.void, src, arg)
            for op, dt, src, arg in data["program"]
        ]
        self.loop_end = self._match_loops()
        #: a variable's name -> its position in ``vals`` (kernels take them sorted by name)
        names = sorted(arg[0] for op, _, _, arg in self.rows if op is Ops.DEFINE_VAR)
        self.var_position = {name: i for i, name in enumerate(names)}

    def _match_loops(self) -> dict[int, int]:
        ends, open_loops = {}, []
        for pc, (op, _, _src, _) in enumerate(self.rows):
            if op is Ops.RANGE:
                open_loops.append(pc)
            elif op is Ops.END:
                ends[open_loops.pop()] = pc
        return ends

    def __call__(
        self, *buffers: np.ndarray, global_size=None, local_size=None, vals=(), wait=False
    ):
        with np.errstate(all="ignore"):
            self._run(list(buffers), global_size, vals)
        return 0.0 if wait else None

    def _run(
        self, buffers: list[np.ndarray], global_size: tuple[int, ...] | None, vals: tuple[int, ...]
    ) -> None:
        values: list[Any] = [None] * len(self.rows)
        regs: dict[int, np.ndarray] = {}
        pc = 0
        while pc < len(self.rows):
            op, dtype, src, arg = self.rows[pc]
            if op is Ops.PARAM:
                values[pc] = buffers[arg[0]][: arg[1] * dtype.itemsize].view(dtype.np)
            elif op is Ops.CONST:
                values[pc] = np.array(arg, dtype=dtype.np)
            elif op is Ops.DEFINE_VAR:
                values[pc] = np.array(vals[self.var_position[arg[0]]], dtype=np.int32)
            elif op is Ops.SPECIAL:  # (the lanes of a variable size: as many as it has now)
                count = int(values[src[0]]) if src else arg[1]
                values[pc] = np.arange(count, dtype=np.int32)
            elif op is Ops.RANGE:
                values[pc] = np.array(0, dtype=np.int32)
                if values[src[0]] <= 0:
                    pc = self.loop_end[pc]
            elif op is Ops.END:
                start = src[0]
                values[start] = values[start] + 1
                if values[start] < values[self.rows[start][2][0]]:
                    pc = start
            elif op is Ops.DEFINE_REG:
                regs[pc] = np.array(0, dtype=dtype.np)
            elif op is Ops.INDEX:
                values[pc] = (values[src[0]], values[src[1]])
            elif op is Ops.LOAD:
                values[pc] = self._load(src, values, regs)
            elif op is Ops.STORE:
                self._store(src, values, regs)
            elif op in _ATOMICS:  # ufunc.at applies every lane, even lanes sharing a word
                buf, idx = values[src[0]]
                idx, value = np.broadcast_arrays(idx, values[src[1]])
                _ATOMICS[op].at(buf, idx, value)
            elif op is Ops.CAST:
                x = values[src[0]]
                values[pc] = (x != 0) if dtype == dtypes.bool else x.astype(dtype.np)
            elif op is Ops.BITCAST:
                values[pc] = np.asarray(values[src[0]]).view(dtype.np)
            elif op in GroupOp.ALU:
                values[pc] = np.asarray(ARRAY[op](*[values[s] for s in src])).astype(dtype.np)
            pc += 1

    def _load(self, src: list[int], values: list[Any], regs: dict) -> np.ndarray:
        if self.rows[src[0]][0] is Ops.DEFINE_REG:
            return regs[src[0]]
        buf, idx = values[src[0]]
        if len(src) == 1:
            return buf[idx]
        gate, alt = values[src[1]], values[src[2]]
        return np.where(gate, buf[np.where(gate, idx, 0)], alt)

    def _store(self, src: list[int], values: list[Any], regs: dict) -> None:
        if self.rows[src[0]][0] is Ops.DEFINE_REG:
            regs[src[0]] = values[src[1]]
            return
        buf, idx = values[src[0]]
        buf[idx] = values[src[1]]
