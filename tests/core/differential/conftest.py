"""Which differential cases run on the extra devices (``harness.EXTRA_DEVICES``)."""

from __future__ import annotations

import pytest

from .harness import EXTRA_DEVICES, OpCase


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On an extra device keep the first case of each op and its inputs' dtypes, deselect the rest.

    Every op then compiles and gives torch's values there, for every dtype it is tested with, in a
    quarter of the time of every case (PoCL compiles slowly). Shapes, views, special values and
    gradients are core's work, the same on every device: PYTHON and CPU run all of them.
    """
    seen: set[tuple] = set()
    keep, drop = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        c, device = params.get("c"), params.get("device")
        if device in EXTRA_DEVICES and isinstance(c, OpCase):
            key = (device, c.op, tuple(a.dtype for a in c.args))
            if key in seen:
                drop.append(item)
                continue
            seen.add(key)
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
