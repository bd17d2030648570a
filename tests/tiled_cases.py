"""What the tiled-matmul tests of every grid backend share (core's codegen/tiled.py): the cases,
and checks that take the device's name and how its source spells a thread's index in its group.

Each backend's test_tiled.py calls these for its device and adds its own checks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from fusegrad import Tensor, caches, dtypes
from fusegrad.codegen.kernel import KernelSource, generate
from fusegrad.codegen.lower import index_type
from fusegrad.codegen.search import beam_search
from fusegrad.codegen.tiled import Tiles, plan_tiles, tile_options
from fusegrad.device import Device
from fusegrad.helpers import context, prod
from fusegrad.schedule.kernelize import KernelStep
from fusegrad.uop.loops import AxisKind
from fusegrad.uop.ops import Ops, UOp

RNG = np.random.default_rng(19)

CASES = {
    "odd sizes": (lambda a, b: a @ b, ((100, 77), (77, 131))),
    "left transposed": (lambda a, b: a.T @ b, ((77, 100), (77, 131))),
    "right transposed": (lambda a, b: a @ b.T, ((100, 77), (131, 77))),
    "batched": (lambda a, b: a @ b, ((3, 65, 33), (3, 33, 70))),
    "broadcast batch": (lambda a, b: a @ b, ((65, 33), (3, 33, 70))),
    "4-d": (lambda a, b: a @ b, ((2, 3, 40, 50), (2, 3, 50, 60))),
    "prologue": (lambda a, b: a.relu() @ (b * 2), ((64, 64), (64, 64))),
    "one row": (lambda a, b: a @ b, ((1, 64, 300), (300, 200))),
}


def normal(*shape: int, dtype=np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


@dataclass(frozen=True)
class GridDevice:
    """A grid device under test, and how its kernels spell a thread's index in its group and
    in the whole grid (the tiled plan uses the first only)."""

    name: str
    local_index: str
    global_index: str

    def tensor(self, x: np.ndarray) -> Tensor:
        return Tensor(x, device=self.name)

    def kernel(self, t: Tensor) -> tuple[UOp, KernelSource]:
        """The kernel computing ``t`` (one), generated for this device."""
        (ast,) = [s.ast for s in t.schedule() if isinstance(s, KernelStep)]
        return ast, generate(ast, Device[self.name].renderer)

    def assert_tiled(self, t: Tensor) -> None:
        """``t``'s kernel runs as tiles: a group per block, an upcast loop per axis, each thread
        a register block (the launch covers groups x threads exactly)."""
        ast, kernel = self.kernel(t)
        tiles = plan_tiles(ast, Device[self.name].renderer)
        assert tiles is not None
        threads = prod(tiles.threads)
        assert kernel.local_size == (threads,)
        assert kernel.global_size == (tiles.groups(ast.src[0].src[1].shape) * threads,)
        loops = [u for u in kernel.program if u.op is Ops.RANGE and u.arg.kind is AxisKind.UPCAST]
        assert {u.src[0].arg for u in loops} >= set(tiles.upcast) - {1}
        assert self.local_index in kernel.source and self.global_index not in kernel.source


def check_case(dev: GridDevice, case: str) -> None:
    f, shapes = CASES[case]
    a, b = (normal(*s) for s in shapes)
    t = f(dev.tensor(a), dev.tensor(b))
    dev.assert_tiled(t)
    want = f(a, b) if case != "prologue" else np.maximum(a, 0) @ (b * 2)
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-4, atol=1e-4)


def check_bias_and_relu(dev: GridDevice) -> None:
    a, b, bias = normal(130, 64), normal(64, 96), normal(96)
    t = (dev.tensor(a) @ dev.tensor(b) + dev.tensor(bias)).relu()
    dev.assert_tiled(t)  # one kernel: the bias and the relu are its epilogue
    np.testing.assert_allclose(t.numpy(), np.maximum(a @ b + bias, 0), rtol=1e-4, atol=1e-4)


def check_dtype(dev: GridDevice, np_dtype: np.dtype) -> None:
    a, b = (RNG.integers(-3, 4, s).astype(np_dtype) for s in ((67, 45), (45, 90)))
    t = dev.tensor(a) @ dev.tensor(b)
    dev.assert_tiled(t)
    np.testing.assert_allclose(t.numpy(), a @ b)


def check_noopt(dev: GridDevice) -> KernelSource:
    """NOOPT=1 keeps one thread per output (the kernel is returned for the device's checks)."""
    a, b = normal(64, 64), normal(64, 64)
    with context(NOOPT=1):
        _, kernel = dev.kernel(dev.tensor(a) @ dev.tensor(b))
        assert dev.global_index in kernel.source
        got = (dev.tensor(a) @ dev.tensor(b)).numpy()
        np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    return kernel


def check_beam_candidates(dev: GridDevice) -> None:
    """The tile sizes BEAM times (codegen/search.py) are all correct, odd sizes included."""
    a, b = normal(70, 90), normal(90, 100)
    ast, _ = dev.kernel(dev.tensor(a) @ dev.tensor(b))
    rt = Device[dev.name]
    options = tile_options(ast, rt.renderer)
    assert len(options) > 10 and all(isinstance(o, Tiles) for o in options)
    assert {o.strided for o in options} == {True, False}
    for tiles in options[::15]:
        kernel = generate(ast, rt.renderer, rt.rules, tiles)
        program = rt.program(kernel.name, rt.compiler.compile_cached(kernel.source))
        out = dev.tensor(np.zeros((70, 100), np.float32)).realize()
        inputs = (out, dev.tensor(a).realize(), dev.tensor(b).realize())
        handles = [t._buffer().handle for t in inputs]
        program(*handles, global_size=kernel.global_size, local_size=kernel.local_size, wait=True)
        got = out._buffer().numpy().reshape(70, 100)
        np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4, err_msg=str(tiles))


