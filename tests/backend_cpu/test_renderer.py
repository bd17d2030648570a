"""The CPU renderer's loop pragmas: the register tile the optimiser planned, as gcc should build
it."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fusegrad import Device, Tensor
from fusegrad.codegen.kernel import generate
from fusegrad.codegen.opt import KernelOpts, heuristic_opts
from fusegrad.testing.oracle import ORACLE
from fusegrad_cpu.renderer import thread_stack_bytes, within_stack

#: a loop's opening, its counter 32 or 64 bits wide (``address_values``); group 1: the counter
LOOP = re.compile(r"for \((?:int|long long) (\w+) = ")


def _lines_before_loops(source: str) -> dict[str, str]:
    """Loop variable -> the line just before its ``for``."""
    lines = [line.strip() for line in source.splitlines()]
    return {m[1]: lines[i - 1] for i, line in enumerate(lines) if (m := LOOP.match(line))}


def _inside_reductions(source: str) -> str:
    """The lines inside the kernel's reduce loops (``for (... ridx...``), by brace depth: the
    tile there is the register tile; the loops before and after it set and read it."""
    out, depth = [], 0
    for line in source.splitlines():
        if depth:
            out.append(line)
            depth += line.count("{") - line.count("}")
        elif (m := LOOP.match(line.strip())) and m[1].startswith("ridx"):
            depth = 1
    return "\n".join(out)


def test_matmul_tile_is_unrolled_whole():
    """Every accumulator a statement of its own: gcc keeps the tile in registers and packs each
    row's statements into vector instructions (omp simd kept the array in memory)."""
    a, b = Tensor.rand(64, 32, device="CPU"), Tensor.rand(32, 48, device="CPU")
    (step,) = (a @ b).schedule()
    renderer = Device["CPU"].renderer
    opts = heuristic_opts(step.ast, renderer)
    kernel = generate(step.ast, renderer, opts=opts)
    before = _lines_before_loops(kernel.source)
    # loops are numbered as lowering opens them: the 2 output loops, the 2 upcast loops, the reduce
    assert before["uidx2"] == f"#pragma GCC unroll {opts.upcast[0][1]}"  # the reused rows
    assert before["uidx3"] == f"#pragma GCC unroll {opts.upcast[1][1]}"  # the vector of columns
    assert not before["ridx4"].startswith("#pragma")  # the reduction loop is left alone
    assert "omp simd" not in _inside_reductions(kernel.source)


def test_matmul_accumulates_with_fused_multiply_add():
    a, b = Tensor.rand(64, 32, device="CPU"), Tensor.rand(32, 48, device="CPU")
    (step,) = (a @ b).schedule()
    source = generate(step.ast, Device["CPU"].renderer, opts=None).source
    assert "__builtin_fmaf(" in source
    assert not re.search(r"float alu\d+ = \(val\d+\*val\d+\)", source)  # no separate product
    sums = (a + b[:, :1].T[:, :32]).sum(1).realize()  # a plain sum keeps its add
    np.testing.assert_allclose(sums.numpy(), (a.numpy() + b.numpy()[:, 0]).sum(1), rtol=1e-5)


def test_no_simd_pragma_on_a_loop_that_reads_with_a_stride():
    """Forcing vectors onto strided reads would make gcc gather: the loop is unrolled instead."""
    a, b = Tensor.rand(64, 32, device="CPU"), Tensor.rand(32, 48, device="CPU")
    (step,) = (a @ b).schedule()
    opts = KernelOpts((1, 0), ((0, 8),))  # only the rows upcast: a is read 32 apart along them
    kernel = generate(step.ast, Device["CPU"].renderer, opts=opts)
    before = _lines_before_loops(kernel.source)
    assert before["uidx2"] == "#pragma GCC unroll 8"
    assert "omp simd" not in _inside_reductions(kernel.source)
    rt = Device["CPU"]
    program = rt.program(kernel.name, rt.compiler.compile_cached(kernel.source))
    out = Tensor.zeros(64 * 48, device="CPU").contiguous().realize()
    program(out._buffer().handle, a._buffer().handle, b._buffer().handle, global_size=None)
    np.testing.assert_allclose(out.numpy().reshape(64, 48), a.numpy() @ b.numpy(), rtol=1e-5)


