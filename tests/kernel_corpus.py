"""A corpus of kernel ASTs for checking renderers that cannot run here (CUDA, Metal).

Each entry is a tensor expression over PYTHON-device tensors; scheduling it gives the kernel ASTs
a real program would hand a backend: elementwise ops in every dtype, casts and bitcasts, math
functions, reductions, movement ops and padding, matmuls. ``corpus_kernels()`` renders nothing:
it returns ``(id, ast)`` pairs, one per distinct kernel, for a test to render and compile.
"""

from __future__ import annotations

from collections.abc import Callable

from fusegrad import Tensor, dtypes
from fusegrad.dtype import DType
from fusegrad.schedule.kernelize import KernelStep
from fusegrad.uop.ops import UOp

DEVICE = "PYTHON"
#: every dtype a kernel may compute in
DTYPES: tuple[DType, ...] = (
    dtypes.bool,
    dtypes.int8,
    dtypes.uint8,
    dtypes.int16,
    dtypes.uint16,
    dtypes.int32,
    dtypes.uint32,
    dtypes.int64,
    dtypes.uint64,
    dtypes.float16,
    dtypes.bfloat16,
    dtypes.float32,
    dtypes.float64,
)


def _x(*shape: int, dtype: DType = dtypes.float32) -> Tensor:
    return Tensor.rand(*shape, device=DEVICE).cast(dtype).contiguous().realize()


def _elementwise(dtype: DType) -> Tensor:
    a, b = _x(4, 5, dtype=dtype), _x(4, 5, dtype=dtype)
    if dtype == dtypes.bool:
        return (a & b) | (a ^ b).logical_not() | (a != b)
    out = (a + b * a).maximum(b)
    return (out < b).where(a, -out) if dtype.is_float else (a < b).where(out - b, a * b)


def _math(dtype: DType) -> Tensor:
    a = _x(3, 7, dtype=dtype)
    return (a.sqrt() + a.exp() + (a + 1).log() + a.sin()) / (a + 2)