def check_integer_matmul_untiled(dev: GridDevice) -> None:
    """Integer sums are not tiled (codegen/tiled.py: compile time); they stay exact."""
    a, b = (RNG.integers(-3, 4, s).astype(np.int32) for s in ((67, 45), (45, 90)))
    t = dev.tensor(a) @ dev.tensor(b)
    ast, _ = dev.kernel(t)
    assert plan_tiles(ast, Device[dev.name].renderer) is None
    np.testing.assert_array_equal(t.numpy(), a @ b)


# ---- operands staged in shared memory (codegen/staged.py) -------------------------------------


@contextmanager
def staging(dev: GridDevice, on: bool = True) -> Iterator[None]:
    """Within: ``dev``'s tiled matmuls stage their operands in shared memory (``on``) or not,
    whatever its renderer's default (kernels compiled before and after are forgotten)."""
    caches.reset()
    renderer = Device[dev.name].renderer
    before = renderer.stage_tiles
    renderer.stage_tiles = on
    try:
        yield
    finally:
        renderer.stage_tiles = before
        caches.reset()


def check_staged_case(dev: GridDevice, case: str, barrier: str) -> None:
    """``case`` computed by a staged plan (two barriers per step of the sum) matches numpy."""
    with staging(dev):
        f, shapes = CASES[case]
        ast, kernel = dev.kernel(f(*(dev.tensor(normal(*s)) for s in shapes)))
        tiles = plan_tiles(ast, Device[dev.name].renderer)
        assert tiles is not None and tiles.stage > 0, tiles
        assert kernel.source.count(barrier) == 2
        check_case(dev, case)


def check_beam_picks_a_correct_plan(dev: GridDevice, tmp_path, monkeypatch) -> Tiles:
    """BEAM (codegen/search.py) over an odd-sized matmul times staged and unstaged candidates
    and returns tiles whose kernel computes what numpy does."""
    monkeypatch.setenv("FUSEGRAD_CACHE", str(tmp_path))
    a, b = normal(70, 90), normal(90, 100)
    ast, _ = dev.kernel(dev.tensor(a) @ dev.tensor(b))
    rt = Device[dev.name]
    options = tile_options(ast, rt.renderer)
    assert {o.stage > 0 for o in options} == {True, False}
    best = beam_search(ast, rt, dev.name, width=2)
    assert isinstance(best, Tiles) and best in options
    np.testing.assert_allclose(run_tiles(dev, ast, best, a, b), a @ b, rtol=1e-4, atol=1e-4)
    return best


def run_tiles(dev: GridDevice, ast: UOp, tiles: Tiles, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` by ``ast``'s kernel generated with ``tiles``, launched directly."""
    rt = Device[dev.name]
    kernel = generate(ast, rt.renderer, rt.rules, tiles)
    program = rt.program(kernel.name, rt.compiler.compile_cached(kernel.source))
    out = dev.tensor(np.zeros((a.shape[0], b.shape[1]), np.float32)).realize()
    inputs = (out, dev.tensor(a).realize(), dev.tensor(b).realize())
    handles = [t._buffer().handle for t in inputs]
    program(*handles, global_size=kernel.global_size, local_size=kernel.local_size, wait=True)
    return out._buffer().numpy().reshape(a.shape[0], b.shape[1])


def check_past_two_to_the_31_products(dev: GridDevice) -> None:
    """A matmul of 2048 x 2048 x 1024 (2**32 products) counts in 32 bits: its broadcast view is
    never flattened (codegen/lower.py's index_type). Once it counted in 64 and so ran one
    thread per output, untiled (a 4096² matmul on an H200: 5 TFLOP/s, torch 41)."""
    a, b = normal(2048, 1024), normal(1024, 2048)
    t = dev.tensor(a) @ dev.tensor(b)
    dev.assert_tiled(t)
    ast, _ = dev.kernel(t)
    assert index_type(ast) == dtypes.index
    np.testing.assert_allclose(t.numpy(), a @ b, rtol=1e-4, atol=1e-3)
