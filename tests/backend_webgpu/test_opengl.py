"""WebGPU through the OpenGL adapter: GLSL leaves ``%`` of negative operands undefined and the
adapter's translation keeps WGSL's ``%`` (-7 % 2 gave 1, so -7 // 2 gave -3): the renderer
writes a signed remainder as ``a - (a / b) * b`` there."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

wgpu = pytest.importorskip("wgpu")

A = [7, -7, 7, -7, 5, -9, 0, -1, -128, 127]
B = [2, 2, -2, -2, 3, 4, 5, 3, 7, -5]

PROGRAM = f"""
import json
from fusegrad import Device, Tensor
assert "OpenGL" in Device["WEBGPU"].renderer.adapter, Device["WEBGPU"].renderer.adapter
out = {{}}
for dtype in ("int32", "int8", "int16"):
    a, b = Tensor({A!r}, dtype=dtype, device="WEBGPU"), Tensor({B!r}, dtype=dtype, device="WEBGPU")
    out[dtype] = [(a // b).tolist(), (a % b).tolist(), (a // 3).tolist(), (a % -3).tolist()]
print(json.dumps(out))
"""


def _has_opengl_adapter() -> bool:
    return any(a.info["backend_type"] == "OpenGL" for a in wgpu.gpu.enumerate_adapters_sync())


@pytest.mark.skipif(not _has_opengl_adapter(), reason="no OpenGL adapter here")
def test_signed_floor_division_and_remainder_are_right_through_opengl():
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env={**os.environ, "FUSEGRAD_WEBGPU_BACKEND": "opengl"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    a, b = np.array(A), np.array(B)
    for dtype, (div, mod, div3, mod3) in got.items():
        x, y = a.astype(dtype), b.astype(dtype)
        assert div == np.floor_divide(x, y).tolist(), dtype
        assert mod == np.mod(x, y).tolist(), dtype
        assert div3 == np.floor_divide(x, 3).astype(dtype).tolist(), dtype
        assert mod3 == np.mod(x, -3).astype(dtype).tolist(), dtype


def test_the_opengl_renderer_writes_the_remainder_through_division():
    from fusegrad_webgpu.renderer import WGSLRenderer

    assert WGSLRenderer(adapter="llvmpipe via OpenGL").remainder_by_division
    assert not WGSLRenderer(adapter="llvmpipe via Vulkan").remainder_by_division