def _integer_ops(dtype: DType) -> Tensor:
    a, b = _x(16, dtype=dtype), _x(16, dtype=dtype) + 1
    return (a // b) + (a % b) + (a << 2) + (a >> 1) + (a & b) + (a | b) + (a ^ b)


CASES: dict[str, Callable[[], Tensor]] = {
    **{f"elementwise_{d.name}": (lambda d=d: _elementwise(d)) for d in DTYPES},
    **{f"math_{d.name}": (lambda d=d: _math(d)) for d in DTYPES if d.is_float},
    **{
        f"integer_ops_{d.name}": (lambda d=d: _integer_ops(d))
        for d in DTYPES
        if d.is_int and d.itemsize >= 4
    },
    **{f"cast_float32_to_{d.name}": (lambda d=d: _x(9).cast(d)) for d in DTYPES},
    **{
        f"cast_{d.name}_to_float32": (lambda d=d: _x(9, dtype=d).cast(dtypes.float32))
        for d in DTYPES
    },
    "bitcast_float32_uint32": lambda: _x(8).bitcast(dtypes.uint32),
    "bitcast_int32_float32": lambda: _x(8, dtype=dtypes.int32).bitcast(dtypes.float32),
    "constants_inf_nan": lambda: _x(6).maximum(float("-inf")) + float("nan") * 0,
    "sum_all": lambda: _x(33, 17).sum(),
    "sum_axis": lambda: _x(8, 9, 10).sum(axis=1),
    "max_axis": lambda: _x(8, 9).max(axis=0),
    "mean_int32": lambda: _x(10, 10, dtype=dtypes.int32).sum(axis=1),
    "softmax": lambda: _x(4, 10).softmax(axis=-1),
    "permute_reshape": lambda: _x(2, 3, 4).permute(2, 0, 1).reshape(4, 6) * 2,
    "expand": lambda: _x(3, 1).expand(3, 5) + _x(1, 5),
    "pad": lambda: _x(3, 4).pad(((1, 2), (0, 3))) + 1,
    "shrink_flip": lambda: _x(6, 6)[1:5, ::-1] * 3,
    "strided_slice": lambda: _x(10, 10)[::3, 1::2] + 1,
    "matmul_small": lambda: _x(4, 8) @ _x(8, 3),
    "matmul_64": lambda: _x(64, 64) @ _x(64, 64),
    "matmul_bias_relu": lambda: (_x(16, 32) @ _x(32, 8) + _x(8)).relu(),
    "matmul_float16": lambda: _x(16, 16, dtype=dtypes.float16) @ _x(16, 16, dtype=dtypes.float16),
    "matmul_float64": lambda: _x(8, 8, dtype=dtypes.float64) @ _x(8, 8, dtype=dtypes.float64),
    "conv_like": lambda: (_x(1, 4, 10).pad(((0, 0), (0, 0), (1, 1)))[:, :, :10] * _x(4, 1)).sum(1),
    "single_element": lambda: _x(1) + 1,
    # long reductions: one group of threads per output on targets with shared memory
    "grouped_sum": lambda: _x(5000).sum(),
    "grouped_max_rows": lambda: _x(6, 1000).max(axis=1),
    "grouped_sum_int32_axis0": lambda: _x(700, 3, dtype=dtypes.int32).sum(axis=0) + 1,
    # a weight (256 KB) read once, a block of 32 a trip: prefetched on the CPU (codegen/prefetch.py)
    "matvec_blocks": lambda: (_x(64, 32, 32) * _x(32, 32)).sum((1, 2)),
    # an in-place write of one row of a prefix view: IF/ENDIF on loop targets (codegen/gated.py)
    "row_write": lambda: _row_write(),
    # attention's scores: the keys packed into a local array on loop targets (codegen/packed.py)
    "scores": lambda: _x(2, 64, 32) @ _x(2, 64, 32).transpose(-1, -2),
}


def _row_write() -> Tensor:
    view, mask = _x(8, 32).shrink(((0, 6), None)), _x(6, 1)
    return view.assign((mask > 0).where(mask * _x(1, 32), view))


def kernels_of(tensor: Tensor) -> list[UOp]:
    """The ASTs of the kernels computing ``tensor`` (inputs are realized already)."""
    return [step.ast for step in tensor.schedule() if isinstance(step, KernelStep)]


def corpus_kernels(dtypes_supported: frozenset[DType] | None = None) -> list[tuple[str, UOp]]:
    """``(id, ast)`` for each distinct kernel of every case, skipping cases needing other dtypes."""
    seen: set[UOp] = set()
    out: list[tuple[str, UOp]] = []
    for name, build in CASES.items():
        for i, ast in enumerate(kernels_of(build())):
            if ast not in seen:
                seen.add(ast)
                out.append((f"{name}-{i}", ast))
    return out


def check_add_and_matmul(device: str) -> None:
    """A small program every GPU backend must get right: an add and a matmul that is not a
    multiple of any group size, against numpy."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((65, 300)).astype(np.float32)
    b = rng.standard_normal((300, 7)).astype(np.float32)
    np.testing.assert_allclose((Tensor(a, device=device) + 1).numpy(), a + 1)
    got = (Tensor(a, device=device) @ Tensor(b, device=device)).numpy()
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)


def symbolic_kernels() -> list[UOp]:
    """Kernels over a length that is a Variable (``seq``, bound to 5 here): an elementwise op
    and a softmax over it. Their ASTs hold the free variable; kernels take its value."""
    from fusegrad.uop.ops import Variable

    seq = Variable("seq", 1, 64)
    x = Tensor.rand(5, 8, device=DEVICE).realize().reshape(seq.bind(5), 8)
    return kernels_of(x * 2 + 1) + kernels_of(x.softmax(0))