def test_elementwise_innermost_loop_is_vectorised_unless_strided():
    """A pooling's backward reads ``x // 2``: fine for vectors (a shuffle); a transpose reads
    400 elements apart: left to gcc."""
    x = Tensor.rand(2, 4, 20, 20, device="CPU")
    g = Tensor.rand(2, 4, 10, 10, device="CPU")
    up = g.reshape(2, 4, 10, 1, 10, 1).expand(2, 4, 10, 2, 10, 2).reshape(2, 4, 20, 20)
    (step,) = (x * up).schedule()
    source = generate(
        step.ast, Device["CPU"].renderer, opts=heuristic_opts(step.ast, Device["CPU"].renderer)
    ).source
    assert _lines_before_loops(source)["gidx3"] == "#pragma omp simd"
    expected = x.numpy() * np.repeat(np.repeat(g.numpy(), 2, axis=2), 2, axis=3)
    np.testing.assert_allclose((x * up).numpy(), expected, rtol=1e-6)
    (transpose,) = x.permute(0, 2, 3, 1).contiguous().schedule()
    source = generate(
        transpose.ast,
        Device["CPU"].renderer,
        opts=heuristic_opts(transpose.ast, Device["CPU"].renderer),
    ).source
    assert not any(
        line.startswith("#pragma omp simd") for line in _lines_before_loops(source).values()
    )


def test_a_padded_copy_is_vectorised_along_its_padded_axis():
    """A pad reads its source at a clamped index (it moves by one inside the source and stands
    still at its edges): vector code does that with a min and a max, and gcc needs the hint."""
    x = Tensor.rand(3, 6, 40, device="CPU").realize()
    padded = (x * 2).relu().pad((None, (1, 1), (2, 2)))
    (step,) = padded.contiguous().schedule()
    source = generate(
        step.ast, Device["CPU"].renderer, opts=heuristic_opts(step.ast, Device["CPU"].renderer)
    ).source
    innermost = list(_lines_before_loops(source).values())[-1]
    assert innermost == "#pragma omp simd", source
    expected = np.pad(np.maximum(x.numpy() * 2, 0), ((0, 0), (1, 1), (2, 2)))
    np.testing.assert_allclose(padded.numpy(), expected, rtol=1e-6)


def _run_matmul(a: Tensor, b: Tensor, opts: KernelOpts) -> tuple[str, np.ndarray]:
    """Source and result of ``a @ b``'s matmul kernel built with ``opts``."""
    *_, step = (a @ b).schedule()
    rt = Device["CPU"]
    kernel = generate(step.ast, rt.renderer, rt.rules, opts)
    program = rt.program(kernel.name, rt.compiler.compile_cached(kernel.source))
    out = Tensor.zeros(a.shape[0] * b.shape[1], device="CPU").contiguous().realize()
    program(out._buffer().handle, a._buffer().handle, b._buffer().handle, global_size=None)
    return kernel.source, out.numpy().reshape(a.shape[0], b.shape[1])


def test_upcast_that_does_not_divide_its_axis_redoes_the_last_rows():
    """6 rows of 100: 17 blocks, the last one computes rows 96..99 and then row 99 twice more
    (clamped), writing the same value to the same place."""
    a, b = Tensor.rand(100, 32, device="CPU").realize(), Tensor.rand(32, 48, device="CPU").realize()
    source, out = _run_matmul(a, b, KernelOpts((1, 0), ((0, 6), (1, 16))))
    # the outer loop's 3 trips and the rows' 17 run as one loop on all cores (lower.py
    # FEW_PARALLEL_TRIPS)
    assert "pidx0 < 51;" in source and "(pidx0/17)" in source and "(pidx0%17)" in source
    np.testing.assert_allclose(out, a.numpy() @ b.numpy(), rtol=1e-5)


