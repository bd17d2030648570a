"""BEAM search: time candidate loop structures of a kernel on the device, keep the fastest.

``BEAM=N`` turns it on. The candidates are the heuristic's choice and its neighbours (other
upcast amounts, another reused axis, lanes or none); the ``N`` fastest of each round are
widened again, for two rounds. A matmul on a grid device runs tiled (codegen/tiled.py): its
candidates are tile sizes (threads per group, outputs per thread, both layouts), in one round,
and for a half-precision one on a target with tensor cores also the tensor-core plans
(codegen/tensorcore.py: warps per group, tiles per warp), so the search turns them on or off.
Every candidate is compiled (in parallel), run on buffers of the kernel's sizes after a
warm-up, and timed as the median of several runs. The winner is never
slower than the heuristic's choice, since that is a candidate too; it is cached on disk per
kernel, device and compiler, so the search runs once.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

import numpy as np

from fusegrad.codegen.kernel import KernelSource, generate, kernel_name
from fusegrad.codegen.opt import MAX_ACCUMULATORS, KernelOpts, _reduce_of, heuristic_opts
from fusegrad.codegen.tensorcore import TensorCores, tensor_core_options
from fusegrad.codegen.tiled import Tiles, tile_options
from fusegrad.device import Buffer, Runtime
from fusegrad.helpers import cache_dir, write_atomically
from fusegrad.kernel_cache import BEAM_FOLDER
from fusegrad.progress import progress
from fusegrad.renderer import Renderer
from fusegrad.uop.ops import Ops, UOp, graph_variables, toposort

REPEATS = 5


def _neighbours(opts: KernelOpts | None, ast: UOp) -> list[KernelOpts | None]:
    """Loop structures one change away from ``opts``."""
    value = ast.src[0].src[1]
    shape = value.shape
    axes = [d for d, s in enumerate(shape) if s > 1]
    reduce = _reduce_of(value)
    if not axes or reduce is None:
        return []
    base = opts or KernelOpts(tuple(range(len(shape))))
    out: list[KernelOpts | None] = [None]
    for axis in axes:
        for amount in (2, 4, 8, 16, 32):
            if shape[axis] % amount or shape[axis] == amount:
                continue
            kept = tuple(u for u in base.upcast if u[0] != axis)
            for upcast in (kept + ((axis, amount),), ((axis, amount),)):
                if _accumulators(upcast, base.lanes) <= MAX_ACCUMULATORS and len(upcast) <= 2:
                    order = tuple(d for d in base.order if d not in dict(upcast)) + tuple(
                        dict(upcast)
                    )
                    out.append(KernelOpts(order, upcast, base.lanes, base.merge))
                    if base.tile:
                        out.append(KernelOpts(order, upcast, base.lanes, base.merge, base.tile))
    axis = max(reduce.arg[1])
    for amount in (4, 8, 16):
        if (
            reduce.src[0].shape[axis] % amount == 0
            and _accumulators(base.upcast, (axis, amount)) <= MAX_ACCUMULATORS
        ):
            out.append(KernelOpts(base.order, base.upcast, (axis, amount)))
    out.append(KernelOpts(base.order, base.upcast, None))  # (lanes of a merged loop: see opt.py)
    return list(dict.fromkeys(out))


def _accumulators(upcast: tuple, lanes: tuple | None) -> int:
    n = 1
    for _, amount in upcast:
        n *= amount
    return n * (lanes[1] if lanes else 1)


def _time(
    kernel: KernelSource,
    rt: Runtime,
    device: str,
    ast: UOp,
    give_up: float = float("inf"),
    binary: bytes | None = None,
) -> float:
    """Median seconds of the compiled kernel on scratch buffers of the right sizes; just the
    warm-up's time when that is over ``give_up`` (a candidate far slower than the best so far
    need not be timed precisely, and timing it five more times was most of a search)."""
    params = sorted(
        {u.arg: u for u in toposort([ast]) if u.op is Ops.PARAM}.values(), key=lambda u: u.arg[0]
    )
    # zeroed: memory as allocated may hold denormal floats, which make the arithmetic that
    # meets them tens of times slower, so a candidate's time would depend on leftover bytes
    buffers = [_zeroed(Buffer(device, max(1, p.arg[1]), p.dtype)) for p in params]
    program = rt.program(kernel.name, binary or rt.compiler.compile_cached(kernel.source))
    handles = [b.handle for b in buffers]
    start = time.perf_counter()
    sizes = {"global_size": kernel.global_size, "local_size": kernel.local_size}
    warm = program(*handles, **sizes, wait=True) or time.perf_counter() - start
    if warm > give_up:
        return warm
    times = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        measured = program(*handles, **sizes, wait=True)
        times.append(measured if measured else time.perf_counter() - start)
    return statistics.median(times)


def _zeroed(buffer: Buffer) -> Buffer:
    return buffer.copyin(np.zeros(buffer.nbytes, np.uint8))


def _cache_path(ast: UOp, device: str, rt: Runtime) -> str:
    key = hashlib.sha256(f"{rt.compiler.identity}\0{device}\0{ast!r}".encode()).hexdigest()
    return os.path.join(cache_dir(), BEAM_FOLDER, key + ".json")


def _load(path: str) -> KernelOpts | Tiles | TensorCores | None | bool:
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return False
    if data is None:
        return None
    if "core" in data:  # a tensor-core plan
        return TensorCores.from_json(data)
    if "threads" in data:  # a tiled matmul's sizes
        threads, upcast = tuple(data["threads"]), tuple(data["upcast"])
        return Tiles(
            data["rows"], data["cols"], threads, upcast, data["strided"], data.get("stage", 0)
        )
    return KernelOpts(
        tuple(data["order"]),
        tuple(tuple(u) for u in data["upcast"]),
        tuple(data["lanes"]) if data["lanes"] else None,
        data.get("merge", False),
        tuple(tuple(t) for t in data.get("tile", ())),
    )


def _save(path: str, opts: KernelOpts | Tiles | TensorCores | None) -> None:
    data = opts.to_json() if isinstance(opts, TensorCores) else asdict(opts) if opts else None
    write_atomically(path, json.dumps(data).encode())


def searchable(ast: UOp, renderer: Renderer) -> bool:
    """Whether BEAM has candidates for ``ast``: loop structures on a loop device, tile sizes
    (and tensor-core plans) of a matmul on a grid device; none for a kernel over a variable,
    whose sizes are unknown until the launch."""
    if graph_variables([ast]):
        return False
    return renderer.grid_dims is None or bool(
        tile_options(ast, renderer) or tensor_core_options(ast, renderer)
    )


def beam_search(
    ast: UOp, rt: Runtime, device: str, width: int
) -> KernelOpts | Tiles | TensorCores | None:
    """The fastest loop structure (or tile sizes) found for ``ast`` on ``device`` (cached on
    disk)."""
    path = _cache_path(ast, device, rt)
    if (cached := _load(path)) is not False:
        return cached  # type: ignore[return-value]
    start = time.perf_counter()
    tiles: list[Tiles | TensorCores] = [
        *tensor_core_options(ast, rt.renderer),
        *tile_options(ast, rt.renderer),
    ]
    default: KernelOpts | Tiles | TensorCores | None = (
        tiles[0] if tiles else heuristic_opts(ast, rt.renderer)
    )
    timed: dict[KernelOpts | Tiles | TensorCores | None, float] = {}
    frontier: list[KernelOpts | Tiles | TensorCores | None] = [default]
    name = kernel_name(ast)
    for _ in range(1 if tiles else 2):
        candidates = tiles or frontier + [
            n
            for f in frontier
            for n in _neighbours(f, ast)  # type: ignore[arg-type]
        ]
        todo = [o for o in dict.fromkeys(candidates) if o not in timed]
        kernels = [generate(ast, rt.renderer, rt.rules, o) for o in todo]
        # one batch per core, built in parallel (a batch is one compiler process on the CPU)
        cores = os.cpu_count() or 1
        batches = [kernels[i::cores] for i in range(cores) if kernels[i::cores]]
        with ThreadPoolExecutor(max_workers=cores) as pool:
            built = list(
                pool.map(lambda b: rt.compiler.compile_cached_batch([k.source for k in b]), batches)
            )
        binary_of = {id(k): r for b, results in zip(batches, built) for k, r in zip(b, results)}
        for o, k in progress(list(zip(todo, kernels)), desc=f"BEAM {name}", unit="candidates"):
            best = min(timed.values(), default=float("inf"))
            timed[o] = float("inf")  # a candidate that does not compile is never chosen,
            if isinstance(binary := binary_of[id(k)], bytes):
                try:
                    timed[o] = _time(k, rt, device, ast, give_up=3 * best, binary=binary)
                except Exception:  # nor one the device refuses to launch (too many registers
                    pass  # for its group size: CUDA's "too many resources requested")
        frontier = sorted(timed, key=timed.__getitem__)[:width]
    chosen = frontier[0]
    sys.stderr.write(
        f"BEAM {name}: {len(timed)} candidates, best {timed[chosen] * 1e3:.3f} ms "
        f"(default {timed[default] * 1e3:.3f} ms) in {time.perf_counter() - start:.1f} s\n"
    )
    _save(path, chosen)
    return chosen
