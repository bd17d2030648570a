"""``address_values``: the integer values a 64-bit target declares 64 bits wide (renderer
capability ``wide_addresses``) are those that only address memory."""

from __future__ import annotations

from fusegrad.dtype import dtypes
from fusegrad.renderer.cstyle import address_values
from fusegrad.uop.loops import AxisKind, LoopArg, LoopHint
from fusegrad.uop.ops import Ops, UOp


def _loop(axis: int, trips: int, hint: LoopHint = LoopHint.NONE) -> UOp:
    return UOp(
        Ops.RANGE,
        dtypes.int32,
        (UOp.const(dtypes.int32, trips),),
        LoopArg(axis, AxisKind.GLOBAL, hint),
    )


def _read(buffer: UOp, offset: UOp) -> tuple[UOp, UOp]:
    index = UOp(Ops.INDEX, dtypes.float32, (buffer, offset))
    return index, UOp(Ops.LOAD, dtypes.float32, (index,))


def test_a_counter_and_offsets_used_only_to_read_are_wide():
    buffer = UOp(Ops.PARAM, dtypes.float32, (), (0, 64))
    row = _loop(0, 16)
    offset = row * 4
    index, load = _read(buffer, offset)
    program = [buffer, row, offset, index, load, UOp(Ops.END, dtypes.void, (row,))]
    assert address_values(program) == {row, offset}


def test_a_counter_also_compared_stays_32_bit():
    """A value anything but an address reads (a comparison, a stored value) keeps its dtype:
    its 32-bit wrapping is part of what it means. The offset computed from it is still wide."""
    buffer = UOp(Ops.PARAM, dtypes.float32, (), (0, 64))
    row = _loop(0, 16)
    offset = row * 4
    index, load = _read(buffer, offset)
    below = UOp(Ops.CMPLT, dtypes.bool, (row, UOp.const(dtypes.int32, 3)))
    program = [buffer, row, offset, index, load, below, UOp(Ops.END, dtypes.void, (row,))]
    assert address_values(program) == {offset}


def test_values_moving_with_a_vector_loop_stay_32_bit():
    """A SIMD loop's offsets may be computed in vector lanes (a gather's): eight at 32 bits,
    four at 64. What they are computed from stays 32-bit with them."""
    buffer = UOp(Ops.PARAM, dtypes.float32, (), (0, 256))
    row, lane = _loop(0, 16), _loop(1, 16, LoopHint.SIMD)
    base = row * 16
    offset = base + lane
    index, load = _read(buffer, offset)
    end = UOp(Ops.END, dtypes.void, (lane,))
    program = [buffer, row, base, lane, offset, index, load, end, UOp(Ops.END, dtypes.void, (row,))]
    assert address_values(program) == set()


def test_an_offset_that_is_also_stored_stays_32_bit():
    """... and so does the counter it is computed from (a value is wide only when every use of
    it is)."""
    buffer = UOp(Ops.PARAM, dtypes.float32, (), (0, 64))
    out = UOp(Ops.PARAM, dtypes.int32, (), (1, 64))
    row = _loop(0, 16)
    offset = row * 4
    index, load = _read(buffer, offset)
    out_index = UOp(Ops.INDEX, dtypes.int32, (out, row))
    store = UOp(Ops.STORE, dtypes.void, (out_index, offset))
    program = [buffer, out, row, offset, index, load, out_index, store]
    program.append(UOp(Ops.END, dtypes.void, (row,)))
    assert address_values(program) == set()
