"""codegen/linearize.py: a kernel whose two reductions both run inside the upcast loops gives
each its own copies of them (the second used the first's, closed loop: 'uidx5' undeclared).
Found by the differential fuzzer (python -m fusegrad.testing.fuzz)."""

from __future__ import annotations

import numpy as np
import pytest

from fusegrad import Tensor


@pytest.mark.parametrize("device", ["PYTHON", "CPU"])
@pytest.mark.parametrize("reduce", ["mean", "sum", "max"])
def test_two_reductions_sharing_the_upcast_loops(device, reduce):
    x = np.arange(16, dtype=np.float32).reshape(4, 2, 2)
    v = getattr(Tensor(x, device=device), reduce)(axis=2)
    want = getattr(x, reduce)(axis=2)
    np.testing.assert_allclose((v.flip((0,)) + v).numpy(), want[::-1] + want)
    np.testing.assert_allclose((v.flip((0,)) * v.flip((1,))).numpy(), want[::-1] * want[:, ::-1])
