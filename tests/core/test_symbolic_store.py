"""A kernel whose output size is a bound Variable stores only the elements of its real size.

A grid device launches threads for the variable's largest value; the threads past the real size
must store nothing, since ``Tensor.assign`` writes in place into the first rows of a realized
tensor and the rows after them are real data."""

import importlib
import importlib.util
import re

import numpy as np
import pytest
from conftest import DEVICES, available

from fusegrad import Tensor
from fusegrad.codegen.kernel import generate
from fusegrad.jit import TinyJit
from fusegrad.uop.ops import UOp, Variable

#: the core devices, and the grid devices whose drivers are here
STORE_DEVICES = list(
    dict.fromkeys(DEVICES + [d for d in ("OPENCL", "WEBGPU", "CUDA", "METAL") if available(d)])
)


@pytest.mark.parametrize("device", STORE_DEVICES)
def test_a_shorter_in_place_write_keeps_the_rows_after_it(device: str):
    total = Tensor.zeros(8, 4, device=device).contiguous().realize()
    rows = Variable("rows", 1, 8)

    def step(x: Tensor) -> Tensor:
        view = total.shrink(((0, x.shape[0]), None))
        return view.assign(view + x).realize()

    jitted = TinyJit(step)
    for n in (3, 3, 3, 2):
        x = Tensor(np.ones((n, 4), np.float32), device=device).reshape(rows.bind(n), 4)
        jitted(x)
    expected = np.zeros((8, 4), np.float32)
    expected[:3] = 3
    expected[:2] += 1
    np.testing.assert_array_equal(total.numpy(), expected)


#: each grid target's renderer (none of them needs its device to render), by its module
GRID_RENDERERS = {
    "fusegrad_opencl.renderer": ("OpenCLRenderer", ("OPENCL",)),
    "fusegrad_cuda.renderer": ("CUDARenderer", ("CUDA",)),
    "fusegrad_metal.renderer": ("MetalRenderer", ("METAL",)),
    "fusegrad_webgpu.renderer": (
        "WGSLRenderer",
        ("WEBGPU", frozenset(), None, "Test Adapter via Nothing"),
    ),
}


def grid_renderers() -> list:
    """A renderer of each grid target whose backend is installed."""
    found = []
    for module, (name, args) in GRID_RENDERERS.items():
        if importlib.util.find_spec(module.partition(".")[0]) is not None:
            found.append(getattr(importlib.import_module(module), name)(*args))
    return found


@pytest.mark.parametrize("renderer", grid_renderers(), ids=lambda r: type(r).__name__)
def test_threads_past_a_variable_size_return_before_they_store(renderer):
    """The flat index is guarded by the size this launch has, not the largest one."""
    from kernel_corpus import symbolic_kernels

    variable_sized = [ast for ast in symbolic_kernels() if isinstance(ast.src[-1].src[1].size, UOp)]
    assert variable_sized
    for ast in variable_sized:
        source = generate(ast, renderer).source
        bounds = re.findall(r"if \(gidx0 >= ([^)]+)\)", source)
        assert len(bounds) == 1 and not re.fullmatch(r"\d+i?", bounds[0]), source
        guard, store = source.index("if (gidx0 >="), source.index("data0[gidx0] =")
        assert guard < store, source
