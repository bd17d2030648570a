"""What a user who gets something wrong sees: a typed error that names the values and the fix."""

from __future__ import annotations

import re

import numpy as np
import pytest

from fusegrad import Tensor
from fusegrad.errors import DeviceNotFound, DTypeError, FusegradError, ShapeError


def t(*shape: int, device: str = "PYTHON") -> Tensor:
    return Tensor(np.zeros(shape, np.float32), device=device)


ERRORS = [  # (what the user does, the error type, a regex the message must match)
    # broadcasting names both shapes
    (lambda: t(2, 3) + t(4), ShapeError, r"shapes \(2, 3\) and \(4,\) do not broadcast"),
    (lambda: t(2, 3) * t(3, 2), ShapeError, r"shapes \(2, 3\) and \(3, 2\) do not broadcast"),
    (lambda: t(5) < t(4), ShapeError, r"\(5,\) and \(4,\)"),
    (
        lambda: (t(3) > 0).where(t(2), t(3)),
        ShapeError,
        r"shapes \(2,\) and \(3,\) do not broadcast",
    ),
    (lambda: (t(3) > 0).where(t(2, 1), t(2)), ShapeError, r"\(3,\) and \(2, 2\) and \(2, 2\)"),
    # reshape names the sizes
    (
        lambda: t(2, 3).reshape(4, 2),
        ShapeError,
        r"cannot reshape \(2, 3\) \(6 elements\) to \(4, 2\) \(8 elements\)",
    ),
    (lambda: t(2, 3).reshape(-1, -1), ShapeError, r"only one size may be -1"),
    (lambda: t(2, 3).reshape(4, -1), ShapeError, r"cannot reshape \(2, 3\) to \(4, -1\)"),
    (lambda: t(2, 3).reshape(-2, -3), ShapeError, r"cannot reshape \(2, 3\)"),
    (lambda: t(2, 3).expand(4, 3), ShapeError, r"cannot expand \(2, 3\) to \(4, 3\): only size-1"),
    (lambda: t(2, 3).expand(3), ShapeError, r"cannot expand \(2, 3\) to fewer dimensions"),
    (lambda: t(2, 3).permute(0, 0), ShapeError, r"each axis once, got \(0, 0\)"),
    (lambda: t(2, 3).pad(((1, 1),)), ShapeError, r"one \(before, after\) per axis of \(2, 3\)"),
    (lambda: t(2, 3).shrink(((0, 3), None)), ShapeError, r"shrink .* does not fit shape \(2, 3\)"),
    (
        lambda: Tensor.zeros(2, -1),
        ShapeError,
        r"non-negative ints or bound Variables, got \(2, -1\)",
    ),
    (lambda: Tensor([[1, 2], [3]]), ShapeError, r"ragged"),
    (lambda: t(2, 3).item(), ShapeError, r"one element, this one has shape \(2, 3\)"),
    # axes
    (
        lambda: t(2, 3).sum(2),
        IndexError,
        r"axis 2 is out of range for a 2-d tensor \(valid: -2\.\.1\)",
    ),
    (lambda: t(2, 3).max(-3), IndexError, r"axis -3 is out of range for a 2-d tensor"),
    (lambda: t(2, 3).permute(0, 2), IndexError, r"axis 2 is out of range"),
    (lambda: t(2, 3).transpose(0, 5), IndexError, r"axis 5 is out of range"),
    (lambda: t(2, 3).unsqueeze(4), IndexError, r"axis 4 is out of range for a 3-d tensor"),
    (lambda: t(2, 3).squeeze(2), IndexError, r"axis 2 is out of range"),
    (lambda: t(2, 3).flip(-3), IndexError, r"axis -3 is out of range"),
    (lambda: t(2, 3).flatten(3), IndexError, r"axis 3 is out of range"),
    # indices
    (lambda: t(3)[3], IndexError, r"index 3 is out of bounds for dimension 0 with size 3"),
    (lambda: t(3)[-4], IndexError, r"index -4 is out of bounds for dimension 0 with size 3"),
    (lambda: t(2, 3)[:, 3], IndexError, r"index 3 is out of bounds for dimension 1 with size 3"),
    (
        lambda: t(2, 3)[:, [0, 3]],
        IndexError,
        r"index 3 is out of bounds for dimension 1 with size 3",
    ),
    (
        lambda: t(2, 3)[0, 0, 0],
        IndexError,
        r"too many indices for tensor of dimension 2 \(3 given\)",
    ),
    (lambda: t()[0], IndexError, r"dimension 0 \(1 given\) \(a 0-d tensor's value is \.item\(\)\)"),
    (lambda: t(2, 3)[..., 0, ...], IndexError, r"only have a single ellipsis"),
    (lambda: t(2, 3)[1.5], IndexError, r"unsupported index 1\.5; use ints, slices, None, \.\.\."),
    (lambda: t(2, 3)["a"], IndexError, r"unsupported index 'a'"),
    (lambda: t(2, 3)[[0.5]], IndexError, r"index \[0\.5\] has float64 elements"),
    (lambda: t(2, 3)[Tensor([1.0])], IndexError, r"must be int or bool tensors, got float32"),
    (lambda: t(2, 3)[Tensor([True])], IndexError, r"mask \(1,\) at index 0 does not match"),
    (lambda: t(2, 3)[[0, 1], [0, 1, 2]], IndexError, r"could not be broadcast together"),
    (lambda: t(2, 3).flip((0, -2)), RuntimeError, r"dim 0 appears multiple times"),
    (lambda: t(2, 3).roll((1, 2), 0), RuntimeError, r"one shift per dim, got shifts=\(1, 2\)"),
    (lambda: t(2, 3).unfold(1, 4, 1), RuntimeError, r"window size 4 is larger than dim 1"),
    (lambda: t(2, 3).unflatten(1, (2, -1)), RuntimeError, r"sizes \(2, -1\) do not multiply up to"),
    (lambda: t(2, 3).diagonal(0, 1, -1), RuntimeError, r"two different axes"),
    # dtypes
    (
        lambda: Tensor([1], dtype="float8"),
        DTypeError,
        r"unknown dtype 'float8'; known dtypes: bool, int8",
    ),
    (lambda: t(2).cast("halfs"), DTypeError, r"unknown dtype 'halfs'.*float16"),
    (
        lambda: Tensor(np.zeros(2, np.complex64)),
        DTypeError,
        r"complex64 has no fusegrad equivalent",
    ),
    (lambda: t(2) + "a", DTypeError, r"cannot combine str 'a'"),
    (lambda: t(2).bitcast("int8"), FusegradError, r"bitcast from dtypes.float32 to dtypes.int8"),
    # matmul
    (
        lambda: t(2, 3) @ t(4, 5),
        ShapeError,
        r"cannot multiply shapes \(2, 3\) and \(4, 5\): inner sizes differ",
    ),
    (lambda: t(3) @ t(4), ShapeError, r"cannot multiply shapes \(3,\) and \(4,\)"),
    (lambda: t(2, 2, 3) @ t(2, 2), ShapeError, r"\(2, 2, 3\) and \(2, 2\)"),
    (
        lambda: t(2, 3, 4) @ t(3, 4, 5),
        ShapeError,
        r"shapes \(2, 1\) and \(3, 1\) do not broadcast|"
        r"\(2, 3, 4\) and \(3, 4, 5\)|do not broadcast",
    ),
    (lambda: Tensor(2.0) @ t(2), ShapeError, r"at least 1-d inputs, got shapes \(\) and \(2,\)"),
    # other misuse
    (lambda: Tensor(object()), FusegradError, r"cannot make a Tensor from object"),
    (lambda: Tensor.arange(0, 5, 0), FusegradError, r"step must not be zero"),
    (lambda: len(Tensor(1.0)), TypeError, r"len\(\) of a 0-d tensor"),
    (
        lambda: t(2) + t(2, device="CPU"),
        FusegradError,
        r"tensors on PYTHON and CPU cannot be combined; move one with \.to\('PYTHON'\)",
    ),
]


