"""fusegrad: lazy tensors, fused kernels, every device a plugin.

``import fusegrad`` loads no backend and starts no subprocess; devices are discovered on first use.
"""

from fusegrad.caches import reset as reset_caches
from fusegrad.device import Device
from fusegrad.dtype import DType, dtypes
from fusegrad.engine.realize import GlobalCounters
from fusegrad.helpers import Context, context
from fusegrad.jit import TinyJit
from fusegrad.profiler import profile, start_from_environment
from fusegrad.tensor import Tensor
from fusegrad.uop.ops import Variable
from fusegrad.viz import start_from_environment as start_viz

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
    "profile",
    "reset_caches",
]
__version__ = "0.1.0"

start_from_environment()  # PROFILE=1: profile the whole program, write the trace at exit
start_viz()  # VIZ=1: record every kernel's stages, show them at exit (after PROFILE's start)
