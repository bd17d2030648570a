"""A short tour: lazy tensors, fused kernels, generated C, and a check against numpy.

Run it with ``.venv/bin/python examples/demo.py`` after ``bash scripts/setup.sh``.
``DEV=PYTHON`` runs the same on the interpreter device; ``DEBUG=3`` prints every kernel's source.
"""

from __future__ import annotations

import time

import numpy as np

from fusegrad import Device, GlobalCounters, Tensor
from fusegrad.engine.realize import get_runner


def show(title: str, t: Tensor, expected: np.ndarray) -> None:
    kernels = t.schedule()
    GlobalCounters.reset()
    start = time.perf_counter()
    got = t.numpy()
    ms = (time.perf_counter() - start) * 1e3
    ok = np.allclose(got, expected, rtol=1e-4, atol=1e-5)
    names = ", ".join(get_runner(k.ast, k.device).kernel.name for k in kernels)
    print(
        f"{title:<34s} {len(kernels)} kernel(s) [{names}]  {ms:7.2f} ms  "
        f"matches numpy: {'yes' if ok else 'NO'}"
    )


def main() -> None:
    print(f"default device: {Device.DEFAULT}\n")
    Tensor.manual_seed(0)
    a, b = Tensor.randn(256, 256), Tensor.randn(256, 256)
    x, w, bias = Tensor.randn(64, 128), Tensor.randn(128, 32), Tensor.randn(32)
    an, bn, xn, wn, biasn = a.numpy(), b.numpy(), x.numpy(), w.numpy(), bias.numpy()

    show("(a + b).relu().sum()", (a + b).relu().sum(), np.maximum(an + bn, 0).sum())
    show("(a * 2 + 1).exp()", (a * 2 + 1).exp(), np.exp(an * 2 + 1))
    show("(x @ w + bias).relu()", (x @ w + bias).relu(), np.maximum(xn @ wn + biasn, 0))
    softmax = (a - a.max(1, keepdim=True)).exp()
    softmax = softmax / softmax.sum(1, keepdim=True)
    e = np.exp(an - an.max(1, keepdims=True))
    show("softmax(a, axis=1)", softmax, e / e.sum(1, keepdims=True))
    show("a[::2, ::-3].T.sum(0)", a[::2, ::-3].T.sum(0), an[::2, ::-3].T.sum(0))

    fused = (x @ w + bias).relu()
    kernel = get_runner(fused.schedule()[0].ast, Device.DEFAULT).kernel
    print(f"\nthe generated source of {kernel.name}:\n")
    print(kernel.source)

    c = Tensor([1.0, 2.0, 3.0, 4.0])
    d = Tensor([4.0, 3.0, 2.0, 1.0])
    (c + d).realize()
    n = 2000
    start = time.perf_counter()
    for _ in range(n):
        (c + d).realize()
    per_op = (time.perf_counter() - start) / n * 1e6
    print(f"an eager tiny op (add of two 4-element tensors, realized): {per_op:.1f} us")


if __name__ == "__main__":
    main()
