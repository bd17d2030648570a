"""Fixtures shared by every test: the devices core's tests run on."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fusegrad import Tensor, reset_caches
from fusegrad.device import Device
from fusegrad.dtype import DType
from fusegrad.helpers import Context
from fusegrad.tensor import bounds

#: every kernel the tests generate is verified before it compiles (codegen/verify.py): a kernel
#: dividing by zero or leaving its buffers fails its test with the kernel named, not the process
Context.VERIFY = 1


@pytest.fixture(autouse=True)
def _no_index_check_outlives_its_test() -> Iterator[None]:
    """A test that makes an out-of-range index and never reads leaves its check waiting
    (tensor/bounds.py): it must not fail the next test's first read."""
    yield
    bounds.forget()


@pytest.fixture(autouse=True)
def _training_mode_is_restored() -> Iterator[None]:
    """``Tensor.training`` is global (a training step sets it, as examples/gpt.py's does): each
    test ends with the mode it began with, so the tests after it see the default."""
    before = Tensor.training
    yield
    Tensor.training = before


def available(name: str) -> bool:
    """Whether a plugin offers device ``name`` and it can be used here."""
    spec = Device.specs().get(name)
    return spec is not None and spec.unavailable() is None


#: The devices core's op tests compare: the interpreter (the oracle), compiled C, OpenCL where a
#: driver is installed (PoCL's CPU device in CI) and CUDA where a GPU is, with the same tolerances.
DEVICES = ["PYTHON", "CPU"] + [name for name in ("OPENCL", "CUDA") if available(name)]


@pytest.fixture
def avx512_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """The CPU device planned as an AVX-512 one, whatever the host (or ``FUSEGRAD_CPU_ARCH``):
    the scheduler's layout pass (panel widths), the loop heuristics and the renderer then all
    see 32 registers of 64 bytes, as the tests written for that target expect (gcc still builds
    the kernels for the host: its vectoriser splits 64-byte loops into the host's vectors)."""
    reset_caches()  # (opens the devices again: patch the renderer after)
    renderer = Device["CPU"].renderer
    monkeypatch.setattr(renderer, "vector_registers", 32)
    monkeypatch.setattr(renderer, "vector_bytes", 64)
    yield renderer
    monkeypatch.undo()
    reset_caches()


@pytest.fixture(params=DEVICES)
def device(request: pytest.FixtureRequest) -> str:
    """Each device the core tests run on."""
    return request.param


@pytest.fixture(autouse=True)
def _skip_dtypes_the_device_lacks(request: pytest.FixtureRequest) -> None:
    """Skip a case whose parameters name a dtype its device cannot hold (float16 on a device
    without cl_khr_fp16): that the device refuses it clearly is tested in its backend's tests."""
    params = getattr(getattr(request.node, "callspec", None), "params", {})
    device = params.get("device")
    if device not in DEVICES or device in ("PYTHON", "CPU"):
        return  # not the ``device`` fixture's value (a test naming devices itself), or complete
    supported = Device[device].renderer.supported_dtypes
    values = [x for v in params.values() for x in (v if isinstance(v, tuple | list) else (v,))]
    lacking = sorted({v.name for v in values if isinstance(v, DType) and v not in supported})
    if lacking:
        pytest.skip(f"{device} cannot hold {', '.join(lacking)} on this machine")
