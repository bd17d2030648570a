"""OpenCL C: the core C-family renderer with OpenCL's spellings, one work-item per output element."""

from __future__ import annotations

from collections.abc import Iterable

from fusegrad.dtype import DType, dtypes
from fusegrad.renderer.cstyle import SHORT_TYPE_NAMES, CStyleRenderer
from fusegrad.uop.ops import UOp

#: the extension a device must report before a kernel may use a dtype
EXTENSION_FOR = {dtypes.float16: "cl_khr_fp16", dtypes.float64: "cl_khr_fp64"}


class OpenCLRenderer(CStyleRenderer):
    """Renders a kernel as an OpenCL C ``__kernel``; work-item ``i`` computes output element ``i``.

    ``extensions`` are the device's (``CL_DEVICE_EXTENSIONS``): float16 needs ``cl_khr_fp16`` and
    float64 ``cl_khr_fp64``; without them the dtype is not supported and core refuses it, naming
    the device. The launch covers exactly the output, so the grid index needs no guard.
    """

    grid_dims = 1
    kernel_prefix = "__kernel void"
    buffer_qualifier = "__global "
    type_names = SHORT_TYPE_NAMES
    float32_math_suffix = ""  # OpenCL's math functions are overloaded on every float type
    math_in_float32: frozenset[DType] = frozenset()  # with cl_khr_fp16 they take half too
    int64_suffixes = ("l", "ul")

    def __init__(self, device: str = "", extensions: Iterable[str] = ()):
        super().__init__(device)
        have = set(extensions)
        self.supported_dtypes = frozenset(
            d for d in dtypes.all() if d not in EXTENSION_FOR or EXTENSION_FOR[d] in have
        )

    def param_type(self, dtype: DType) -> str:
        """OpenCL forbids ``bool`` kernel arguments: a bool buffer is bytes, 0 or 1."""
        return "uchar" if dtype == dtypes.bool else self.type_name(dtype)

    def render_special(self, u: UOp) -> str:
        return "get_global_id(0)"

    def render_bitcast(self, x: str, src: DType, dtype: DType) -> str:
        return f"as_{self.param_type(dtype)}({x})"

    def prelude(self, program: list[UOp]) -> str:
        used = {u.dtype for u in program} | {s.dtype for u in program for s in u.src}
        pragmas = [
            f"#pragma OPENCL EXTENSION {EXTENSION_FOR[d]} : enable\n"
            for d in (dtypes.float16, dtypes.float64)
            if d in used
        ]
        return "".join(pragmas)
