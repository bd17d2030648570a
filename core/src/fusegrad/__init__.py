"""fusegrad: lazy tensors, fused kernels, every device a plugin.

``import fusegrad`` loads no backend and starts no subprocess; devices are discovered on first use.
"""

from fusegrad.caches import reset as reset_caches
from fusegrad.device import Device
from fusegrad.dtype import DType, dtypes
from fusegrad.engine.realize import GlobalCounters
from fusegrad.helpers import Context, context
from fusegrad.jit import TinyJit
from fusegrad.tensor import Tensor
from fusegrad.uop.ops import Variable

__all__ = [
    "Context",
    "DType",
    "Device",
    "GlobalCounters",
    "Tensor",
    "TinyJit",
    "Variable",
    "context",
    "dtypes",
    "reset_caches",
]
__version__ = "0.1.0"
