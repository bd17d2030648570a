"""``tensor_math.py`` against torch on random inputs, on each device (forward values only)."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor

from .torch_helpers import bool_, both, check, f16, f32, f64, i8, i32, i64, rand, tol, torch, u8  # noqa: F401

# ---- elementwise against torch: (name, fusegrad function, torch function, dtypes, input range) ----

UNARY = [
    ("floor", lambda x: x.floor(), torch.floor, (f32, f16, f64), 3),
    ("ceil", lambda x: x.ceil(), torch.ceil, (f32, f16, f64), 3),
    ("trunc", lambda x: x.trunc(), torch.trunc, (f32, f64), 3),
    ("round", lambda x: (x * 2).round(), lambda x: torch.round(x * 2), (f32, f16), 3),
    ("sign", lambda x: x.sign(), torch.sign, (f32, i32, i8), 3),
    ("erf", lambda x: x.erf(), torch.erf, (f32,), 3),
    (
        "gelu",
        lambda x: x.gelu(),
        lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
        (f32,),
        4,
    ),
    ("gelu_exact", lambda x: x.gelu("none"), torch.nn.functional.gelu, (f32,), 4),
    ("quick_gelu", lambda x: x.quick_gelu(), lambda x: x * torch.sigmoid(1.702 * x), (f32,), 4),
    ("silu", lambda x: x.silu(), torch.nn.functional.silu, (f32, f16), 4),
    ("swish", lambda x: x.swish(), torch.nn.functional.silu, (f32,), 4),
    (
        "leaky_relu",
        lambda x: x.leaky_relu(0.1),
        lambda x: torch.nn.functional.leaky_relu(x, 0.1),
        (f32,),
        4,
    ),
    ("elu", lambda x: x.elu(0.7), lambda x: torch.nn.functional.elu(x, 0.7), (f32,), 4),
    ("celu", lambda x: x.celu(1.5), lambda x: torch.nn.functional.celu(x, 1.5), (f32,), 4),
    ("softplus", lambda x: x.softplus(), torch.nn.functional.softplus, (f32,), 30),
    (
        "softplus_beta",
        lambda x: x.softplus(2, 5),
        lambda x: torch.nn.functional.softplus(x, 2, 5),
        (f32,),
        6,
    ),
    ("mish", lambda x: x.mish(), torch.nn.functional.mish, (f32,), 6),
    ("hardswish", lambda x: x.hardswish(), torch.nn.functional.hardswish, (f32,), 5),
    ("hardsigmoid", lambda x: x.hardsigmoid(), torch.nn.functional.hardsigmoid, (f32,), 5),
    (
        "hardtanh",
        lambda x: x.hardtanh(-0.5, 2),
        lambda x: torch.nn.functional.hardtanh(x, -0.5, 2),
        (f32,),
        3,
    ),
    ("softsign", lambda x: x.softsign(), torch.nn.functional.softsign, (f32,), 5),
    ("relu6", lambda x: x.relu6(), torch.nn.functional.relu6, (f32, i32), 9),
    ("clip", lambda x: x.clip(-1, 2), lambda x: torch.clamp(x, -1, 2), (f32, i32, u8), 3),
    ("clamp_min", lambda x: x.clamp(0.5), lambda x: torch.clamp(x, min=0.5), (f32,), 3),
    ("bitwise_not", lambda x: ~x, torch.bitwise_not, (i32, u8, i8, bool_), 50),
    ("isnan", lambda x: (x.log()).isnan(), lambda x: torch.isnan(torch.log(x)), (f32,), 3),
    (
        "isinf",
        lambda x: (1 / x.floor()).isinf(),
        lambda x: torch.isinf(1 / torch.floor(x)),
        (f32,),
        2,
    ),
    ("pow_int", lambda x: x**3, lambda x: x**3, (f32, i32, i8), 5),
    ("pow_neg_int", lambda x: x**-2, lambda x: x**-2, (f32,), 5),
    ("pow_float", lambda x: x.abs() ** 2.5, lambda x: x.abs() ** 2.5, (f32,), 5),
    ("pow_neg_base", lambda x: x**1.5, lambda x: x**1.5, (f32,), 5),
    ("rpow", lambda x: 2**x, lambda x: 2**x, (f32, i32), 5),
    (
        "floordiv_scalar",
        lambda x: x // 3,
        lambda x: torch.div(x, 3, rounding_mode="floor"),
        (i32, i8, f32),
        20,
    ),
    (
        "floordiv_neg",
        lambda x: x // -4,
        lambda x: torch.div(x, -4, rounding_mode="floor"),
        (i32, f32),
        20,
    ),
    ("mod_scalar", lambda x: x % 3, lambda x: x % 3, (i32, i8, i64), 20),
    ("mod_neg", lambda x: x % -3, lambda x: x % -3, (i32,), 20),
    ("mod_float", lambda x: x % 2.5, lambda x: x % 2.5, (f32,), 20),
    ("lshift", lambda x: x << 2, lambda x: x << 2, (i32, u8), 20),
    ("rshift", lambda x: x >> 1, lambda x: x >> 1, (i32, u8), 20),
]


@pytest.mark.parametrize("name, fn, ref, dtypes_, r", UNARY, ids=[u[0] for u in UNARY])
def test_unary(device, name, fn, ref, dtypes_, r):
    for dtype in dtypes_:
        low = 0 if dtype.is_unsigned else -r
        t, tt = both(rand((3, 5), dtype, low, r), device, transpose=True)
        check(fn(t), ref(tt), **({"rtol": 1e-4, "atol": 1e-5} if dtype == f32 else {}))


def test_round_half_to_even(device):
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 2.4999, -0.6, 1e10 + 0.5], dtype=np.float32)
    check(Tensor(x, device=device).round(), torch.round(torch.from_numpy(x)))


def test_trunc_huge_and_special(device):
    x = np.array([3e9, -3e9, 1e30, np.inf, -np.inf, np.nan, -0.7], dtype=np.float32)
    check(Tensor(x, device=device).trunc(), np.trunc(x), equal_nan=True)
    check(Tensor(x, device=device).floor(), np.floor(x), equal_nan=True)


BINARY = [
    ("pow_tensor", lambda a, b: a.abs() ** b, lambda a, b: a.abs() ** b, f32),
    ("pow_int_tensor", lambda a, b: a ** b.abs(), lambda a, b: a ** b.abs(), i32),
    ("floordiv", lambda a, b: a // b, lambda a, b: torch.div(a, b, rounding_mode="floor"), f32),
    ("floordiv_int", lambda a, b: a // b, lambda a, b: torch.div(a, b, rounding_mode="floor"), i32),
    ("mod_int", lambda a, b: a % b, lambda a, b: a % b, i32),
    ("mod_float", lambda a, b: a % b, lambda a, b: a % b, f32),
    ("rmod_int", lambda a, b: 7 % b, lambda a, b: 7 % b, i32),
    ("and", lambda a, b: a & b, lambda a, b: a & b, i32),
    ("or", lambda a, b: a | b, lambda a, b: a | b, i32),
    ("xor", lambda a, b: a ^ b, lambda a, b: a ^ b, i32),
    ("and_bool", lambda a, b: (a > 0) & (b > 0), lambda a, b: (a > 0) & (b > 0), i32),
    ("logical_and", lambda a, b: a.logical_and(b), torch.logical_and, i32),
    ("logical_or", lambda a, b: a.logical_or(b), torch.logical_or, i32),
    ("logical_xor", lambda a, b: a.logical_xor(b), torch.logical_xor, f32),
    ("lerp", lambda a, b: a.lerp(b, 0.3), lambda a, b: torch.lerp(a, b, 0.3), f32),
    (
        "lerp_tensor",
        lambda a, b: a.lerp(b, b.sigmoid()),
        lambda a, b: torch.lerp(a, b, b.sigmoid()),
        f32,
    ),
    ("clip_tensor", lambda a, b: a.clip(b, b + 1), lambda a, b: torch.clamp(a, b, b + 1), f32),
]


@pytest.mark.parametrize("name, fn, ref, dtype", BINARY, ids=[b[0] for b in BINARY])
def test_binary_broadcast(device, name, fn, ref, dtype):
    a, ta = both(rand((4, 1, 3), dtype, -9, 9), device)
    b = rand((5, 1), dtype, -4, 4)
    b = np.where(b == 0, 1, b).astype(dtype.np)  # no division by zero
    tb, tt = both(b, device)
    check(fn(a, tb), ref(ta, tt), rtol=1e-4, atol=1e-5)


def test_pow_special_values(device):
    base = np.array([0.0, 0.0, 0.0, -2.0, -2.0, -8.0, 1.0, 4.0], dtype=np.float32)
    exp = np.array([2.0, 0.0, -1.0, 3.0, 2.0, 1 / 3, 0.0, 0.5], dtype=np.float32)
    want = torch.from_numpy(base) ** torch.from_numpy(exp)
    check(
        Tensor(base, device=device) ** Tensor(exp, device=device), want, equal_nan=True, rtol=1e-5
    )


def test_int_to_negative_power_raises_as_torch():
    with pytest.raises(RuntimeError, match="Integers to negative integer powers"):
        torch.tensor([2]) ** -2
    with pytest.raises(RuntimeError, match="integer tensors to negative integer powers"):
        Tensor([2, 3]) ** -2
    assert (Tensor([2.0]) ** -2).tolist() == [0.25]
    # a tensor exponent is no error in torch: only 1 and -1 have integer inverses, the rest is 0
    assert (Tensor([2, 1, -1, 0]) ** Tensor([-1, -3, -3, -1])).tolist() == [0, 1, -1, 0]


@pytest.mark.parametrize("op", ["lshift", "rshift", "bitwise_and", "bitwise_xor"])
def test_bitwise_of_floats_raises_as_torch(op):
    torch_name = {"lshift": "bitwise_left_shift", "rshift": "bitwise_right_shift"}.get(op, op)
    with pytest.raises(RuntimeError):
        getattr(torch.tensor([4.0]), torch_name)(1)
    with pytest.raises(RuntimeError, match="need integer or bool tensors, got float32"):
        getattr(Tensor([4.0]), op)(1)


def test_div_rounding_modes():
    a, b = Tensor([-7, 7, -1]), Tensor([2, -2, 4])
    assert a.div(b, rounding_mode="trunc").tolist() == [-3, -3, 0]
    assert a.div(b, rounding_mode="floor").tolist() == [-4, -4, -1]
    with pytest.raises(RuntimeError):
        torch.div(torch.tensor([1.0]), 2, rounding_mode="round")
    with pytest.raises(RuntimeError, match="rounding_mode must be None, 'trunc' or 'floor'"):
        Tensor([1.0]).div(2, rounding_mode="round")


# ---- reductions --------------------------------------------------------------------------------


@pytest.mark.parametrize("axis, keepdim", [(None, False), (0, False), (1, True), (-1, False)])
def test_softmax_family(device, axis, keepdim):
    t, tt = both(rand((4, 6), f32, -5, 5), device, transpose=True)
    ax = -1 if axis is None else axis
    check(t.softmax(ax), torch.softmax(tt, ax))
    check(t.log_softmax(ax), torch.log_softmax(tt, ax), rtol=1e-5, atol=1e-5)
    want = torch.logsumexp(tt, tuple(range(tt.ndim)) if axis is None else axis, keepdim)
    check(t.logsumexp(axis, keepdim), want, rtol=1e-5, atol=1e-5)


def test_softmax_is_three_kernels():
    x = Tensor(rand((8, 16)), device="CPU")
    assert len(x.softmax(-1).schedule()) == 3


def test_logsumexp_of_all_minus_inf(device):
    x = np.full((2, 3), -np.inf, dtype=np.float32)
    check(Tensor(x, device=device).logsumexp(1), torch.logsumexp(torch.from_numpy(x), 1))


@pytest.mark.parametrize("dtype", [f32, i32, u8])
@pytest.mark.parametrize("axis, keepdim", [(None, False), (0, True), (1, False), (-1, True)])
def test_argmax_argmin_first_on_ties(device, dtype, axis, keepdim):
    t, tt = both(rand((5, 7), dtype, 0, 3), device, transpose=True)  # few values: many ties
    check(t.argmax(axis, keepdim), torch.argmax(tt, axis, keepdim))
    check(t.argmin(axis, keepdim), torch.argmin(tt, axis, keepdim))


@pytest.mark.parametrize("dtype", [f32, i32, bool_])
@pytest.mark.parametrize("axis, keepdim", [(None, False), (0, False), (1, True), ((0, 2), False)])
def test_prod(device, dtype, axis, keepdim):
    t, tt = both(
        rand((3, 37, 2), dtype, -2, 2) if dtype != f32 else rand((3, 37, 2), f32, 0.8, 1.2), device
    )
    if axis is None:
        want = torch.prod(tt)
    elif isinstance(axis, int):
        want = torch.prod(tt, axis, keepdim)
    else:
        want = torch.prod(torch.prod(tt, 2, keepdim), 0, keepdim)
    check(t.prod(axis, keepdim), want, rtol=1e-5)


def test_prod_empty_and_zero(device):
    check(Tensor.zeros(3, 0, device=device).prod(1), torch.ones(3))
    check(Tensor([[2.0, 0.0, 3.0]], device=device).prod(1), [0.0])


@pytest.mark.parametrize(
    "axis, keepdim, correction", [(None, False, 1), (0, True, 0), (1, False, 2)]
)
def test_var_std(device, axis, keepdim, correction):
    t, tt = both(rand((6, 5)), device, transpose=True)
    ax = tuple(range(2)) if axis is None else axis
    check(
        t.var(axis, keepdim, correction), torch.var(tt, ax, correction=correction, keepdim=keepdim)
    )
    check(
        t.std(axis, keepdim, correction), torch.std(tt, ax, correction=correction, keepdim=keepdim)
    )
    check(
        t.std_mean(axis, keepdim, correction),
        torch.std_mean(tt, ax, correction=correction, keepdim=keepdim),
    )
    check(
        t.var_mean(axis, keepdim, correction),
        torch.var_mean(tt, ax, correction=correction, keepdim=keepdim),
    )


# ---- scans and sorting ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [f32, i32])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scans(device, dtype, axis):
    t, tt = both(
        rand((4, 6), dtype, -2, 2) if dtype.is_int else rand((4, 6), dtype, 0.5, 1.5), device, True
    )
    check(t.cumsum(axis), torch.cumsum(tt, axis))
    check(t.cumprod(axis), torch.cumprod(tt, axis), rtol=1e-5)
    check(t.cummax(axis).values, torch.cummax(tt, axis).values)
    check(t.cummin(axis).values, torch.cummin(tt, axis).values)


def test_cumsum_0d_and_size_1(device):
    check(Tensor(3.0, device=device).cumsum(0), torch.cumsum(torch.tensor(3.0), 0))
    check(Tensor([[1.0, 2.0]], device=device).cumsum(0), [[1.0, 2.0]])


@pytest.mark.parametrize("dtype", [f32, i32])
@pytest.mark.parametrize(
    "k, dim, largest", [(3, -1, True), (2, 0, False), (1, 1, True), (5, -1, False)]
)
def test_topk(device, dtype, k, dim, largest):
    x = np.random.default_rng(k).permutation(40).reshape(5, 8).astype(dtype.np)  # distinct values
    t, tt = both(x, device, transpose=True)
    got, want = t.topk(k, dim, largest), torch.topk(tt, k, dim, largest)
    check(got, (want.values, want.indices))


@pytest.mark.parametrize("descending", [False, True])
def test_sort_is_stable(device, descending):
    x = rand((3, 9), i32, 0, 3)
    t, tt = both(x, device)
    want = torch.sort(tt, stable=True, dim=-1, descending=descending)
    check(t.sort(-1, descending), (want.values, want.indices))
    check(t.argsort(-1, descending), want.indices)


@pytest.mark.parametrize(
    "start, end, steps, dtype",
    [(5, 10, 3, None), (5, 10, 1, None), (5, 10, 0, None), (-5.5, 5.5, 10, None),
     (5.5, -5.5, 10, None), (0, 1, 7, f64), (5, 10, 20, i32), (5, -5, 20, i32), (-3, 7, 11, i8)],
)
def test_linspace(device, start, end, steps, dtype):
    t = Tensor.linspace(start, end, steps, dtype=dtype, device=device)
    want = torch.linspace(start, end, steps, dtype=getattr(torch, dtype.name) if dtype else None)
    assert t.dtype == (dtype or f32) and t.device == device
    check(t, want, rtol=1e-6, atol=1e-6)


def test_linspace_refuses_as_torch():
    for steps, dtype in [(-1, None), (3, bool_)]:
        with pytest.raises(RuntimeError):
            torch.linspace(1, 2, steps, dtype=torch.bool if dtype else None)
        with pytest.raises(RuntimeError, match="linspace needs steps >= 0"):
            Tensor.linspace(1, 2, steps, dtype=dtype)


@pytest.mark.parametrize("op", ["cumprod", "cummax", "cummin", "logcumsumexp", "cumsum"])
@pytest.mark.parametrize("shape, axis", [((), 1), ((20,), 1), ((20,), -2)])
def test_scan_axis_out_of_range(op, shape, axis):
    with pytest.raises(IndexError):
        getattr(torch, op)(torch.zeros(shape), axis)
    with pytest.raises(IndexError, match=f"axis {axis} is out of range"):
        getattr(Tensor.zeros(*shape), op)(axis)


def test_cummax_returns_values_and_indices():
    out = Tensor([1.0, 3.0, 3.0, 2.0]).cummax(0)
    values, indices = out  # a pair, as torch.return_types.cummax
    assert out.values is values and out.indices is indices
    assert indices.dtype == i32 and indices.tolist() == [0, 1, 2, 2]


def test_remainder_of_bools_raises_as_torch():
    a = torch.tensor([True])
    for op in ("remainder", "fmod"):
        with pytest.raises(RuntimeError):
            getattr(torch, op)(a, a)
        with pytest.raises(RuntimeError, match="remainder of bool tensors is not defined"):
            getattr(Tensor([True]), op)(Tensor([True]))


def test_int_remainder_by_zero_is_zero():  # (torch raises ZeroDivisionError; a kernel cannot)
    a, zero = Tensor([7, -7, 0]), Tensor([0, 0, 0])
    assert (a % zero).tolist() == [0, 0, 0] and a.fmod(zero).tolist() == [0, 0, 0]


def test_isclose_refuses_negative_tolerances_as_torch():
    with pytest.raises(RuntimeError):
        torch.isclose(torch.ones(1), torch.ones(1), rtol=-1.0)
    with pytest.raises(RuntimeError, match="rtol and atol >= 0"):
        Tensor.ones(1).isclose(Tensor.ones(1), rtol=-1.0)


def test_cumprod_512_is_fast_and_exact():
    """A scan by doubling: 9 steps in 3 kernels, not an n*n product (minutes to compile)."""
    x = np.random.default_rng(0).uniform(0.5, 1.5, 512).astype(np.float32)
    x[[100, 300]] = [0.0, -2.0]
    t = Tensor(x, requires_grad=True)
    out = t.cumprod(0)
    assert len(out.schedule()) <= 3
    check(out, torch.cumprod(torch.from_numpy(x), 0), rtol=1e-5, atol=1e-30)
    g = (out * Tensor(np.ones(512, np.float32))).sum().gradient(t)[0]
    tx = torch.from_numpy(x).requires_grad_()
    torch.cumprod(tx, 0).sum().backward()
    check(g, tx.grad, rtol=1e-4, atol=1e-6)