def test_a_weight_gradient_of_three_panel_tiles_shares_its_rows_among_the_cores():
    """A 256 x 768 weight gradient (the GPT's qkv) tiles its columns in 3 panels of 256: a
    parallel loop of 3 trips kept one of two cores idle a third of the time. The tiles and the
    row blocks run as one parallel loop."""
    rng = np.random.default_rng(0)
    xs, gs = (
        rng.standard_normal((4, 128, 256), np.float32),
        rng.standard_normal((4, 128, 768), np.float32),
    )
    x, g = Tensor(xs, device="CPU"), Tensor(gs, device="CPU")
    grad = (x.reshape(4, 128, 256, 1) * g.reshape(4, 128, 1, 768)).sum((0, 1))
    *_, step = grad.schedule()
    renderer = Device["CPU"].renderer
    source = generate(step.ast, renderer, opts=heuristic_opts(step.ast, renderer)).source
    trips = int(re.search(r"for \((?:int|long long) pidx0 = 0; pidx0 < (\d+);", source).group(1))
    assert trips >= 8, source
    want = np.einsum("btc,btn->cn", xs, gs)
    np.testing.assert_allclose(grad.numpy(), want, rtol=1e-4, atol=1e-3)


def test_panel_tile_splits_the_column_loop():
    """tile (1, 2): the columns' loop splits into an outer loop and 2 panels walked innermost,
    after the rows."""
    a, b = Tensor.rand(24, 32, device="CPU").realize(), Tensor.rand(32, 64, device="CPU").realize()
    source, out = _run_matmul(a, b, KernelOpts((1, 0), ((0, 6), (1, 16)), tile=((1, 2),)))
    loops = [
        line.strip()
        for line in source.splitlines()
        if (m := LOOP.match(line.strip())) and m[1].startswith("gidx")
    ]
    assert loops[:3] == [
        "for (long long gidx0 = 0; gidx0 < 2; gidx0++) {",
        "for (long long gidx1 = 0; gidx1 < 4; gidx1++) {",
        "for (long long gidx2 = 0; gidx2 < 2; gidx2++) {",
    ]
    np.testing.assert_allclose(out, a.numpy() @ b.numpy(), rtol=1e-5)


def test_large_matmul_reads_its_right_operand_in_panels():
    """A copy lays the right operand out panel by panel; the matmul kernel then reads it as one
    run per panel (no stride of a whole row between the steps of k)."""
    renderer = Device["CPU"].renderer
    p = 2 * renderer.vector_bytes // 4
    a, b = (
        Tensor.rand(64, 1024, device="CPU").realize(),
        # (more than 512 x 256 floats; 16 panels, too few to pack by groups of 4 in the kernel)
        Tensor.rand(1024, 16 * p, device="CPU").realize(),
    )
    copy, matmul = (a @ b).schedule()
    source = generate(matmul.ast, renderer, opts=heuristic_opts(matmul.ast, renderer)).source
    assert f"#pragma GCC unroll {p}" in source  # the panel's width is the vector axis
    np.testing.assert_allclose((a @ b).numpy(), a.numpy() @ b.numpy(), rtol=1e-4)
    small = Tensor.rand(64, 2 * p, device="CPU").realize()
    assert len((a[:, :64] @ small).schedule()) == 1  # small operands are read in place


def _reduce_source(t: Tensor) -> str:
    *_, step = t.schedule()
    renderer = Device["CPU"].renderer
    return generate(step.ast, renderer, opts=heuristic_opts(step.ast, renderer)).source


def test_sum_lanes_are_unrolled_into_registers_but_a_max_keeps_omp_simd():
    """A sum's lane loop unrolled keeps its accumulators in registers (under omp simd gcc stored
    them on the stack every step); a max's ternary would run scalar unrolled, so it keeps simd."""
    x = Tensor.rand(1 << 16, device="CPU").realize()
    lanes = {
        v: line for v, line in _lines_before_loops(_reduce_source(x.sum())).items() if "1" in v
    }
    assert any(line.startswith("#pragma GCC unroll") for line in lanes.values())
    assert "omp simd" not in _inside_reductions(_reduce_source(x.sum()))
    assert "#pragma omp simd" in _inside_reductions(_reduce_source(x.max()))
    np.testing.assert_allclose(x.sum().numpy(), x.numpy().sum(), rtol=1e-4)
    assert x.max().numpy() == x.numpy().max()


