"""Loaders given odd or hostile bytes (issue 18, item 8): bool bytes other than 0 and 1 read as
True, and a checkpoint claiming sizes far beyond its storage is kept lazy or refused, never
materialised. The files are written by hand here; torch, where installed, writes a few more."""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from fusegrad import dtypes
from fusegrad.errors import FileFormatError
from fusegrad.nn.state import safe_load, torch_load

BOOL_BYTES = bytes([0, 1, 2, 255, 0x80])
AS_BOOL = [False, True, True, True, True]


def _expect_bools(t) -> None:
    assert t.dtype == dtypes.bool and t.tolist() == AS_BOOL
    assert t.cast(dtypes.int32).tolist() == [int(b) for b in AS_BOOL]  # 1, not the stored byte
    assert t.logical_not().tolist() == [not b for b in AS_BOOL]


def test_safetensors_bool_bytes_other_than_0_and_1_are_true(tmp_path):
    header = {"b": {"dtype": "BOOL", "shape": [5], "data_offsets": [0, 5]}}
    text = json.dumps(header).encode()
    (tmp_path / "b.safetensors").write_bytes(struct.pack("<Q", len(text)) + text + BOOL_BYTES)
    _expect_bools(safe_load(tmp_path / "b.safetensors")["b"])


def _text(s: str) -> bytes:
    return b"X" + struct.pack("<I", len(s.encode())) + s.encode()  # BINUNICODE


def _ints(values: tuple[int, ...]) -> bytes:
    return b"(" + b"".join(b"J" + struct.pack("<i", v) for v in values) + b"t"  # a tuple


def _checkpoint(
    path: Path, storage: str, data: bytes, size: tuple[int, ...], stride: tuple[int, ...]
) -> Path:
    """A checkpoint of ``{"w": tensor}`` whose tensor views storage ``0`` (``data``), pickled
    opcode by opcode as ``torch.save`` would: ``_rebuild_tensor_v2(storage, 0, size, stride)``."""
    pid = b"(" + _text("storage") + b"ctorch\n" + storage.encode() + b"\n"
    pid += _text("0") + _text("cpu") + b"J" + struct.pack("<i", len(data)) + b"tQ"
    args = b"(" + pid + b"K\x00" + _ints(size) + _ints(stride) + b"\x89N" + b"t"
    payload = b"\x80\x02}" + _text("w") + b"ctorch._utils\n_rebuild_tensor_v2\n" + args + b"Rs."
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", payload)
        z.writestr("archive/data/0", data)
    return path


def test_torch_bool_bytes_other_than_0_and_1_are_true(tmp_path):
    path = _checkpoint(tmp_path / "b.pth", "BoolStorage", BOOL_BYTES, (5,), (1,))
    _expect_bools(torch_load(path)["w"])


def test_a_huge_stride_0_tensor_stays_lazy(tmp_path):
    data = np.array([1.5, 2.5, 3.5], np.float32).tobytes()
    path = _checkpoint(tmp_path / "e.pth", "FloatStorage", data, (20_000, 30_000, 3), (0, 0, 1))
    w = torch_load(path)["w"]  # 7.2 GB if it were copied
    assert w.shape == (20_000, 30_000, 3)
    assert w[19_999, :2].tolist() == [[1.5, 2.5, 3.5]] * 2


def test_overlapping_strides_claiming_gigabytes_are_refused(tmp_path):
    data = bytes(4 * 40_000)  # 20,000 x 20,000 floats over a storage of 40,000: 1.6 GB
    path = _checkpoint(tmp_path / "o.pth", "FloatStorage", data, (20_000, 20_000), (1, 1))
    with pytest.raises(FileFormatError, match=r"storage '0' claims size \(20000, 20000\)"):
        torch_load(path)


def test_torch_written_stride_0_and_odd_bools(tmp_path):
    torch = pytest.importorskip("torch")
    flags = torch.tensor(list(BOOL_BYTES), dtype=torch.uint8).view(torch.bool)
    wide = torch.arange(3.0).expand(30_000, 20_000, 3)  # 7.2 GB as a copy
    torch.save({"flags": flags, "wide": wide}, tmp_path / "t.pth")
    loaded = torch_load(tmp_path / "t.pth")
    _expect_bools(loaded["flags"])
    assert loaded["wide"].shape == (30_000, 20_000, 3)
    assert loaded["wide"][-1, -1].tolist() == [0.0, 1.0, 2.0]
