"""Each fusegrad op against torch on the same inputs: forward values, and gradients.

A case (``OpCase``) names the op, gives fusegrad's function and torch's, and says how to make
each input (``Arg``). ``check`` builds the same arrays in both libraries, runs both functions
and compares every output (shape, kind of dtype, values); when the case has float inputs that
want gradients it also compares d(sum(out * w)) / d(input), for a random upstream weight ``w``
(so the upstream gradient is not all ones), taken with ``Tensor.gradient``.

The family helpers (``unary``, ``binary``, ``reduction``) expand one line per op into the
standard variants: a plain 2-d input, 0-d, size 1, broadcast, a non-contiguous view, a size-0
axis, extra dtypes and extreme values. A new op is one line in its family's list.

A case that fails because of a known bug carries ``xfail={"*": reason}`` (or one device's name
for the key): it is marked ``xfail(strict=True)``, so the fix shows up as a failure to remove it.

Besides PYTHON and CPU, cases run on ``EXTRA_DEVICES`` (OPENCL, WEBGPU, CUDA) where they can be
used: outputs only, the first case of each op and input dtypes (conftest.py picks them).
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pytest

from fusegrad import Tensor, dtypes
from fusegrad.device import Device
from fusegrad.dtype import DType
from fusegrad.errors import CompileError, UnsupportedOp
from fusegrad.testing.oracle import require_dtypes

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _available(name: str) -> bool:
    """Whether a plugin offers device ``name`` and it can be used here (a driver, an adapter)."""
    spec = Device.specs().get(name)
    return spec is not None and spec.unavailable() is None


#: Devices where every case also runs, forward values only, when they can be used here (CI
#: installs PoCL for OPENCL and llvmpipe for WEBGPU): their gradients are more of the same kernels.
EXTRA_DEVICES = tuple(name for name in ("OPENCL", "WEBGPU", "CUDA") if _available(name))
#: The devices every case runs on: the interpreter (the oracle), compiled C, and the extra ones.
DEVICES = ("PYTHON", "CPU", *EXTRA_DEVICES)
#: Devices whose language does not promise IEEE infinities and nan: where an input or torch's
#: output holds one, a difference is an xfail (not strict) there, not a failure.
NOT_PROMISED = {
    "WEBGPU": "WGSL lets a compiler treat infinities and nan as indeterminate (and x / 0 as "
    "any value)",
}

f16, f32, f64 = dtypes.float16, dtypes.float32, dtypes.float64
i8, u8, i32, i64, bool_ = dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.int64, dtypes.bool

inf, nan = float("inf"), float("nan")
#: Extreme float32 values: infinities, nan, signed zeros, overflow and underflow scales.
SPECIAL = (
    -inf,
    -1e30,
    -88.8,
    -3.5,
    -1.0,
    -0.5,
    -0.0,
    0.0,
    1e-30,
    0.5,
    1.0,
    2.5,
    88.8,
    1e30,
    inf,
    nan,
)
#: Where piecewise activations bend: their subgradients there must be torch's.
KINKS = (-6.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0, 6.0)


# ---- inputs --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Arg:
    """How to make one input.

    ``kind``: "uniform" in [low, high); "ties": whole numbers in [low, high] (maxima tie);
    "values": ``values`` cycled to fill the shape (any kind with ``values`` takes them);
    "index": integers in [low, high) (torch gets int64); "mask": booleans, the first of the
    last axis true. ``view``: "" contiguous, "T" the
    transpose of a contiguous array, "step" every other element of a twice as long last axis.
    Float inputs get a gradient unless ``grad`` is False (targets, statistics).
    """

    shape: tuple[int, ...]
    dtype: DType = f32
    low: float = -3.0
    high: float = 3.0
    kind: str = "uniform"
    values: tuple[float, ...] = ()
    view: str = ""
    grad: bool = True

    @property
    def T(self) -> Arg:  # noqa: N802
        """The same input, given as the transpose of a contiguous array (not contiguous)."""
        return replace(self, view="T")

    @property
    def step(self) -> Arg:
        """The same input, given as every other element of a longer array (not contiguous)."""
        return replace(self, view="step")

    @property
    def wants_grad(self) -> bool:
        return self.grad and self.dtype in (f32, f64) and self.kind in ("uniform", "ties", "values")

    @property
    def base_shape(self) -> tuple[int, ...]:
        """The shape of the contiguous array the view is taken of (and the gradient's)."""
        if self.view == "T":
            return self.shape[::-1]
        if self.view == "step":
            return (*self.shape[:-1], 2 * self.shape[-1])
        return self.shape

    def array(self, rng: np.random.Generator) -> np.ndarray:
        shape, np_dtype = self.base_shape, self.dtype.np
        if self.values:
            return np.resize(np.array(self.values, np_dtype), shape)
        if self.kind == "mask" or self.dtype == bool_:
            mask = np.asarray(rng.random(shape) < 0.6)  # (0-d: an array, not np.True_)
            if self.kind == "mask" and mask.ndim:
                mask[..., :1] = True  # no all-false row (an attention row that sees nothing)
            return mask
        if self.kind == "index" or self.dtype.is_int:
            low = max(int(self.low), int(self.dtype.min))
            return rng.integers(low, int(self.high) + (self.kind != "index"), shape).astype(
                np_dtype
            )
        if self.kind == "ties":
            return rng.integers(int(self.low), int(self.high) + 1, shape).astype(np_dtype)
        return rng.uniform(self.low, self.high, shape).astype(np_dtype)

    def viewed(self, t: Any) -> Any:
        """``t`` (fusegrad's or torch's tensor of ``base_shape``) as this input's view of it."""
        if self.view == "T":
            return t.permute(*reversed(range(len(self.shape))))
        if self.view == "step":
            return t[..., ::2]
        return t


def floats(*shape: int, low: float = -3.0, high: float = 3.0, dtype: DType = f32) -> Arg:
    """Random floats in [low, high)."""
    return Arg(shape, dtype, low, high)


def positive(*shape: int) -> Arg:
    """Floats in [0.5, 3): for log, sqrt, division and the like."""
    return Arg(shape, f32, 0.5, 3.0)


def ties(*shape: int, low: int = -2, high: int = 2) -> Arg:
    """Whole numbers in [low, high] as floats: many ties."""
    return Arg(shape, f32, low, high, "ties")


def values(*elements: float, shape: tuple[int, ...] | None = None, dtype: DType = f32) -> Arg:
    """Exactly these elements (cycled to fill ``shape``)."""
    return Arg(shape or (len(elements),), dtype, kind="values", values=elements)


def ints(*shape: int, low: int = -9, high: int = 9, dtype: DType = i32) -> Arg:
    """Random integers in [low, high]."""
    return Arg(shape, dtype, low, high)


def indices(high: int, *shape: int, low: int = 0) -> Arg:
    """Integer indices in [low, high) (int32 here, int64 in torch)."""
    return Arg(shape, i32, low, high, "index")


def index_values(*elements: int, shape: tuple[int, ...] | None = None) -> Arg:
    """Exactly these indices (cycled to fill ``shape``), int32 here and int64 in torch."""
    return Arg(shape or (len(elements),), i32, kind="index", values=elements)


def mask(*shape: int) -> Arg:
    """Booleans, the first element of the last axis true."""
    return Arg(shape, bool_, kind="mask")


def const(*shape: int, low: float = 0.05, high: float = 0.95) -> Arg:
    """Floats without a gradient (targets, weights of a loss)."""
    return Arg(shape, f32, low, high, grad=False)


# ---- cases ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OpCase:
    """One comparison. ``id`` is "op-variant": the op (a fusegrad name) before the first "-".

    ``theirs`` takes torch tensors in the order of ``args``; ``grad`` False compares values only;
    ``tol`` overrides the dtype's tolerances (``np.testing.assert_allclose``'s rtol and atol);
    ``xfail`` maps a device (or "*") to the reason the case fails there.
    """

    id: str
    ours: Callable[..., Any]
    theirs: Callable[..., Any]
    args: tuple[Arg, ...]
    grad: bool = True
    tol: Mapping[str, float] | None = None
    xfail: Mapping[str, str] = field(default_factory=dict)

    @property
    def op(self) -> str:
        return self.id.split("-", 1)[0]


def case(
    id: str,
    ours: Callable[..., Any],
    *args: Arg,
    ref: Callable[..., Any] | None = None,
    grad: bool = True,
    tol: Mapping[str, float] | None = None,
    xfail: str | Mapping[str, str] | None = None,
) -> OpCase:
    """One row: fusegrad's function, torch's (``ref``; the same lambda if not given), inputs."""
    return OpCase(id, ours, ref or ours, args, grad, tol, _xfail(xfail))


def _xfail(xfail: str | Mapping[str, str] | None) -> dict[str, str]:
    return {"*": xfail} if isinstance(xfail, str) else dict(xfail or {})


def params(cases: Sequence[OpCase]) -> list[Any]:
    """``cases`` as pytest parameters named by their ids (which must be unique)."""
    seen: set[str] = set()
    for c in cases:
        assert c.id not in seen, f"two cases named {c.id!r}"
        seen.add(c.id)
    return [pytest.param(c, id=c.id) for c in cases]


# ---- family helpers ------------------------------------------------------------------------------


def _method(name: str, *extra: Any) -> Callable[..., Any]:
    return lambda x, *rest: getattr(x, name)(*rest, *extra)


def _torch_function(name: str, *extra: Any) -> Callable[..., Any]:
    """torch's ``name``: the tensor method if there is one, else torch.nn.functional's."""
    if hasattr(torch.Tensor, name):
        return lambda x, *rest: getattr(x, name)(*rest, *extra)
    fn = getattr(F, name)
    return lambda *xs: fn(*xs, *extra)


def _special(special: bool | tuple[float, ...]) -> tuple[float, ...]:
    return SPECIAL if special is True else tuple(special)


def _expand(
    name: str,
    rows: Sequence[tuple[str, Callable[..., Any], Callable[..., Any], tuple[Arg, ...], bool]],
    grad: bool,
    tol: Mapping[str, float] | None,
    xfail: Mapping[str, str | Mapping[str, str]] | None,
) -> list[OpCase]:
    """One case per row (variant, ours, theirs, inputs, gradients too?); ``xfail`` is keyed by
    variant, and every key must name one."""
    xfail = dict(xfail or {})
    out = [
        OpCase(f"{name}-{v}", ours, theirs, args, grad and g, tol, _xfail(xfail.pop(v, None)))
        for v, ours, theirs, args, g in rows
    ]
    assert not xfail, f"{name}: xfail names no variant: {sorted(xfail)}"
    return out


def unary(
    op: str,
    *extra: Any,
    ours: Callable[..., Any] | None = None,
    ref: Callable[..., Any] | None = None,
    tag: str = "",
    low: float = -3.0,
    high: float = 3.0,
    dtypes: Sequence[DType] = (f32,),
    grad: bool = True,
    special: bool | tuple[float, ...] = True,
    kinks: bool = False,
    tol: Mapping[str, float] | None = None,
    xfail: Mapping[str, str | Mapping[str, str]] | None = None,
) -> list[OpCase]:
    """An elementwise op of one tensor, ``x.op(*extra)`` against torch's ``op(x, *extra)``.

    Variants: 2d (3, 4), 0d, size1 (1, 1), T (a transposed view), empty (0, 3), one per extra
    dtype, special (``SPECIAL``, values only) and kinks (``KINKS``, with gradients).
    """
    ours = ours or _method(op, *extra)
    theirs = ref or _torch_function(op, *extra)
    dtype = dtypes[0]
    lo = 0 if dtype.is_unsigned or dtype == bool_ else low

    def arg(*shape: int, dt: DType = dtype) -> Arg:
        return Arg(shape, dt, 0 if dt.is_unsigned else lo, high)

    variants = [
        ("2d", (arg(3, 4),), True),
        ("0d", (arg(),), True),
        ("size1", (arg(1, 1),), True),
        ("T", (arg(3, 4).T,), True),
        ("empty", (arg(0, 3),), True),
        *((dt.name, (arg(3, 4, dt=dt),), True) for dt in dtypes[1:]),
    ]
    if special and dtype == f32:
        variants.append(("special", (values(*_special(special)),), False))
    if kinks:
        variants.append(("kinks", (values(*KINKS),), True))
    rows = [(v, ours, theirs, args, g) for v, args, g in variants]
    return _expand(f"{op}-{tag}" if tag else op, rows, grad, tol, xfail)


#: The operand pairs of a binary op: (variant, first shape/view, second shape/view)
BINARY_SHAPES = [
    ("2d", (3, 4), "", (3, 4), ""),
    ("bcast", (3, 1), "", (1, 4), ""),
    ("0d", (), "", (3, 4), ""),
    ("T", (3, 4), "T", (3, 4), ""),
    ("step", (2, 3), "", (2, 3), "step"),
    ("empty", (0, 4), "", (1, 4), ""),
]


def binary(
    op: str,
    ours: Callable[..., Any],
    ref: Callable[..., Any] | None = None,
    *,
    tag: str = "",
    a: tuple[float, float] = (-3.0, 3.0),
    b: tuple[float, float] = (-3.0, 3.0),
    kind: str = "uniform",
    dtypes: Sequence[DType] = (f32,),
    grad: bool = True,
    special: bool | tuple[float, ...] = True,
    tol: Mapping[str, float] | None = None,
    xfail: Mapping[str, str | Mapping[str, str]] | None = None,
) -> list[OpCase]:
    """An elementwise op of two tensors, ``ours(a, b)`` against ``ref(a, b)`` (default: the same).

    ``a`` and ``b`` are the operands' ranges, ``kind`` "ties" makes them whole numbers. Variants:
    ``BINARY_SHAPES``, one per extra dtype at (3, 4) with (4,), and special: every pair of
    ``SPECIAL`` values (values only).
    """
    dtype = dtypes[0]

    def arg(shape: tuple[int, ...], rng: tuple[float, float], view: str, dt: DType = dtype) -> Arg:
        low = 0 if dt.is_unsigned or dt == bool_ else rng[0]
        return replace(Arg(shape, dt, low, rng[1], kind if dt.is_float else "uniform"), view=view)

    variants = [(v, (arg(sa, a, va), arg(sb, b, vb)), True) for v, sa, va, sb, vb in BINARY_SHAPES]
    variants += [
        (dt.name, (arg((3, 4), a, "", dt), arg((4,), b, "", dt)), True) for dt in dtypes[1:]
    ]
    if special and dtype == f32:
        elements = _special(special)
        n = len(elements)
        pairs = (values(*elements, shape=(n, 1)), values(*elements, shape=(1, n)))
        variants.append(("special", pairs, False))
    rows = [(v, ours, ref or ours, args, g) for v, args, g in variants]
    return _expand(f"{op}-{tag}" if tag else op, rows, grad, tol, xfail)


def dims(x: Any, axis: int | tuple[int, ...] | None) -> tuple[int, ...]:
    """``axis`` as torch's ``dim`` tuple (None: every axis)."""
    if axis is None:
        return tuple(range(x.ndim))
    return (axis,) if isinstance(axis, int) else tuple(axis)


def one_axis_at_a_time(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A torch reduction that takes one ``dim`` (prod, argmax) applied over several axes."""

    def reduce(x: Any, axis: int | tuple[int, ...] | None, keepdim: bool) -> Any:
        axes = sorted((d % x.ndim for d in dims(x, axis)), reverse=True)
        for d in axes:
            x = fn(x, d, keepdim=True)
        return x if keepdim or not axes else x.squeeze(tuple(axes))

    return reduce


def torch_reduce(name: str, **kw: Any) -> Callable[..., Any]:
    """torch's reduction ``name`` as ``fn(x, axis, keepdim)`` (axis None: every axis)."""
    fn = getattr(torch, name)
    return lambda x, axis, keepdim: fn(x, dims(x, axis), keepdim=keepdim, **kw)


def reduction(
    op: str,
    ours: Callable[..., Any] | None = None,
    ref: Callable[..., Any] | None = None,
    *,
    tag: str = "",
    tuple_axes: bool = True,
    empty: bool = True,
    low: float = -3.0,
    high: float = 3.0,
    dtypes: Sequence[DType] = (f32,),
    grad: bool = True,
    special: bool = True,
    tol: Mapping[str, float] | None = None,
    xfail: Mapping[str, str | Mapping[str, str]] | None = None,
) -> list[OpCase]:
    """A reduction, ``ours(x, axis, keepdim)`` against ``ref(x, axis, keepdim)``.

    Defaults: ``x.op(axis, keepdim=keepdim)`` and ``torch_reduce(op)``. Variants, on (2, 3, 4)
    unless said: all axes, axis 1, axis -1 kept, axes (0, 2) and (-1, 0) kept (``tuple_axes``),
    0d, a transposed input, a size-1 axis, ties, a size-0 axis (0, 3) reduced (``empty``), one
    per extra dtype, special values along the last axis (values only).
    """
    ours = ours or (lambda x, axis, keepdim: getattr(x, op)(axis, keepdim=keepdim))
    ref = ref or torch_reduce(op)
    dtype = dtypes[0]

    def arg(*shape: int, dt: DType = dtype, kind: str = "uniform") -> Arg:
        return Arg(
            shape, dt, 0 if dt.is_unsigned else low, high, kind if dt.is_float else "uniform"
        )

    rows: list[tuple[str, Arg, Any, bool]] = [  # (variant, input, axis, keepdim)
        ("all", arg(2, 3, 4), None, False),
        ("axis", arg(2, 3, 4), 1, False),
        ("keepdim", arg(2, 3, 4), -1, True),
        ("0d", arg(), None, False),
        ("T", arg(2, 3, 4).T, 0, False),
        ("size1", arg(3, 1), 1, False),
        ("ties", arg(3, 6, kind="ties"), 1, False),
    ]
    if tuple_axes:
        rows += [
            ("axes", arg(2, 3, 4), (0, 2), False),
            ("axes_keepdim", arg(2, 3, 4), (-1, 0), True),
        ]
    if empty:
        rows.append(("empty", arg(0, 3), 0, False))
    rows += [(dt.name, arg(3, 5, dt=dt), 1, False) for dt in dtypes[1:]]
    if special and dtype == f32:
        rows.append(("special", values(*SPECIAL, shape=(4, 4)), 1, False))
    cases = [
        (v, _bind(ours, ax, k), _bind(ref, ax, k), (x,), v != "special") for v, x, ax, k in rows
    ]
    return _expand(f"{op}-{tag}" if tag else op, cases, grad, tol, xfail)


def along_axis(
    op: str,
    ours: Callable[..., Any] | None = None,
    ref: Callable[..., Any] | None = None,
    *,
    tag: str = "",
    low: float = -3.0,
    high: float = 3.0,
    dtypes: Sequence[DType] = (f32,),
    grad: bool = True,
    special: bool = True,
    tol: Mapping[str, float] | None = None,
    xfail: Mapping[str, str | Mapping[str, str]] | None = None,
) -> list[OpCase]:
    """An op along one axis that keeps the shape (cumsum, softmax): ``ours(x, axis)`` against
    ``ref(x, axis)``.

    Defaults: ``x.op(axis)`` and ``torch.op(x, axis)``. Variants: axis 1 of (3, 5), axis 0,
    axis -1 of (2, 3, 4), 0d, a transposed input, size 1, along and across a size-0 axis,
    one per extra dtype, special values (values only).
    """
    ours = ours or (lambda x, axis: getattr(x, op)(axis))
    ref = ref or (lambda x, axis: getattr(torch, op)(x, axis))
    dtype = dtypes[0]

    def arg(*shape: int, dt: DType = dtype) -> Arg:
        return Arg(shape, dt, 0 if dt.is_unsigned else low, high)

    rows = [
        ("axis", arg(3, 5), 1),
        ("axis0", arg(4, 3), 0),
        ("last", arg(2, 3, 4), -1),
        ("0d", arg(), 0),
        ("T", arg(4, 6).T, 1),
        ("size1", arg(1, 4), 0),
        ("empty", arg(3, 0), 1),
        ("empty_across", arg(0, 3), 1),
        *((dt.name, arg(3, 5, dt=dt), 1) for dt in dtypes[1:]),
    ]
    if special and dtype == f32:
        rows.append(("special", values(*SPECIAL, shape=(4, 4)), 1))
    cases = [(v, _bind(ours, ax), _bind(ref, ax), (x,), v != "special") for v, x, ax in rows]
    return _expand(f"{op}-{tag}" if tag else op, cases, grad, tol, xfail)


def _bind(fn: Callable[..., Any], *params: Any) -> Callable[..., Any]:
    return lambda x: fn(x, *params)


# ---- running a case ------------------------------------------------------------------------------


@functools.cache
def cpu_has_half() -> bool:
    """Whether the C compiler the CPU backend picked here accepts ``_Float16``."""
    try:
        return (Tensor([1.0], dtype=f16, device="CPU") + 1).tolist() == [2.0]
    except CompileError:
        return False


def tolerance(dtype: DType) -> dict[str, float]:
    """How close a ``dtype`` result must be to torch's."""
    if dtype == f16:
        return {"rtol": 5e-3, "atol": 5e-3}
    if dtype == f64:
        return {"rtol": 1e-6, "atol": 1e-9}
    if dtype.is_float:
        return {"rtol": 1e-4, "atol": 1e-5}
    return {"rtol": 0, "atol": 0}


def outputs(out: Any) -> tuple[Any, ...]:
    return tuple(out) if isinstance(out, tuple | list) else (out,)


def kind_of(dtype: Any) -> str:
    """ "bool", "int" or "float", for fusegrad's and torch's dtypes alike."""
    if dtype in (bool_, torch.bool):
        return "bool"
    is_float = dtype.is_float if isinstance(dtype, DType) else dtype.is_floating_point
    return "float" if is_float else "int"


def assert_matches(got: np.ndarray, got_kind: str, want: Any, tol: Mapping[str, float], what: str):
    want_np = want.detach().numpy() if isinstance(want, torch.Tensor) else np.asarray(want)
    assert got.shape == want_np.shape, f"{what}: shape {got.shape}, torch {want_np.shape}"
    if isinstance(want, torch.Tensor):
        want_kind = kind_of(want.dtype)
        assert got_kind == want_kind, f"{what}: a {got_kind} result, torch's is {want_kind}"
    np.testing.assert_allclose(
        got.astype(np.float64), want_np.astype(np.float64), equal_nan=True, err_msg=what, **tol
    )


def check(c: OpCase, device: str, request: pytest.FixtureRequest | None = None) -> None:
    """Run ``c`` on ``device`` and in torch; assert the outputs and gradients match (on an
    ``EXTRA_DEVICES`` device the outputs only)."""
    reason = c.xfail.get(device) or c.xfail.get("*")
    if reason and request is not None:
        # a "*" bug may be in the gradients, which an extra device does not compare
        strict = device in c.xfail or device not in EXTRA_DEVICES
        request.applymarker(pytest.mark.xfail(strict=strict, reason=reason))
    if device == "CPU" and any(a.dtype == f16 for a in c.args) and not cpu_has_half():
        pytest.skip("this C compiler lacks _Float16 (tested in test_tensor_ops)")
    if device in EXTRA_DEVICES:
        require_dtypes(device, *(a.dtype for a in c.args))
        c = replace(c, grad=False)
    rng = np.random.default_rng(zlib.crc32(c.id.encode()))
    arrays = [a.array(rng) for a in c.args]
    leaves = [Tensor(x, device=device) for x in arrays]
    tleaves = [_torch_leaf(x, a, c.grad) for x, a in zip(arrays, c.args, strict=True)]
    got = outputs(c.ours(*(a.viewed(t) for a, t in zip(c.args, leaves, strict=True))))
    want = outputs(c.theirs(*(a.viewed(t) for a, t in zip(c.args, tleaves, strict=True))))
    assert len(got) == len(want), f"{c.id}: {len(got)} outputs, torch has {len(want)}"
    wanted = [i for i, a in enumerate(c.args) if c.grad and a.wants_grad]
    weighted = [(g, w) for g, w in zip(got, want, strict=True) if w.requires_grad]
    if not wanted or not weighted:
        wanted = []
    grads = _gradients(weighted, [leaves[i] for i in wanted], [tleaves[i] for i in wanted], rng)
    _realize(device, *got, *(g for g, _ in grads))
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        tol = c.tol or tolerance(g.dtype)
        try:
            assert_matches(g.numpy(), kind_of(g.dtype), w, tol, f"{c.id} output {i}")
        except AssertionError:
            if device in NOT_PROMISED and not _all_finite(*arrays, w):
                pytest.xfail(NOT_PROMISED[device])
            raise
    for i, (g, w) in zip(wanted, grads, strict=True):
        tol = c.tol or tolerance(f32)
        assert_matches(g.numpy(), "float", w, tol, f"{c.id} gradient of input {i}")


def _realize(device: str, *tensors: Tensor) -> None:
    """Realize ``tensors``; on an extra device, skip when a result's dtype is one it cannot hold
    (float64 on WEBGPU: torch's float_power, ``sum(dtype=float64)``)."""
    try:
        Tensor.realize(*tensors)
    except UnsupportedOp as e:
        if device not in EXTRA_DEVICES or "cannot hold" not in str(e):
            raise
        pytest.skip(str(e).split(";")[0])


def _all_finite(*arrays: Any) -> bool:
    """Whether every float element of ``arrays`` (numpy's or torch's) is finite."""
    as_numpy = (
        np.asarray(a.detach().numpy() if isinstance(a, torch.Tensor) else a) for a in arrays
    )
    return all(np.isfinite(a).all() for a in as_numpy if a.dtype.kind == "f")


def _torch_leaf(array: np.ndarray, arg: Arg, grad: bool) -> Any:
    t = torch.from_numpy(array.copy())
    if arg.kind == "index":
        return t.long()
    return t.requires_grad_(grad and arg.wants_grad)


def _gradients(
    weighted: list[tuple[Tensor, Any]],
    leaves: list[Tensor],
    tleaves: list[Any],
    rng: np.random.Generator,
) -> list[tuple[Tensor, Any]]:
    """(ours, torch's) d(sum(out * w)) / d(leaf) for each leaf, ``w`` a random weight per output:
    ours lazy, so that it runs with the outputs."""
    if not leaves:
        return []
    weights = [rng.uniform(-1, 1, tuple(w.shape)).astype(np.float32) for _, w in weighted]
    device = leaves[0].device
    loss = sum(
        (g * Tensor(x, device=device)).sum() for (g, _), x in zip(weighted, weights, strict=True)
    )
    tloss = sum(
        (w * torch.from_numpy(x)).sum() for (_, w), x in zip(weighted, weights, strict=True)
    )
    tgrads = torch.autograd.grad(tloss, tleaves, allow_unused=True)
    tgrads = [torch.zeros_like(t) if g is None else g for t, g in zip(tleaves, tgrads, strict=True)]
    return list(zip(loss.gradient(*leaves), tgrads, strict=True))