def _gcc_vector_report(source: str | Path, tmp_path: Path) -> str | None:
    """What gcc's ``-fopt-info-vec-optimized`` says of ``source`` (C text or a file) built with
    the CPU compiler's flags; None when the compiler is not gcc (the option is gcc's)."""
    rt = Device["CPU"]
    if "gcc" not in " ".join(rt.compiler.command):
        return None
    if isinstance(source, str):
        (path := tmp_path / "k.c").write_text(source)
    else:
        path = source
    flags = [f for f in rt.compiler.flags if f != "-shared"]
    done = subprocess.run(
        [
            *rt.compiler.command,
            *flags,
            "-c",
            "-fopt-info-vec-optimized",
            str(path),
            "-o",
            str(tmp_path / "k.o"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stderr


def _needs_avx2_target() -> None:
    """Skip where the kernels are built for a target without 32-byte vectors (``FUSEGRAD_CPU_ARCH
    =x86-64``: SSE2 has no blend or rounding instruction, and gcc leaves such loops scalar)."""
    if Device["CPU"].renderer.vector_bytes < 32:
        pytest.skip("gcc's vectoriser is checked for AVX2 and AVX-512 targets; this one is SSE")


def test_exp_with_clamps_is_vectorised(tmp_path):
    """The exp polynomial clamps its argument with ternaries; gcc if-converts them only without
    -ftrapping-math (the flag changes no result), else a softmax ran 4x slower, scalar."""
    _needs_avx2_target()
    rt = Device["CPU"]
    x = Tensor.rand(64, 256, device="CPU").realize()
    (step,) = (x.exp() * 2).schedule()
    kernel = generate(step.ast, rt.renderer, rt.rules, heuristic_opts(step.ast, rt.renderer))
    report = _gcc_vector_report(kernel.source, tmp_path)
    assert report is None or "loop vectorized" in report, (
        report
    )  # clang vectorises these on its own
    np.testing.assert_allclose((x.exp() * 2).numpy(), np.exp(x.numpy()) * 2, rtol=1e-5)


def test_caches_are_read_from_sysfs(tmp_path):
    from fusegrad_cpu.renderer import core_cache, last_level_cache

    for index, (level, kind, size) in enumerate(
        [
            (1, "Data", "32K"),
            (1, "Instruction", "64K"),
            (2, "Unified", "512K"),
            (3, "Unified", "32768K"),
        ]
    ):
        entry = tmp_path / f"index{index}"
        entry.mkdir()
        (entry / "level").write_text(f"{level}\n")
        (entry / "type").write_text(f"{kind}\n")
        (entry / "size").write_text(f"{size}\n")
    assert last_level_cache(str(tmp_path)) == 32 << 20
    assert core_cache(str(tmp_path)) == 512 << 10
    assert last_level_cache(str(tmp_path / "missing")) == core_cache(str(tmp_path / "missing")) == 0


def test_conv_tile_inside_several_reduce_loops_keeps_a_vector_loop():
    """A conv's tile sits inside its channel and window loops: unrolled there gcc left it scalar
    (19x slower), so its vector loop stays ``omp simd`` while the rows unroll; a matmul's tile,
    inside one reduce loop, unrolls whole."""
    x, w = (
        Tensor.rand(4, 8, 12, 12, device="CPU").realize(),
        Tensor.rand(32, 8, 3, 3, device="CPU").realize(),
    )
    source = _reduce_source(x.conv2d(w))
    pragmas = [line.strip() for line in source.splitlines() if line.strip().startswith("#pragma")]
    assert "#pragma omp simd" in pragmas and any(
        p.startswith("#pragma GCC unroll") for p in pragmas
    )
    expected = Tensor(x.numpy(), device=ORACLE).conv2d(Tensor(w.numpy(), device=ORACLE)).numpy()
    np.testing.assert_allclose(x.conv2d(w).numpy(), expected, rtol=1e-4, atol=1e-5)


def test_two_selects_on_one_comparison_vectorise(tmp_path):
    """data/batchnorm_backward.c is a kernel fusegrad generated for the MNIST CNN's backward (a
    batch norm's gradient under a ReLU and a max pool). gcc's jump threading copied its selects'
    branches into a shape the vectoriser gave up on (10.5 ms instead of 0.8): the lane loop must
    vectorise with the flags the compiler passes."""
    _needs_avx2_target()
    report = _gcc_vector_report(Path(__file__).parent / "data" / "batchnorm_backward.c", tmp_path)
    assert report is None or "batchnorm_backward.c:35:17: optimized: loop vectorized" in report, (
        report
    )


def test_a_long_epilogue_after_a_matmul_tile_is_vectorised_not_unrolled():
    """The tile's loops after the reduction, where a GELU reads each accumulator: unrolled over
    8 x 32 elements gcc packed nothing and the whole kernel ran at 4.6 GFLOP/s instead of 96.
    The tile's loops inside the reduction stay unrolled into registers."""
    x, w, bias = (Tensor.rand(*s, device="CPU").realize() for s in ((64, 256), (256, 128), (128,)))
    *_, step = ((x @ w) + bias).gelu().schedule()
    renderer = Device["CPU"].renderer
    opts = heuristic_opts(step.ast, renderer)
    source = generate(step.ast, renderer, opts=opts).source
    reduce_at = re.search(r"for \((?:int|long long) ridx", source).start()
    inside, after = source[reduce_at:].split("\n          }\n", 1)[0], source[reduce_at:]
    assert "#pragma GCC unroll" in inside
    epilogue = after[after.index("__builtin_fmaf") :]
    epilogue = epilogue[epilogue.index("#pragma") :]
    assert "#pragma omp simd" in epilogue and "#pragma GCC unroll 32" not in epilogue
    want = (x.numpy() @ w.numpy()) + bias.numpy()
    want = 0.5 * want * (1 + np.tanh(0.7978845608 * (want + 0.044715 * want**3)))
    np.testing.assert_allclose(((x @ w) + bias).gelu().numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("registers", [16, 32])
def test_an_epilogue_loop_is_unrolled_unless_its_values_are_long_or_compare(registers):
    """After a matmul's reduction, with AVX2's 16 registers the tile's rows stay unrolled around
    a short epilogue (a store: as a loop it kept the accumulators in memory, half speed) but not
    around a GELU (unrolled, gcc left the kernel scalar); with AVX-512's 32 no epilogue is
    unrolled (gcc's time halved, same speed). A convolution (nested reductions) keeps its
    epilogue unrolled whatever it holds."""
    renderer = copy.copy(Device["CPU"].renderer)
    renderer.vector_registers = registers
    a, b = (
        Tensor.rand(64, 256, device="CPU").realize(),
        Tensor.rand(256, 128, device="CPU").realize(),
    )
    x = Tensor.rand(8, 16, 12, 12, device="CPU").realize()
    w = Tensor.rand(32, 16, 3, 3, device="CPU").realize()
    bias = Tensor.rand(128, device="CPU").realize()
    cases = (
        (a @ b, registers < 32),
        ((a @ b + bias).gelu(), False),
        ((x.conv2d(w) + 1).gelu(), True),
    )
    for t, unrolled in cases:
        sources = [
            generate(step.ast, renderer, opts=heuristic_opts(step.ast, renderer)).source
            for step in t.schedule()
        ]
        (source,) = [src for src in sources if "__builtin_fmaf" in src]
        before = _lines_before_loops(source)
        # the epilogue's loops are the tile's last copies: the two highest-numbered uidx
        outer = sorted((v for v in before if v.startswith("uidx")), key=lambda v: int(v[4:]))[-2]
        assert before[outer].startswith("#pragma GCC unroll") == unrolled, source


def test_a_tile_around_a_short_sum_is_unrolled_even_with_32_registers():
    """Attention's scores sum over a head of 64: the tile's set-up and epilogue are unrolled
    too (as loops, gcc copied the accumulators through a stack array: a tenth of the kernel),
    where a sum of 256 keeps them loops (``test_an_epilogue_loop_is_unrolled...``)."""
    from fusegrad.uop.loops import AxisKind, LoopHint
    from fusegrad.uop.ops import Ops

    renderer = copy.copy(Device["CPU"].renderer)
    renderer.vector_registers = 32
    q, k = Tensor.rand(2, 64, 64, device="CPU").realize(), Tensor.rand(2, 64, 64, device="CPU")
    (step,) = (q @ k.realize().transpose(-1, -2)).schedule()
    program = generate(step.ast, renderer, opts=heuristic_opts(step.ast, renderer)).program
    start = next(i for i, u in enumerate(program) if u.op is Ops.DEFINE_REG)  # (the filling's
    # loops come before it: codegen/packed.py)
    tile = [u for u in program[start:] if u.op is Ops.RANGE and u.arg.kind is AxisKind.UPCAST]
    assert len(tile) == 6 and all(u.arg.hint is LoopHint.UNROLL for u in tile)


def test_a_matmul_tile_addresses_with_64_bit_offsets():
    """``wide_addresses``: the tile's reduction counter and the offsets of its loads are 64-bit
    (no sign extension per load in the inner loop); the values are the same."""
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((96, 512), np.float32), rng.standard_normal((512, 64), np.float32)
    ta, tb = Tensor(a, device="CPU"), Tensor(b, device="CPU")
    (step,) = (ta @ tb).schedule()
    source = generate(step.ast, Device["CPU"].renderer, Device["CPU"].rules).source
    assert "for (long long ridx" in source
    for read in re.findall(r"data[12]\[(\w+)\]", source):
        assert re.search(rf"long long {read} = ", source), read
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-4, atol=1e-3)


def test_the_thread_stack_size_parses_as_openmp_spells_it(monkeypatch):
    monkeypatch.delenv("GOMP_STACKSIZE", raising=False)
    for value, nbytes in (("512K", 512 << 10), ("4M", 4 << 20), ("300", 300 << 10), ("64b", 64)):
        monkeypatch.setenv("OMP_STACKSIZE", value)
        assert thread_stack_bytes() == nbytes
    monkeypatch.setenv("OMP_STACKSIZE", "lots")
    assert thread_stack_bytes() is None
    monkeypatch.delenv("OMP_STACKSIZE")
    assert thread_stack_bytes() is None
    assert within_stack(256 << 10, None) == 256 << 10
    assert within_stack(256 << 10, 100 << 10) == 25 << 10


def test_a_small_openmp_stack_bounds_the_packed_arrays():
    """Local arrays live on each OpenMP thread's stack: with ``OMP_STACKSIZE=100K`` a matmul
    that packs a 128 KB group of panels killed the process (a segfault). Now the renderer packs
    at most a quarter of the stack; run in a subprocess, as it once crashed."""
    script = (
        "import numpy as np\n"
        "from fusegrad import Device, Tensor\n"
        "r = Device['CPU'].renderer\n"
        "assert r.group_pack_bytes == r.pack_bytes == 25 * 1024, r.group_pack_bytes\n"
        "a = np.random.default_rng(0).standard_normal((96, 256)).astype(np.float32)\n"
        "b = np.random.default_rng(1).standard_normal((256, 1024)).astype(np.float32)\n"
        "got = (Tensor(a) @ Tensor(b)).numpy()\n"
        "np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)\n"
        "print('ok')\n"
    )
    env = {**os.environ, "OMP_STACKSIZE": "100K"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_transposed_read_of_rows_far_apart_stays_inside_its_buffer():
    """A slice of a very wide tensor read transposed (rows 80M elements apart) goes through the
    8 x 8 blocks (``TRANSPOSE_8``), whose last row lies 7 x 80M x 4 bytes past the first: with
    32-bit strides that offset wrapped and the process died (a segfault). Run in a subprocess,
    as it once crashed; the 2.5 GB buffer is never written, so its pages are never touched."""
    script = (
        "import numpy as np\n"
        "from fusegrad import Tensor\n"
        "wide = Tensor.empty(8, 80_000_000).realize()\n"
        "got = (wide[:, :16].T + 1).numpy()\n"
        "want = wide[:, :16].numpy().T + 1\n"
        "assert got.shape == (16, 8), got.shape\n"
        "np.testing.assert_array_equal(got, want)\n"
        "print('ok')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