@pytest.mark.parametrize("do, error, message", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_error(do, error, message):
    with pytest.raises(error, match=message):
        do()


@pytest.mark.parametrize(
    "error, base",
    [
        (ShapeError, ValueError),
        (ShapeError, RuntimeError),  # (what PyTorch raises for the same mistakes)
        (DTypeError, TypeError),
        (DeviceNotFound, LookupError),
    ],
)
def test_errors_are_also_builtin_errors(error, base):
    assert issubclass(error, base) and issubclass(error, FusegradError)


@pytest.mark.parametrize(
    "do",
    [
        lambda: Tensor([1.0], device="NOSUCHDEV"),
        lambda: Tensor([1.0], device="nosuchdev:1"),
        lambda: Tensor([1.0], device="PYTHON").to("NOSUCHDEV"),
        lambda: Tensor.empty(3, device="nosuchdev").realize().numpy(),
    ],
)
def test_unknown_device(do):
    with pytest.raises(DeviceNotFound) as e:
        do()
    msg = str(e.value)
    assert "no installed backend provides 'NOSUCHDEV'" in msg
    assert "pip install fusegrad[nosuchdev]" in msg
    found = re.search(r"found: ([^)]*)\)", msg).group(1).split(", ")
    assert {"CPU", "PYTHON"} <= set(found)


def test_device_index_out_of_range():
    with pytest.raises(DeviceNotFound, match=r"PYTHON:5.*PYTHON has 1 device\(s\)"):
        Tensor([1.0], device="PYTHON:5")
