"""Fixtures for the WEBGPU backend's tests: skipped, saying why, where no adapter can be found."""

from __future__ import annotations

import pytest


def _unavailable() -> str | None:
    try:
        import fusegrad_webgpu
    except ImportError:
        return "fusegrad-webgpu is not installed (pip install -e backend-webgpu wgpu)"
    return fusegrad_webgpu.probe()


if (_why := _unavailable()) is not None:
    pytest.skip(f"WEBGPU unavailable: {_why}", allow_module_level=True)


@pytest.fixture
def device() -> str:
    """The core op tests collected here run on WEBGPU only."""
    return "WEBGPU"


# (what WGSL does not promise, infinities and nan, is tests/core/differential's NOT_PROMISED)


@pytest.fixture(autouse=True)
def _adapter_dtypes(request: pytest.FixtureRequest) -> None:
    """A case whose dtype this adapter lacks (float16 without shader-f16, 64-bit types) is
    expected to be refused with UnsupportedOp; any other failure still fails."""
    from fusegrad import Device, dtypes
    from fusegrad.codegen.decompose import NARROW_INTS
    from fusegrad.dtype import DType
    from fusegrad.errors import UnsupportedOp

    if not request.node.function.__module__.startswith("core."):
        return  # this folder's own tests expect their refusals themselves
    params = getattr(request.node, "callspec", None)
    emulated = {*NARROW_INTS, dtypes.bool, dtypes.bfloat16}  # by core, on every adapter
    supported = Device["WEBGPU"].renderer.supported_dtypes | emulated
    missing = [
        v
        for v in (params.params.values() if params else ())
        if isinstance(v, DType) and v not in supported
    ]
    if missing:
        request.applymarker(
            pytest.mark.xfail(
                reason=f"this adapter cannot hold {missing[0].name}",
                raises=UnsupportedOp,
                strict=False,
            )
        )
