"""The CUDA backend on a real GPU: the driver binding (driver.py), memory, launches, tensor cores,
TinyJit and a training step, against numpy and the CPU device. Skipped where no GPU can be used
(core's op tests also run on CUDA there: tests/conftest.py's ``DEVICES``)."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor, TinyJit, dtypes
from fusegrad.codegen.kernel import generate
from fusegrad.device import Device
from fusegrad.nn.optim import SGD
from fusegrad.schedule.kernelize import KernelStep
from fusegrad.uop.ops import Variable

pytestmark = pytest.mark.usefixtures("gpu")


@pytest.fixture(scope="module")
def gpu() -> str:
    why = Device.specs()["CUDA"].unavailable()
    if why is not None:
        pytest.skip(f"CUDA unavailable: {why}")
    return "CUDA"


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int8, np.int64, np.bool_])
@pytest.mark.parametrize("n", [0, 1, 1023, 100_003])
def test_bytes_go_to_the_gpu_and_back_unchanged(dtype, n):
    data = (np.arange(n) % 7 - 3).astype(dtype)
    data.flags.writeable = False  # a read-only source is copied from as it is
    np.testing.assert_array_equal(Tensor(data, device="CUDA").numpy(), data)


def test_the_architecture_is_the_gpus_own():
    from fusegrad_cuda.device import open_device

    arch = open_device("CUDA").arch
    assert arch.startswith("sm_") and int(arch[3:]) >= 50
    assert Device["CUDA"].renderer.arch == arch


SCALE = """extern "C" __global__ void scale(float* out, const float* a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] * 3 + 1;
}"""


def test_a_launch_by_hand_computes_and_times_itself():
    runtime, n = Device["CUDA"], 100_000
    a = np.arange(n, dtype=np.float32)
    program = runtime.program("scale", runtime.compiler.compile(SCALE))
    src, out = runtime.allocator.alloc(a.nbytes), runtime.allocator.alloc(a.nbytes)
    runtime.allocator.copyin(src, memoryview(a).cast("B"))
    seconds = program(out, src, global_size=(n,), vals=(n,), wait=True)
    assert seconds is not None and 0 < seconds < 1
    got = np.empty_like(a)
    runtime.allocator.copyout(memoryview(got).cast("B"), out)
    for handle in (src, out):
        runtime.allocator.free(handle, a.nbytes)
    np.testing.assert_array_equal(got, a * 3 + 1)


def test_a_driver_error_names_the_call_and_the_reason():
    from fusegrad_cuda.driver import CUDAError, load_module

    with pytest.raises(CUDAError, match=r"cuModuleLoadData failed: .+ \(error \d+\)"):
        load_module(b"not a cubin")


def test_elementwise_reduce_and_matmul_equal_numpy():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((257, 513)).astype(np.float32)
    b = rng.standard_normal((513, 129)).astype(np.float32)
    x, y = Tensor(a, device="CUDA"), Tensor(b, device="CUDA")
    np.testing.assert_allclose((x.exp() * 2 - 1).numpy(), np.exp(a) * 2 - 1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(x.sum(1).numpy(), a.sum(1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(x.max(0).numpy(), a.max(0))
    np.testing.assert_allclose((x @ y).numpy(), a @ b, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(x.softmax(1).numpy().sum(1), np.ones(257), rtol=1e-5)


def test_a_long_reduction_runs_in_groups_of_threads():
    a = np.random.default_rng(2).standard_normal((4, 1 << 18)).astype(np.float32)
    got = Tensor(a, device="CUDA").sum(1).numpy()
    np.testing.assert_allclose(got, a.astype(np.float64).sum(1), rtol=1e-4, atol=1e-2)


@pytest.mark.parametrize("dtype", [dtypes.float16, dtypes.bfloat16])
def test_a_half_matmul_runs_on_tensor_cores(dtype):
    rng = np.random.default_rng(3)
    # multiples of 1/8 in a small range: every product and sum is exact in float32
    a = (rng.integers(-8, 8, (256, 128)) / 8).astype(np.float32)
    b = (rng.integers(-8, 8, (128, 512)) / 8).astype(np.float32)
    x = Tensor(a, device="CUDA").cast(dtype).realize()
    y = Tensor(b, device="CUDA").cast(dtype).realize()
    out = (x @ y).float()
    kernels = [s for s in out.schedule() if isinstance(s, KernelStep)]
    sources = [generate(k.ast, Device["CUDA"].renderer).source for k in kernels]
    assert any("mma.sync.aligned.m16n8k16" in s for s in sources)
    # exact in float32, rounded once to the half dtype: as the CPU backend computes it
    on_cpu = (Tensor(a, device="CPU").cast(dtype) @ Tensor(b, device="CPU").cast(dtype)).float()
    np.testing.assert_array_equal(out.numpy(), on_cpu.numpy())


def test_a_kernel_over_a_variable_takes_its_value():
    n = Variable("n", 1, 64)
    for length in (3, 64):
        data = np.arange(length * 8, dtype=np.float32).reshape(length, 8)
        x = Tensor(data, device="CUDA").realize().reshape(n.bind(length), 8)
        np.testing.assert_allclose((x * 2).sum(0).numpy(), (data * 2).sum(0))
        np.testing.assert_allclose(x.softmax(0).sum(0).numpy(), np.ones(8), rtol=1e-5)


def test_tinyjit_replays_on_the_gpu():
    w = Tensor(np.eye(16, dtype=np.float32) * 3, device="CUDA").realize()

    @TinyJit
    def step(x: Tensor) -> Tensor:
        return (x @ w).relu().realize()

    for i in range(4):
        x = np.full((8, 16), i - 1.5, np.float32)
        np.testing.assert_allclose(step(Tensor(x, device="CUDA")).numpy(), np.maximum(x * 3, 0))


def test_copies_between_the_gpu_and_the_cpu():
    a = np.arange(1000, dtype=np.float32)
    on_gpu = Tensor(a, device="CPU").to("CUDA") + 1
    assert on_gpu.device == "CUDA"
    np.testing.assert_array_equal((on_gpu.to("CPU") * 2).numpy(), (a + 1) * 2)


def mlp_losses(device: str) -> list[float]:
    rng = np.random.default_rng(4)
    data = rng.standard_normal((64, 20)).astype(np.float32)
    labels = rng.integers(0, 5, 64)
    w1 = Tensor((rng.standard_normal((20, 32)) * 0.3).astype(np.float32), device=device)
    w2 = Tensor((rng.standard_normal((32, 5)) * 0.3).astype(np.float32), device=device)
    w1.requires_grad = w2.requires_grad = True
    optimizer = SGD([w1, w2], lr=0.1)
    x, y = Tensor(data, device=device), Tensor(labels, device=device)
    losses = []
    with Tensor.train():
        for _ in range(10):
            optimizer.zero_grad()
            loss = (x @ w1).relu().matmul(w2).sparse_categorical_crossentropy(y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses


def test_a_training_step_gives_the_cpus_losses():
    np.testing.assert_allclose(mlp_losses("CUDA"), mlp_losses("CPU"), rtol=1e-5)
