"""Tensors to and from host arrays as stored in files: the one place that knows bfloat16 is
kept on the host as its raw uint16 bits (numpy has no bfloat16)."""

from __future__ import annotations

import numpy as np

from fusegrad.dtype import DType, dtypes
from fusegrad.tensor import Tensor


def host_array(t: Tensor) -> np.ndarray:
    """``t``'s values as stored, in a C-ordered numpy array: bfloat16 as its raw uint16 bits."""
    if t.dtype != dtypes.bfloat16:
        return np.asarray(t.numpy(), order="C")
    if t.numel() == 0:
        return np.zeros(t.shape, dtype=np.uint16)
    return t.contiguous()._buffer().numpy().reshape(t.shape)


def tensor_from_host(array: np.ndarray, dtype: DType, device: str | None = None) -> Tensor:
    """A Tensor of ``dtype`` from values as stored (bfloat16 given as raw uint16 bits).

    A stored bool is any byte, nonzero meaning True: read as is, a byte of 2 would be a bool
    that is neither True nor False to the kernels (``x == True`` false, ``~x`` not 0 or 1).
    """
    if dtype == dtypes.bool and array.dtype.itemsize == 1:
        return Tensor(np.ascontiguousarray(array).view(np.uint8) != 0, device=device)
    if dtype != dtypes.bfloat16:
        return Tensor(np.asarray(array, dtype=dtype.np, order="C"), device=device)
    # a bfloat16 is the top half of a float32, so widening is exact and casting back is lossless
    widened = np.asarray(np.asarray(array, dtype=np.uint32) << 16).view(np.float32)
    return Tensor(widened, device=device).cast(dtypes.bfloat16)
