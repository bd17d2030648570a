"""Software prefetches of the inputs a reduction streams through once (codegen/prefetch.py)."""

from __future__ import annotations

import numpy as np

from fusegrad import Device, Tensor
from fusegrad.codegen.kernel import generate
from fusegrad.codegen.prefetch import LINE_BYTES, _value, prefetch_streams
from fusegrad.runtime.python import PythonRenderer
from fusegrad.uop.loops import AxisKind
from fusegrad.uop.ops import Ops


def _kernels(t: Tensor) -> list:
    rt = Device["CPU"]
    return [generate(s.ast, rt.renderer, rt.rules) for s in t.schedule() if hasattr(s, "ast")]


def test_a_weight_read_once_is_prefetched_ahead_at_each_trip_of_the_reduction():
    """A matrix-vector product in blocks of 32 (a weight of 1 MB read once; the vector read by
    every output): the weight alone gets prefetches, at the top of the outer reduction loop, one
    per cache line a trip moves, ``prefetch_bytes`` ahead of that trip's reads; the result is
    unchanged."""
    rng = np.random.default_rng(0)
    w_np = rng.standard_normal((256, 32, 32), dtype=np.float32)
    x_np = rng.standard_normal((32, 32), dtype=np.float32)
    w, x = Tensor(w_np).realize(), Tensor(x_np).realize()
    (kernel,) = _kernels((w * x).sum((1, 2)))
    program = list(kernel.program)
    prefetches = [u for u in program if u.op is Ops.PREFETCH]
    assert prefetches and "__builtin_prefetch(&" in kernel.source
    weight = next(u.src[0].src[0] for u in prefetches)
    assert weight.arg[1] == w_np.size and all(u.src[0].src[0] is weight for u in prefetches)
    loop = next(u for u in program if u.op is Ops.RANGE and u.arg.kind is AxisKind.REDUCE)
    at = program.index(loop)
    inner = next(u for u in program[at + 1 :] if u.op is Ops.RANGE)
    assert all(at < program.index(p) < program.index(inner) for p in prefetches)
    read = next(u.src[0].src[1] for u in program if u.op is Ops.LOAD and u.src[0].src[0] is weight)
    step = _value(read, {loop: 1}) - _value(read, {loop: 0})  # elements a trip
    assert len(prefetches) == -(-step * 4 // LINE_BYTES)
    ahead = -(-Device["CPU"].renderer.prefetch_bytes // (step * 4))
    first = prefetches[0].src[0].src[1]
    assert _value(first, {loop: 0}) == _value(read, {loop: ahead})
    got = (w * x).sum((1, 2)).numpy()
    np.testing.assert_allclose(got, (w_np * x_np).sum((1, 2)), rtol=1e-5, atol=1e-4)


def test_operands_read_again_and_small_or_slow_inputs_get_no_prefetch():
    """A matmul reads each operand again for other outputs (the cache serves those), a weight of
    less than 64 KB stays in cache, a plain sum moves one cache line a trip (the processor's own
    prefetcher follows that): none is prefetched. Nor is anything for a renderer without
    ``prefetch_bytes``."""
    a, b = Tensor.empty(256, 256).realize(), Tensor.empty(256, 256).realize()
    small = Tensor.empty(8, 32, 32).realize()  # 32 KB
    x = Tensor.empty(32, 32).realize()
    for t in (a @ b, (small * x).sum((1, 2)), Tensor.empty(1 << 20).realize().sum()):
        for kernel in _kernels(t):
            assert not any(u.op is Ops.PREFETCH for u in kernel.program), kernel.source
    big = Tensor.empty(256, 32, 32).realize()
    (step,) = (big * x).sum((1, 2)).schedule()
    renderer = PythonRenderer("PYTHON")
    assert renderer.prefetch_bytes == 0
    program = list(generate(step.ast, renderer).program)
    assert not any(u.op is Ops.PREFETCH for u in program)
    assert prefetch_streams(program, 0) is program
