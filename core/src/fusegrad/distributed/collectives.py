"""Collectives on Tensors: each rank's tensor goes to a host buffer, MPI combines the buffers
(``comm.py``), and the result comes back as a Tensor on the input's device, of its dtype.

The host buffers are numpy arrays handed to mpi4py's buffer interface (``Allreduce`` and
friends, upper case): no pickling, no copy besides the device's. Reductions of float16 and
bfloat16 run in float32 (MPI has no reduction for either) and are cast back.
"""

from __future__ import annotations

import numpy as np

from fusegrad.distributed import comm
from fusegrad.dtype import DType, dtypes
from fusegrad.errors import InvalidIndex, InvalidType, UnknownOption
from fusegrad.tensor import Tensor

OPS = ("sum", "mean", "max", "min")


def to_host(t: Tensor) -> np.ndarray:
    """The values of ``t`` as a contiguous numpy array (bfloat16: its raw uint16 bits)."""
    if t.dtype == dtypes.bfloat16:
        return t.bitcast(dtypes.uint16).numpy()
    return np.asarray(t.numpy(), order="C")  # (ascontiguousarray would make a scalar 1-d)


def from_host(array: np.ndarray, device: str, dtype: DType) -> Tensor:
    """The inverse of ``to_host``: a Tensor on ``device`` holding ``array`` as ``dtype``."""
    if dtype == dtypes.bfloat16:
        return Tensor(array, device=device, dtype=dtypes.uint16).bitcast(dtypes.bfloat16)
    return Tensor(array, device=device, dtype=dtype)


def reduce_dtype(dtype: DType, op: str) -> DType:
    """The dtype MPI reduces ``dtype`` in: float32 for the half types, ``dtype`` otherwise."""
    if op not in OPS:
        raise UnknownOption(f"all_reduce op must be one of {', '.join(OPS)}; got {op!r}")
    if dtype == dtypes.bool and op in ("sum", "mean"):
        raise InvalidType(
            f"all_reduce op {op!r} is not defined for bool tensors; use 'max' (any) or 'min' "
            "(all), or cast to an integer dtype first"
        )
    if op == "mean" and dtype.kind != "f":
        raise InvalidType(
            f"all_reduce op 'mean' of a {dtype} tensor would round; use op='sum' and divide, "
            "or pass a float tensor"
        )
    return dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype


def _describe(t: Tensor) -> str:
    return f"{t.dtype.name} {tuple(t.shape)}"


def all_reduce(t: Tensor, op: str = "sum") -> Tensor:
    """``op`` ("sum", "mean", "max" or "min") of ``t`` over all ranks, on every rank.

    Every rank passes a tensor of the same shape and dtype; a mismatch raises
    ``CollectiveMismatch`` on every rank.
    """
    wire = reduce_dtype(t.dtype, op)
    comm.agree("all_reduce", f"{_describe(t)} op={op}")
    array = to_host(t if wire == t.dtype else t.cast(wire))
    if array.dtype == np.bool_:
        array = array.view(np.uint8)  # MAX and MIN of 0/1 bytes: any and all
    comm.wait(comm.start_allreduce(array, "sum" if op == "mean" else op), "all_reduce", array)
    if op == "mean":
        array /= comm.init().size
    out = from_host(array.view(np.bool_) if t.dtype == dtypes.bool else array, t.device, wire)
    return out if wire == t.dtype else out.cast(t.dtype)


def broadcast(t: Tensor, root: int = 0) -> Tensor:
    """Rank ``root``'s ``t`` on every rank (each rank passes a tensor of the same shape and
    dtype, whose values are ignored but on ``root``)."""
    comm.check_root(root)
    comm.agree("broadcast", f"{_describe(t)} root={root}")
    array = to_host(t)
    comm.wait(comm.start_broadcast(array, root), "broadcast", array)
    return from_host(array, t.device, t.dtype)


def all_gather(t: Tensor, axis: int = 0) -> Tensor:
    """Every rank's ``t`` concatenated along ``axis`` in rank order, on every rank.

    The sizes along ``axis`` may differ between ranks; the other sizes and the dtype may not.
    """
    if not -t.ndim <= axis < max(t.ndim, 1) or t.ndim == 0:
        raise InvalidIndex(
            f"all_gather axis {axis} does not exist in a {t.ndim}-d tensor of shape "
            f"{tuple(t.shape)}; reshape a scalar to (1,) first"
        )
    axis %= t.ndim
    others = tuple(s for i, s in enumerate(t.shape) if i != axis)
    signature = f"{t.dtype.name} {others} along axis {axis}"
    rows = comm.agree("all_gather", signature, int(t.shape[axis]))
    array = np.ascontiguousarray(np.moveaxis(to_host(t), axis, 0))
    gathered = np.moveaxis(comm.allgather_rows(array, rows), 0, axis)
    return from_host(np.ascontiguousarray(gathered), t.device, t.dtype)


def barrier() -> None:
    """Wait until every rank has called ``barrier``."""
    comm.barrier()


def rank() -> int:
    """This process's rank, 0..world_size()-1 (starts MPI on first use)."""
    return comm.init().rank


def world_size() -> int:
    """The number of ranks (1 for a plain ``python`` run)."""
    return comm.init().size
