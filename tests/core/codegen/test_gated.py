"""In-place writes that keep most rows skip the loops of the rows kept (codegen/gated.py)."""

from __future__ import annotations

import numpy as np

from fusegrad import Device, Tensor, Variable
from fusegrad.codegen.kernel import generate
from fusegrad.uop.ops import Ops, sym_eval


def _programs(t: Tensor) -> list[list]:
    rt = Device["CPU"]
    return [list(generate(s.ast, rt.renderer, rt.rules).program) for s in t.schedule()]


def _cache_write(cache: Tensor, length, position: int, row: np.ndarray) -> Tensor:
    """A KV cache's write as models/llama.py makes it: the first ``length`` rows, where a
    one-hot mask says, get ``row``; the others keep theirs."""
    n = cache.shape[1]
    mask = np.zeros((cache.shape[0], 1), np.float32)
    mask[position] = 1.0
    write = Tensor(mask[: sym_eval(length)]).reshape(length, 1)
    view = cache.shrink(((0, length), None))
    rows = write * Tensor(row).reshape(1, n)
    return view.assign((write > 0).where(rows, view))


def test_a_write_of_one_row_into_a_prefix_view_runs_the_rows_loops_under_its_condition():
    """The kernel stores the new value alone, inside an IF on the row's condition (the select
    and the read of the kept value are left unused); every other row keeps its values, at a
    concrete length and at a Variable's."""
    rng = np.random.default_rng(0)
    start = rng.standard_normal((16, 192)).astype(np.float32)
    cache = Tensor(start.copy()).realize()
    row = rng.standard_normal(192).astype(np.float32)
    (program,) = _programs(_cache_write(cache, 9, 4, row))
    gates = [u for u in program if u.op is Ops.IF]
    stores = [u for u in program if u.op is Ops.STORE]
    assert len(gates) == 1 and [u.op for u in program].count(Ops.ENDIF) == 1
    assert all(s.src[1].op is not Ops.WHERE for s in stores)
    assert program.index(gates[0]) < program.index(stores[0])
    _cache_write(cache, 9, 4, row).realize()
    want = start.copy()
    want[4] = row
    np.testing.assert_array_equal(cache.numpy(), want)
    n = Variable("n", 1, 16)
    _cache_write(cache, n.bind(12), 11, row * 2).realize()
    want[11] = row * 2
    np.testing.assert_array_equal(cache.numpy(), want)


def test_a_select_whose_condition_changes_per_element_is_left_alone():
    """``where(x > 0, y, x)`` into ``x``'s own buffer: the condition is the element's, so there
    is no loop to skip: the kernel keeps its select."""
    x_np = np.arange(-8, 8, dtype=np.float32).reshape(4, 4)
    x = Tensor(x_np.copy()).realize()
    view = x.shrink(((0, 3), None))
    done = view.assign((view > 0).where(view * 10, view))
    (program,) = _programs(done)
    assert not any(u.op is Ops.IF for u in program)
    done.realize()
    want = x_np.copy()
    want[:3] = np.where(want[:3] > 0, want[:3] * 10, want[:3])
    np.testing.assert_array_equal(x.numpy(), want)
