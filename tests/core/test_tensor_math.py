"""``tensor/math_ops.py``: what is not a comparison of values with torch (those are one line each in
tests/core/differential): errors as torch's, kernel counts, linspace's dtype and device."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor

from .torch_helpers import bool_, check, f32, f64, i8, i32, rand, torch

# ---- elementwise ---------------------------------------------------------------------------------


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


@pytest.mark.parametrize("device", ["CPU", "PYTHON"])
def test_fma_values_broadcasting_and_gradients_as_mul_then_add(device):
    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (1, 4), (3, 1)))
    xs = [Tensor(v, device=device, requires_grad=True) for v in (a, b, c)]
    out = xs[0].fma(xs[1], xs[2])
    (out * out).sum().backward()
    ts = [torch.tensor(v, requires_grad=True) for v in (a, b, c)]
    ref = ts[0] * ts[1] + ts[2]
    (ref * ref).sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-6, atol=1e-6)
    for x, t in zip(xs, ts):
        np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-5, atol=1e-5)
    assert Tensor([1, 2], device=device).fma(3, 1).tolist() == [4, 7]  # integers: exact
    assert Tensor([1.0, 2.0], device=device).fma(3, 0.5).tolist() == [3.5, 6.5]


def test_fma_rounds_once_on_the_cpu():
    """(1 + 2**-12)**2 - (1 + 2**-11) is 2**-24 exactly; the square alone rounds to 1 + 2**-11."""
    a = Tensor([1 + 2**-12])  # (exact in float32)
    assert a.fma(a, -(1 + 2**-11)).tolist() == [2.0**-24]
    assert (a * a - (1 + 2**-11)).tolist() == [0.0]


def test_div_rounding_modes():
    a, b = Tensor([-7, 7, -1]), Tensor([2, -2, 4])
    assert a.div(b, rounding_mode="trunc").tolist() == [-3, -3, 0]
    assert a.div(b, rounding_mode="floor").tolist() == [-4, -4, -1]
    with pytest.raises(RuntimeError):
        torch.div(torch.tensor([1.0]), 2, rounding_mode="round")
    with pytest.raises(RuntimeError, match="rounding_mode must be None, 'trunc' or 'floor'"):
        Tensor([1.0]).div(2, rounding_mode="round")


# ---- reductions --------------------------------------------------------------------------------


def test_softmax_is_one_row_kernel_on_the_cpu_and_three_on_a_grid():
    assert len(Tensor(rand((8, 16)), device="CPU").softmax(-1).schedule()) == 1
    assert len(Tensor(rand((8, 16)), device="PYTHON").softmax(-1).schedule()) == 3


# ---- scans and sorting ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "start, end, steps, dtype",
    [
        (5, 10, 3, None),
        (5, 10, 1, None),
        (5, 10, 0, None),
        (-5.5, 5.5, 10, None),
        (5.5, -5.5, 10, None),
        (0, 1, 7, f64),
        (5, 10, 20, i32),
        (5, -5, 20, i32),
        (-3, 7, 11, i8),
    ],
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


@pytest.mark.parametrize(
    "shape, axis",
    [((257,), 0), ((3, 1000), 1), ((1000, 3), 0), ((2, 9000), -1), ((2, 0, 700), 2)],
)
@pytest.mark.parametrize("dtype", [f32, i32, bool_])
def test_long_cumsum_matches_torch(shape, axis, dtype):
    """Past ``SCAN_WHOLE`` elements a cumsum runs in blocks; values as torch's, any dtype."""
    rng = np.random.default_rng(len(shape) + shape[-1])
    x = rng.uniform(-2, 2, shape) if dtype == f32 else rng.integers(-5, 6, shape)
    x = x.astype(np.float32 if dtype == f32 else np.int32 if dtype == i32 else bool)
    out, ref = Tensor(x).cumsum(axis), torch.from_numpy(x).cumsum(axis)
    check(out, ref, rtol=1e-5, atol=1e-3)


