"""UOp hash-consing, ``UPat`` matching, ``PatternMatcher`` order and ``graph_rewrite``."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from fusegrad import Tensor, dtypes
from fusegrad.uop.ops import Ops, UOp, toposort
from fusegrad.uop.pattern import (
    PatternMatcher,
    UPat,
    fired_summary,
    graph_rewrite,
    rule_name,
    rules_fired,
)

f32, i32, bool_ = dtypes.float32, dtypes.int32, dtypes.bool


def var(name: str, dtype=i32, size: int = 10) -> UOp:
    """A distinct integer leaf (a loop variable ``0..size-1``); ``name`` keeps them apart."""
    return UOp(Ops.RANGE, dtype, (UOp.const(dtype, size),), (name, "global"))


def c(value, dtype=i32) -> UOp:
    return UOp.const(dtype, value)


x, y = var("x"), var("y")

# ---- hash-consing --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: c(3),
        lambda: c(1.5, f32),
        lambda: x + 1,
        lambda: (x * 4 + y) // 2,
        lambda: UOp(Ops.RESHAPE, f32, (c(1.0, f32),), (1, 1)),
    ],
)
def test_same_node_is_same_object(build):
    assert build() is build()


@pytest.mark.parametrize(
    "a, b",
    [
        (c(1, i32), c(1, f32)),  # dtype
        (c(1.0, f32), UOp(Ops.CONST, f32, (), 1)),  # 1.0 vs 1
        (c(0.0, f32), c(-0.0, f32)),  # equal floats, different bits
        (UOp(Ops.CONST, bool_, (), True), UOp(Ops.CONST, bool_, (), 1)),
        (x + 1, 1 + x),  # source order
        (x, var("x", size=11)),  # sources
    ],
)
def test_different_nodes_are_different_objects(a, b):
    assert a is not b


def test_tensor_graphs_are_hash_consed(device):
    t = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=device)
    assert (t * 4).uop is (t * 4).uop
    assert (t * 4 + 1).exp().uop is (t * 4 + 1).exp().uop
    assert (t * 4).uop is not (t * 5).uop


def test_dead_nodes_leave_the_table():
    """The table of live nodes holds them weakly: a node nobody uses is dropped with its entry,
    and building it again gives a fresh node."""
    import gc

    from fusegrad.uop import ops

    gc.collect()  # garbage of earlier tests would otherwise leave the table during the count
    before = len(ops._NODES)
    node = UOp(Ops.RESHAPE, f32, (c(123.25, f32),), (1, 1, 1, 7))
    assert UOp(Ops.RESHAPE, f32, (c(123.25, f32),), (1, 1, 1, 7)) is node
    assert len(ops._NODES) == before + 2  # the reshape and its constant
    del node
    gc.collect()
    assert len(ops._NODES) == before
    again = UOp(Ops.RESHAPE, f32, (c(123.25, f32),), (1, 1, 1, 7))
    assert again.arg == (1, 1, 1, 7) and len(ops._NODES) == before + 2


def test_toposort_puts_sources_first_in_order_once_each():
    a, b = var("a"), var("b")
    s = a + b
    top = s * a + (b + 1)
    order = toposort([top])
    assert len(order) == len(set(order)) and order[-1] is top
    assert all(order.index(src) < order.index(u) for u in order for src in u.src)
    # depth first, sources left to right: a's subtree is listed before b's
    assert order.index(a) < order.index(b) < order.index(s)
    assert toposort([s, top])[: len(toposort([s]))] == toposort([s])
    deep = a
    for _ in range(20000):  # no recursion limit
        deep = deep + 1
    assert toposort([deep])[-1] is deep


def test_uop_is_immutable():
    with pytest.raises(AttributeError, match="immutable"):
        x.arg = 3  # type: ignore[misc]
    assert x.replace(arg=("z", "global")) is var("z")


# ---- UPat ----------------------------------------------------------------------------------------


def matches(pat: UPat, u: UOp) -> dict | None:
    captures: dict = {}
    return captures if pat.match(u, captures) else None


@pytest.mark.parametrize(
    "pat, u, expected",
    [
        (UPat(Ops.ADD), x + 1, {}),
        (UPat(Ops.ADD), x * 2, None),
        (UPat({Ops.ADD, Ops.MUL}), x * 2, {}),
        (UPat(dtype=f32), c(1.0, f32), {}),
        (UPat(dtype=f32), c(1), None),
        (UPat(dtype={f32, i32}), c(1), {}),
        (UPat.var("a"), x, {"a": x}),
        (UPat.cvar("k"), c(3), {"k": c(3)}),
        (UPat.cvar("k"), x, None),
        (UPat.const(3), c(3), {}),
        (UPat.const(3), c(4), None),
        (UPat.const(1), c(1.0, f32), {}),  # 1 == 1.0: numbers compare by value
        (UPat.const(1), UOp.const(bool_, True), None),  # but True is not the number 1
        (UPat.var("a") + UPat.cvar("k"), x + 3, {"a": x, "k": c(3)}),
        (UPat.var("a") + UPat.var("a"), x + x, {"a": x}),  # one name, one node
        (UPat.var("a") + UPat.var("a"), x + y, None),
        (UPat(Ops.RANGE, arg=("x", "global")), x, {}),
        (UPat(Ops.RANGE, arg=("y", "global")), x, None),
        (UPat(Ops.ADD, src=(UPat.var("a"),)), x + 1, None),  # wrong number of sources
        (UPat(Ops.ADD, src=(UPat.var("a"),), allow_any_len=True), x + 1, {"a": x}),
        (UPat(Ops.ADD, src=UPat.var("a")), x + 1, None),
    ],
)
def test_upat_match(pat, u, expected):
    assert matches(pat, u) == expected


@pytest.mark.parametrize(
    "pat, u, expected",
    [
        (UPat.var("a") + UPat.cvar("k"), 3 + x, {"a": x, "k": c(3)}),  # ADD commutes
        (UPat.var("a") * UPat.cvar("k"), c(2) * x, {"a": x, "k": c(2)}),  # MUL commutes
        (
            UPat(Ops.MAX, src=(UPat.var("a"), UPat.cvar("k"))),
            UOp(Ops.MAX, i32, (c(0), x)),
            {"a": x, "k": c(0)},
        ),
        (UPat(Ops.CMPNE, src=(UPat.var("a"), UPat.cvar("k"))), c(0).ne(x), {"a": x, "k": c(0)}),
        (
            UPat(Ops.CMPLT, src=(UPat.var("a"), UPat.cvar("k"))),
            c(0).lt(x),
            None,
        ),  # < does not commute
        (UPat.var("a") // UPat.cvar("k"), c(8) // x, None),  # nor does //
        (UPat.var("a") % UPat.cvar("k"), c(8) % x, None),  # nor %
    ],
)
def test_upat_commutative(pat, u, expected):
    assert matches(pat, u) == expected


def test_failed_match_leaves_no_partial_captures_behind():
    # (a * k) + b against (x * y) + 3: the first order fails at k, the swapped order too
    pat = (UPat.var("a") * UPat.cvar("k")) + UPat.var("b")
    assert matches(pat, x * y + 3) is None
    assert matches(pat, 3 + x * 2) == {"a": x, "k": c(2), "b": c(3)}


# ---- PatternMatcher ------------------------------------------------------------------------------


def test_first_matching_rule_wins():
    first, second = c(100), c(200)
    pm = PatternMatcher([(UPat(Ops.ADD), lambda: first), (UPat(Ops.ADD), lambda: second)])
    assert pm.rewrite(x + 1) is first


def test_declining_rule_passes_to_the_next():
    second = c(200)
    pm = PatternMatcher([(UPat(Ops.ADD), lambda: None), (UPat(Ops.ADD), lambda: second)])
    assert pm.rewrite(x + 1) is second


def test_rule_returning_its_input_does_not_count():
    second = c(200)
    pm = PatternMatcher([(UPat(Ops.ADD, name="u"), lambda u: u), (UPat(Ops.ADD), lambda: second)])
    assert pm.rewrite(x + 1) is second


def test_no_rule_gives_none():
    pm = PatternMatcher([(UPat(Ops.MUL), lambda: c(0))])
    assert pm.rewrite(x + 1) is None


def test_table_order_holds_across_any_op_rules():
    a, b = c(1), c(2)
    pm = PatternMatcher([(UPat(), lambda: a), (UPat(Ops.ADD), lambda: b)])
    assert pm.rewrite(x + 1) is a  # the op-less rule comes first in the table
    pm = PatternMatcher([(UPat(Ops.ADD), lambda: b), (UPat(), lambda: a)])
    assert pm.rewrite(x + 1) is b


def test_tables_compose_with_plus_in_order():
    a, b = c(1), c(2)
    left = PatternMatcher([(UPat(Ops.ADD), lambda: a)])
    right = PatternMatcher([(UPat(Ops.ADD), lambda: b), (UPat(Ops.MUL), lambda: b)])
    both = left + right
    assert both.rewrite(x + 1) is a
    assert both.rewrite(x * 2) is b
    assert (right + left).rewrite(x + 1) is b


def test_ctx_is_passed_when_asked_for():
    seen = []
    pm = PatternMatcher([(UPat(Ops.ADD, name="u"), lambda ctx, u: seen.append((ctx, u)))])
    assert pm.rewrite(x + 1, ctx="context") is None
    assert seen == [("context", x + 1)]


# ---- graph_rewrite -------------------------------------------------------------------------------

ADD_ZERO = PatternMatcher([(UPat.var("a") + 0, lambda a: a)])


@pytest.mark.parametrize(
    "before, after",
    [
        (x + 0, x),
        ((x + 0) + 0, x),  # to a fixed point
        ((x + 0) * (y + 0), x * y),  # everywhere in the graph
        (((x + 0) * 2 + 0) // 3, (x * 2) // 3),
        (x * 2, x * 2),  # nothing to do: the same node back
    ],
)
def test_graph_rewrite(before, after):
    assert graph_rewrite(before, ADD_ZERO) is after


def test_rewrite_of_rewrite_output():
    # x*2 -> x+x, then x+x -> x*2 would loop; here the second rule finishes: x+x -> 2x via shl
    pm = PatternMatcher(
        [
            (UPat.var("a") * 2, lambda a: a + a),
            (UPat.var("a") + UPat.var("a"), lambda a: UOp(Ops.SHL, a.dtype, (a, c(1)))),
        ]
    )
    assert graph_rewrite(x * 2 + 5, pm) is UOp(Ops.SHL, i32, (x, c(1))) + 5


def test_shared_nodes_are_rewritten_once():
    calls = []
    pm = PatternMatcher([(UPat(Ops.MUL, name="m"), lambda m: calls.append(m))])
    shared = x * 3
    graph_rewrite((shared + 1) * (shared + 2), pm)
    assert calls.count(shared) == 1


def test_graph_rewrite_handles_deep_graphs():
    deep = x
    for _ in range(5000):
        deep = deep + 0
    assert graph_rewrite(deep, ADD_ZERO) is x


# ---- which rules fired (DEBUG=4) -----------------------------------------------------------------


def drop_mul_one(v: UOp) -> UOp:
    return v


def test_rules_fired_counts_each_rule_by_name_or_place():
    by_lambda = (UPat.var("v") + 0, lambda v: v)
    pm = PatternMatcher([by_lambda, (UPat.var("v") * 1, drop_mul_one)])
    with rules_fired() as fired:
        assert graph_rewrite((x + 0) * 1 + 0, pm) is x
    line = by_lambda[1].__code__.co_firstlineno
    assert {rule_name(fn): n for fn, n in fired.items()} == {
        f"test_pattern.py:{line}": 2,
        "drop_mul_one": 1,
    }
    assert fired_summary(fired) == f"rules fired: test_pattern.py:{line} x2, drop_mul_one x1"


def test_rules_are_counted_only_inside_the_block():
    with rules_fired() as outer:
        graph_rewrite(x + 0, ADD_ZERO)
        with rules_fired() as inner:
            graph_rewrite((x + 0) + 0, ADD_ZERO)
    graph_rewrite(x + 0, ADD_ZERO)
    assert sum(outer.values()) == 1 and sum(inner.values()) == 2
    assert fired_summary(Counter()) == "rules fired: none"
