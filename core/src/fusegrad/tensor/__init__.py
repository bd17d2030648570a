"""The lazy ``Tensor``: the class in ``tensor.py``, its methods by family in the mixin modules
beside it (``movement``, ``math_ops``, ``nn_ops``, ...), each one importing nothing above it."""

from fusegrad.tensor.movement import broadcast_shapes
from fusegrad.tensor.tensor import Tensor, buffer_of, realize_as_ready

__all__ = ["Tensor", "broadcast_shapes", "buffer_of", "realize_as_ready"]