def test_long_cumsum_keeps_inf_and_nan_as_torch():
    x = np.ones(1000, np.float32)
    x[[10, 500]], x[700] = np.inf, -np.inf  # (inf from 10 on, nan from 700 on)
    check(Tensor(x).cumsum(0), torch.from_numpy(x).cumsum(0))
    y = np.arange(600, dtype=np.float32)
    y[:5] = [1, 2, np.inf, 3, 4]
    check(Tensor(y).cumsum(0), torch.from_numpy(y).cumsum(0))


def test_long_cumsum_gradient_matches_torch():
    x = np.random.default_rng(3).standard_normal((2, 3000)).astype(np.float32)
    w = np.random.default_rng(4).standard_normal((2, 3000)).astype(np.float32)
    t = Tensor(x, requires_grad=True)
    g = (t.cumsum(1) * Tensor(w)).sum().gradient(t)[0]
    tx = torch.from_numpy(x).requires_grad_()
    (tx.cumsum(1) * torch.from_numpy(w)).sum().backward()
    check(g, tx.grad, rtol=1e-4, atol=1e-3)


def test_long_cumsum_does_linear_work():
    """A cumsum of 2**20 floats was one masked sum of n*n additions (34 s a call on 2 cores);
    in blocks it is a few dozen operations an element."""
    from fusegrad.engine.realize import GlobalCounters

    n = 1 << 16
    x = Tensor(np.ones(n, np.float32)).realize()
    GlobalCounters.reset()
    out = x.cumsum(0).realize()
    assert GlobalCounters.global_ops < 100 * n
    assert out[-1].item() == n and out[12345].item() == 12346


@pytest.mark.parametrize("n, axis", [(1000, 0), (3001, 1)])
def test_blocked_scans_match_torch(monkeypatch, n, axis):
    """Past ``SCAN_DOUBLED`` elements cumprod, cummax, cummin and logcumsumexp scan blocks, then
    the blocks' ends (blocked again when those are many): values, indices (the latest among
    ties; nan wins), integers and gradients as torch's. Patched to 40, 1000 elements take two
    levels and 3001 three."""
    from fusegrad.tensor import scan

    monkeypatch.setattr(scan, "SCAN_DOUBLED", 40)
    rng = np.random.default_rng(n)
    shape = (n, 2) if axis == 0 else (2, n)
    x = (1 + rng.standard_normal(shape) * 0.01).astype(np.float32)
    ties = rng.integers(-3, 4, shape).astype(np.float32)
    ties[(0, 7) if axis == 1 else (7, 0)] = np.nan  # row 0: nan from 7 on
    ties[(1, slice(900, None)) if axis == 1 else (slice(900, None), 1)] = np.inf  # row 1: ties
    ints = rng.integers(-1, 2, shape).astype(np.int32) | 1  # +-1: exact products
    check(Tensor(x).cumprod(axis), torch.from_numpy(x).cumprod(axis), rtol=1e-4, atol=0)
    check(Tensor(ints).cumprod(axis), torch.from_numpy(ints).cumprod(axis))
    for op in ("cummax", "cummin"):
        for a in (ties, x):
            got, want = getattr(Tensor(a), op)(axis), getattr(torch.from_numpy(a), op)(axis)
            check(got.values, want.values)
            check(got.indices, want.indices.int())
    check(Tensor(ties).logcumsumexp(axis), torch.from_numpy(ties).logcumsumexp(axis), rtol=1e-5)
    w = rng.standard_normal(shape).astype(np.float32)
    for op in ("cumprod", "logcumsumexp"):
        t, tx = Tensor(x, requires_grad=True), torch.from_numpy(x).requires_grad_()
        (grad,) = (getattr(t, op)(axis) * Tensor(w)).sum().gradient(t)
        (getattr(tx, op)(axis) * torch.from_numpy(w)).sum().backward()
        check(grad, tx.grad, rtol=1e-3, atol=1e-3)
    t, tx = Tensor(ties, requires_grad=True), torch.from_numpy(ties).requires_grad_()
    (grad,) = (t.cummax(axis).values * Tensor(w)).sum().gradient(t)
    (tx.cummax(axis).values * torch.from_numpy(w)).sum().backward()
    check(grad, tx.grad)


@pytest.mark.parametrize("n, dim", [(9, 1), (3001, 1), (700, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
def test_order_statistics_found_bit_by_bit_match_torch(monkeypatch, n, dim, dtype):
    """Past ``SELECT_SORTED`` elements kthvalue and median find the key of the wanted rank a bit
    at a time (patched to 4 here, so that 9 elements take that path too): values as torch's
    (inf, -0.0, nan ranked above inf; repeated integers), each index pointing at its value,
    median's indices as torch's (the first nan in a row that has one), gradients to the
    elements picked."""
    from fusegrad.tensor import search

    monkeypatch.setattr(search, "SELECT_SORTED", 4)
    rng = np.random.default_rng(n)
    shape = (4, n) if dim == 1 else (n, 4)
    if dtype == np.int32:
        x = rng.integers(-20, 20, shape).astype(np.int32)
    else:
        x = rng.standard_normal(shape).astype(dtype)
        flat = x.reshape(-1)
        flat[:4] = [np.inf, -np.inf, -0.0, 0.0]
        x[(1, 2) if dim == 1 else (2, 1)] = np.nan
    t, tx = Tensor(x), torch.from_numpy(x)
    for k in (1, 3, (n + 1) // 2, n):
        got, want = t.kthvalue(k, dim), tx.kthvalue(k, dim)
        check(got.values, want.values)
        picked = np.take_along_axis(x, np.expand_dims(got.indices.numpy(), dim), dim)
        np.testing.assert_array_equal(picked.squeeze(dim), want.values.numpy())
    for op in ("median", "nanmedian"):
        got, want = getattr(t, op)(dim), getattr(tx, op)(dim)
        check(got.values, want.values)
        if dtype != np.int32:  # (repeated integers: torch's index is one of theirs)
            check(got.indices, want.indices.int())
    if dtype == np.float32:
        g = Tensor(x, requires_grad=True)
        (grad,) = g.kthvalue(3, dim).values.sum().gradient(g)
        tg = torch.from_numpy(x).requires_grad_()
        tg.kthvalue(3, dim).values.sum().backward()
        check(grad, tg.grad)


@pytest.mark.parametrize("n, dim", [(9, 1), (3001, 1), (700, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
def test_topk_found_by_keys_matches_torch(monkeypatch, n, dim, dtype):
    """``topk`` of k up to half of an axis longer than ``SELECT_SORTED`` finds the k-th key bit
    by bit, picks the k up to it and sorts those (patched to 4, so that 9 elements take that
    path too): values as torch's, largest and smallest, with inf, nan (the largest), -0.0 and
    repeated integers, each index pointing at its value; the gradient goes to the k picked."""
    from fusegrad.tensor import search

    monkeypatch.setattr(search, "SELECT_SORTED", 4)
    rng = np.random.default_rng(n + 1)
    shape = (3, n) if dim == 1 else (n, 3)
    if dtype == np.int32:
        x = rng.integers(-20, 20, shape).astype(np.int32)
    else:
        x = rng.standard_normal(shape).astype(dtype)
        x.reshape(-1)[:6] = [np.inf, -np.inf, -0.0, 0.0, np.nan, np.nan]
    t, tx = Tensor(x), torch.from_numpy(x)
    for k in (1, 3, n // 2):
        for largest in (True, False):
            got, want = t.topk(k, dim, largest), tx.topk(k, dim, largest)
            check(got[0], want[0])
            picked = np.take_along_axis(x, got[1].numpy().astype(np.int64), dim)
            np.testing.assert_array_equal(picked, want[0].numpy())
    if dtype == np.float32:
        x = np.nan_to_num(x, nan=5.0)
        g, tg = Tensor(x, requires_grad=True), torch.from_numpy(x).requires_grad_()
        (grad,) = (g.topk(3, dim)[0] * 2).sum().gradient(g)
        (tg.topk(3, dim)[0] * 2).sum().backward()
        check(grad, tg.grad)


def test_a_search_of_32_dependent_passes_schedules_in_seconds():
    """The bit-by-bit search reads each pass's result twice: the online-softmax pass walked
    every path through such a graph (2**32) and a topk never returned. In a subprocess, with
    a time limit."""
    import subprocess
    import sys

    program = (
        "import numpy as np\n"
        "from fusegrad import Tensor\n"
        "x = Tensor(np.random.default_rng(0).standard_normal((2, 1000)).astype(np.float32))\n"
        "v, i = x.topk(5)\n"
        "assert v.numpy().shape == (2, 5)\n"
        "print(x.median(1).values.numpy().shape)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("op", ["sin", "cos", "tan"])
@pytest.mark.parametrize("scale", [1.0, 1e3, 1e6, 1e30])
def test_trigonometry_matches_torch_at_every_magnitude(op, scale):
    """On the CPU a sine is libmvec's vector one where gcc links it (within 2.1 ulp); a cosine
    is 1 - 2 sin(x/2)**2 (as the sine of pi/2 - x it was 1e-5 off at 1000, anything past 1e8),
    and so is the sine's gradient."""
    x = (np.random.default_rng(5).uniform(-1, 1, 5000) * scale).astype(np.float32)
    x[:4] = [np.inf, np.nan, -0.0, 1e-30]
    t = Tensor(x, requires_grad=True)
    out, tx = getattr(t, op)(), torch.from_numpy(x).requires_grad_()
    want = getattr(tx, op)()
    if op == "tan":  # (near its poles a tangent is as far off as its cosine's last bits)
        with np.errstate(invalid="ignore"):
            away = np.abs(np.cos(x.astype(np.float64))) > 0.01
        got, exact = out.numpy()[away], want.detach().numpy()[away]
        np.testing.assert_allclose(got, exact, rtol=1e-4, atol=1e-6)
        return
    check(out, want.detach(), rtol=2e-6, atol=1e-6)
    grad = out.sum().gradient(t)[0]
    want.sum().backward()
    finite = np.isfinite(x)
    np.testing.assert_allclose(grad.numpy()[finite], tx.grad.numpy()[finite], rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("n", [129, 1000, 4096])
@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("batched", [False, True])
def test_long_searchsorted_bisects_as_torch(n, right, batched):
    """Past ``SEARCH_COUNTED`` boundaries each value bisects (a gather a step, one kernel), as
    torch's search does: the same answers for ties, nan and inf values, nan boundaries."""
    rng = np.random.default_rng(n)
    b = np.sort(rng.integers(-50, 50, (3, n) if batched else n).astype(np.float32), -1)
    v = rng.integers(-60, 60, (3, 77) if batched else (5, 77)).astype(np.float32)
    v.flat[::13], v.flat[1::17], v.flat[2::19] = np.nan, np.inf, -np.inf
    if not batched:
        b[-3:] = np.nan  # (torch sorts nan last)
    got = Tensor(b).searchsorted(Tensor(v), right=right)
    want = torch.searchsorted(torch.from_numpy(b), torch.from_numpy(v), right=right)
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    ints = Tensor(b[..., :-3].astype(np.int32) if not batched else b.astype(np.int32))
    sevens = np.full(v[..., :5].shape, 7, np.int32)
    want = torch.searchsorted(torch.from_numpy(ints.numpy()), torch.from_numpy(sevens))
    np.testing.assert_array_equal(ints.searchsorted(Tensor(sevens)).numpy(), want)


def test_long_searchsorted_with_sorter_and_bucketize():
    rng = np.random.default_rng(0)
    b, v = rng.standard_normal(700).astype(np.float32), rng.standard_normal(300).astype(np.float32)
    order = np.argsort(b, kind="stable").astype(np.int64)
    got = Tensor(b).searchsorted(Tensor(v), sorter=Tensor(order.astype(np.int32)))
    np.testing.assert_array_equal(got.numpy(), np.searchsorted(b, v, sorter=order))
    s = np.sort(b)
    np.testing.assert_array_equal(
        Tensor(v).bucketize(Tensor(s), right=True).numpy(),
        torch.bucketize(torch.from_numpy(v), torch.from_numpy(s), right=True).numpy(),
    )


@pytest.mark.parametrize("dim", [0, 1])
def test_long_index_fill_looks_rows_up_as_torch(dim):
    """Past ``INDEX_COMPARED`` pairs each row is looked up in the sorted index (1,000 rows of
    2**20 compared 2**30 pairs, 301 ms); repeated indices, int32 and int64 alike."""
    rng = np.random.default_rng(dim)
    x = rng.standard_normal((3000, 2000) if dim == 0 else (2, 3000)).astype(np.float32)
    for index in (rng.integers(0, 3000, 2000), rng.integers(0, 3000, 1500).astype(np.int32)):
        got = Tensor(x).index_fill(dim, Tensor(index), -7.0)
        want = torch.from_numpy(x).index_fill(dim, torch.from_numpy(index.astype(np.int64)), -7.0)
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_long_index_fill_still_refuses_an_index_out_of_range():
    index = np.arange(3000)
    index[1234] = 3000
    with pytest.raises(IndexError, match="index_fill"):
        Tensor.zeros(3000, 2000).index_fill(0, Tensor(index), 1.0).numpy()


@pytest.fixture
def network_sort(monkeypatch):
    """Every sort past ``SORT_WHOLE`` elements by the bitonic network, however few its rows."""
    from fusegrad.tensor import scan

    monkeypatch.setattr(scan, "SORT_RANK_WORK", 0)


def _sortable(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if dtype == i32:
        return rng.integers(-20, 20, shape).astype(np.int32)
    x = rng.standard_normal(shape).astype(np.float32)
    x.flat[::37], x.flat[5::41], x.flat[3::53], x.flat[7::59] = np.nan, 1.0, -np.inf, np.inf
    return x.astype(np.float16) if dtype == "f16" else x


@pytest.mark.parametrize("n", [257, 1000, 1024, 1025])
@pytest.mark.parametrize("dtype", [f32, i32, bool_, "f16"])
@pytest.mark.parametrize("descending", [False, True])
def test_network_sort_matches_torch_stable_sort(network_sort, n, dtype, descending):
    """Values and indices as torch's stable sort: ties keep their order, nan above all."""
    x = _sortable((2, n), dtype, seed=n)
    values, indices = Tensor(x).sort(-1, descending=descending)
    want_v, want_i = torch.from_numpy(x).sort(dim=-1, descending=descending, stable=True)
    assert values.dtype == Tensor(x).dtype and indices.dtype == i32
    np.testing.assert_array_equal(values.numpy(), want_v.numpy())
    np.testing.assert_array_equal(indices.numpy(), want_i.numpy())


def test_network_topk_along_a_leading_dim_and_its_gradient(network_sort):
    x = np.random.default_rng(1).standard_normal((600, 3)).astype(np.float32)
    t = Tensor(x, requires_grad=True)
    values, indices = t.topk(5, dim=0)
    tx = torch.from_numpy(x).requires_grad_()
    want_v, want_i = tx.topk(5, dim=0)
    check(values, want_v)
    np.testing.assert_array_equal(indices.numpy(), want_i.numpy())
    w = np.random.default_rng(2).standard_normal((5, 3)).astype(np.float32)
    (want_v * torch.from_numpy(w)).sum().backward()
    check((values * Tensor(w)).sum().gradient(t)[0], tx.grad)
    smallest, where = t.topk(4, dim=0, largest=False)
    want_s, want_w = tx.detach().topk(4, dim=0, largest=False)
    check(smallest, want_s)
    np.testing.assert_array_equal(where.numpy(), want_w.numpy())


def test_long_sort_runs_a_network_not_every_pair():
    """A sort of 2**16 counted every pair's order (2**32 comparisons, and 2**40 for 2**20,
    hours); the bitonic network takes 136 steps of 2**16 elements."""
    from fusegrad.engine.realize import GlobalCounters

    x = np.random.default_rng(0).standard_normal(1 << 16).astype(np.float32)
    t = Tensor(x).realize()
    GlobalCounters.reset()
    values, indices = t.sort()
    Tensor.realize(values, indices)
    assert GlobalCounters.global_ops < 1 << 28
    want_v, want_i = torch.from_numpy(x).sort(stable=True)
    np.testing.assert_array_equal(values.numpy(), want_v.numpy())
    np.testing.assert_array_equal(indices.numpy(), want_i.numpy())
