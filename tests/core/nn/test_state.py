"""State dicts, safetensors files (ours and the ``safetensors`` library's) and torch_load."""

from __future__ import annotations

import json
import os
import pickle
import struct
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest

from fusegrad import Tensor, dtypes
from fusegrad.dtype import DType
from fusegrad.errors import FileFormatError, StateDictError, UnsafePickleError
from fusegrad.nn import state
from fusegrad.nn.state import (
    get_parameters,
    get_state_dict,
    host_array,
    load_state_dict,
    safe_load,
    safe_load_metadata,
    safe_save,
    torch_load,
)

ALL = [
    dtypes.bool,
    dtypes.uint8,
    dtypes.int8,
    dtypes.int16,
    dtypes.uint16,
    dtypes.int32,
    dtypes.uint32,
    dtypes.int64,
    dtypes.uint64,
    dtypes.float16,
    dtypes.bfloat16,
    dtypes.float32,
    dtypes.float64,
]


def values(shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    """Seeded values of ``dtype`` as stored (bfloat16 as raw bits of exact values)."""
    rng = np.random.default_rng(len(shape) * 100 + dtype.priority)
    if dtype == dtypes.bool:
        return rng.random(shape) < 0.5
    if dtype == dtypes.bfloat16:
        return (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(
            np.uint16
        )
    if dtype.is_int:
        return rng.integers(0 if dtype.is_unsigned else -100, 100, shape).astype(dtype.np)
    return rng.standard_normal(shape).astype(dtype.np)


def tensor(array: np.ndarray, dtype: DType) -> Tensor:
    return state.tensor_from_host(array, dtype)


class Linear:
    def __init__(self, n: int, m: int):
        self.weight, self.bias = Tensor.zeros(m, n), Tensor.zeros(m)


class Net:
    def __init__(self):
        self.layers = [Linear(2, 3), Linear(3, 1)]
        self.norm = {"scale": Tensor.ones(1)}
        self.pair = (Tensor.zeros(2, dtype=dtypes.int32),)
        self.module, self.name, self.loop = os, "net", self  # none of these hold weights


# ---- state dicts ---------------------------------------------------------------------------------


def test_state_dict_names_follow_attributes_lists_and_dicts():
    names = list(get_state_dict(Net()))
    assert names == [
        "layers.0.weight",
        "layers.0.bias",
        "layers.1.weight",
        "layers.1.bias",
        "norm.scale",
        "pair.0",
    ]
    assert list(get_state_dict(Linear(1, 1), prefix="fc.")) == ["fc.weight", "fc.bias"]


def test_tied_weights_have_two_names_and_one_parameter():
    net = Net()
    net.head = net.layers[0].weight
    assert get_state_dict(net)["head"] is net.layers[0].weight
    assert len(get_parameters(net)) == 6


def test_load_state_dict_copies_values_and_casts_within_a_kind():
    net = Net()
    sd = {
        k: Tensor(np.full(t.shape, 2.5, np.float64)) if t.dtype.is_float else Tensor([7, 8])
        for k, t in get_state_dict(net).items()
    }
    load_state_dict(net, sd)
    assert net.layers[1].weight.dtype == dtypes.float32
    assert net.layers[1].weight.numpy().tolist() == [[2.5, 2.5, 2.5]]
    assert net.pair[0].dtype == dtypes.int32 and net.pair[0].tolist() == [7, 8]


def test_load_state_dict_names_every_problem_at_once_and_changes_nothing():
    net = Net()
    sd = {k: Tensor(np.ones(t.shape, np.float32)) for k, t in get_state_dict(net).items()}
    del sd["layers.0.bias"]
    sd["extra"] = Tensor([1.0])
    sd["layers.1.weight"] = Tensor(np.ones((3, 1), np.float32))
    sd["pair.0"] = Tensor([1.0, 2.0])  # float into an int tensor
    with pytest.raises(StateDictError) as e:
        load_state_dict(net, sd)
    msg = str(e.value)
    for part in (
        "missing from the state dict: layers.0.bias",
        "not in the model: extra",
        "layers.1.weight (state dict (3, 1) float32, model (1, 3) float32)",
        "pair.0",
        "strict=False",
    ):
        assert part in msg
    assert net.layers[0].weight.numpy().sum() == 0


def test_load_state_dict_not_strict_skips_missing_and_unexpected_but_not_shapes():
    net = Net()
    load_state_dict(
        net, {"layers.0.bias": Tensor([1.0, 2.0, 3.0]), "extra": Tensor([1])}, strict=False
    )
    assert net.layers[0].bias.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(StateDictError, match="wrong shape"):
        load_state_dict(net, {"layers.0.bias": Tensor([1.0])}, strict=False)


# ---- safetensors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ALL, ids=lambda d: d.name)
def test_safetensors_round_trip_is_exact(dtype, tmp_path, device):
    arrays = {
        "a": values((2, 3), dtype),
        "scalar": values((), dtype),
        "empty": values((0, 4), dtype),
    }
    safe_save({k: tensor(v, dtype) for k, v in arrays.items()}, tmp_path / "m.safetensors")
    loaded = safe_load(tmp_path / "m.safetensors", device=device)
    assert list(loaded) == list(arrays)
    for k, v in arrays.items():
        assert loaded[k].dtype == dtype and loaded[k].device == device
        np.testing.assert_array_equal(host_array(loaded[k]), v)


def test_safetensors_layout_and_metadata(tmp_path):
    path = tmp_path / "m.safetensors"
    safe_save(
        {"x": Tensor([1.0, 2.0]), "y": Tensor([[3]], dtype=dtypes.int64)},
        path,
        metadata={"format": "pt"},
    )
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    assert n % 8 == 0 and raw[8 : 8 + n].rstrip(b" ").endswith(b"}")
    assert header["x"] == {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}
    assert header["y"] == {"dtype": "I64", "shape": [1, 1], "data_offsets": [8, 16]}
    assert len(raw) == 8 + n + 16
    assert safe_load_metadata(path) == {"format": "pt"}
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left


def test_failed_save_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "m.safetensors"
    safe_save({"x": Tensor([1.0])}, path)
    before = path.read_bytes()

    def fail(fd):
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="disk full"):
        safe_save({"x": Tensor([2.0, 3.0])}, path)
    assert path.read_bytes() == before and list(tmp_path.iterdir()) == [path]


def _corrupt(path: Path, how: str) -> None:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    if how == "short":
        path.write_bytes(raw[:5])
    elif how == "length":
        path.write_bytes(struct.pack("<Q", 1 << 40) + raw[8:])
    elif how == "json":
        path.write_bytes(raw[:8] + b"[" * n + raw[8 + n :])
    elif how == "truncated":
        path.write_bytes(raw[:-4])
    else:
        header["x"].update({"dtype": {"unknown": "F8_E4M3", "size": "F64"}[how]})
        text = json.dumps(header).encode()
        path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n :])


@pytest.mark.parametrize(
    "how, message",
    [
        ("short", "too short"),
        ("length", "truncated or not safetensors"),
        ("json", "not valid JSON"),
        ("truncated", "the file is truncated"),
        ("unknown", "dtype 'F8_E4M3', which fusegrad cannot hold"),
        ("size", "spans 8 bytes, but shape [2] of F64 needs 16"),
    ],
)
def test_corrupted_safetensors_files_are_named_errors(tmp_path, how, message):
    path = tmp_path / "m.safetensors"
    safe_save({"x": Tensor([1.0, 2.0])}, path)
    _corrupt(path, how)
    with pytest.raises(FileFormatError, match=message.replace("[", r"\[").replace("]", r"\]")):
        safe_load(path)


def test_safetensors_library_reads_ours_and_we_read_its(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    arrays = {d.name: values((3, 2), d) for d in ALL if d != dtypes.bfloat16}
    safe_save(
        {k: Tensor(v) for k, v in arrays.items()},
        tmp_path / "ours.safetensors",
        metadata={"by": "fusegrad"},
    )
    theirs = st.load_file(str(tmp_path / "ours.safetensors"))
    assert theirs.keys() == arrays.keys()
    for k, v in arrays.items():
        assert theirs[k].dtype == v.dtype
        np.testing.assert_array_equal(theirs[k], v)
    st.save_file(arrays, str(tmp_path / "theirs.safetensors"), metadata={"by": "safetensors"})
    ours = safe_load(tmp_path / "theirs.safetensors")
    for k, v in arrays.items():
        np.testing.assert_array_equal(ours[k].numpy(), v)
    assert safe_load_metadata(tmp_path / "theirs.safetensors") == {"by": "safetensors"}


def test_safetensors_library_bfloat16_both_ways(tmp_path):
    torch = pytest.importorskip("torch")
    st = pytest.importorskip("safetensors.torch")
    bits = values((4, 3), dtypes.bfloat16)
    safe_save({"w": tensor(bits, dtypes.bfloat16)}, tmp_path / "ours.safetensors")
    w = st.load_file(str(tmp_path / "ours.safetensors"))["w"]
    assert w.dtype == torch.bfloat16
    np.testing.assert_array_equal(w.view(torch.int16).numpy().view(np.uint16), bits)
    st.save_file({"w": w}, str(tmp_path / "theirs.safetensors"))
    np.testing.assert_array_equal(host_array(safe_load(tmp_path / "theirs.safetensors")["w"]), bits)


# ---- torch_load ----------------------------------------------------------------------------------


def test_torch_load_reads_dtypes_views_and_parameters(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    base = torch.randn(4, 5)
    sd = OrderedDict(
        f32=torch.randn(2, 3),
        f16=torch.randn(3).half(),
        bf16=torch.randn(2, 2).bfloat16(),
        i64=torch.arange(6).reshape(2, 3),
        flag=torch.tensor([True, False]),
        u16=torch.tensor([1, 65535], dtype=torch.uint16),
        transposed=base.t(),
        sliced=base[1:, 2:],
        shares=base,
        scalar=torch.tensor(3.5),
        weight=torch.nn.Parameter(torch.ones(2)),
    )
    torch.save(sd, tmp_path / "m.pth")
    loaded = torch_load(tmp_path / "m.pth")
    assert list(loaded) == list(sd)
    for k, t in sd.items():
        expected = t.detach().contiguous()
        if t.dtype == torch.bfloat16:
            expected = expected.view(torch.int16).numpy().view(np.uint16)
        else:
            expected = expected.numpy()
        assert loaded[k].shape == tuple(t.shape)
        np.testing.assert_array_equal(host_array(loaded[k]), expected)
    assert loaded["bf16"].dtype == dtypes.bfloat16 and loaded["u16"].dtype == dtypes.uint16
    assert loaded["weight"].requires_grad is True


def test_torch_load_keeps_nesting_and_places_on_device(tmp_path, device):
    torch = pytest.importorskip("torch")
    torch.save({"model": {"w": torch.ones(2)}, "epoch": 3, "name": b"x"}, tmp_path / "c.pth")
    loaded = torch_load(tmp_path / "c.pth", device=device)
    assert loaded["epoch"] == 3 and loaded["name"] == b"x"
    assert loaded["model"]["w"].device == device and loaded["model"]["w"].tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    "storage, message",
    [
        (b"\0" * 8, "outside its storage of 2 elements"),
        (None, "storage '0' is missing"),
    ],
)
def test_torch_load_rejects_short_or_missing_storages(tmp_path, storage, message):
    torch = pytest.importorskip("torch")
    torch.save({"w": torch.ones(4)}, tmp_path / "m.pth")
    with (
        zipfile.ZipFile(tmp_path / "m.pth") as src,
        zipfile.ZipFile(tmp_path / "bad.pth", "w") as dst,
    ):
        for name in src.namelist():
            if not name.endswith("data/0"):
                dst.writestr(name, src.read(name))
            elif storage is not None:
                dst.writestr(name, storage)
    with pytest.raises(FileFormatError, match=message):
        torch_load(tmp_path / "bad.pth")


class Evil:
    """Unpickling this runs a shell command: what a malicious checkpoint does."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _checkpoint(path: Path, payload: bytes, storages: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", payload)
        for key, data in (storages or {}).items():
            z.writestr(f"archive/data/{key}", data)
    return path


def test_torch_load_refuses_code_and_does_not_run_it(tmp_path):
    marker = tmp_path / "pwned"
    evil = _checkpoint(tmp_path / "evil.pth", pickle.dumps({"w": Evil(marker)}, protocol=2))
    with pytest.raises(UnsafePickleError, match=r"refusing to load posix\.system from .*evil\.pth"):
        torch_load(evil)
    assert not marker.exists()
    assert not os.system(f"touch {marker}") and marker.exists()  # the payload would have worked


@pytest.mark.parametrize(
    "global_name", [b"builtins\neval", b"torch\nload", b"collections\nnamedtuple"]
)
def test_torch_load_refuses_any_other_global(tmp_path, global_name):
    payload = b"\x80\x02c" + global_name + b"\nX\x01\x00\x00\x001\x85R."
    with pytest.raises(UnsafePickleError, match=global_name.decode().replace("\n", ".")):
        torch_load(_checkpoint(tmp_path / "g.pth", payload))


@pytest.mark.parametrize(
    "content, message",
    [
        (pickle.dumps({"a": 1}, protocol=2), "legacy"),
        (b"hello world", "not a PyTorch checkpoint"),
    ],
)
def test_torch_load_names_files_it_cannot_read(tmp_path, content, message):
    (tmp_path / "x.pth").write_bytes(content)
    with pytest.raises(FileFormatError, match=message):
        torch_load(tmp_path / "x.pth")


def test_torch_load_names_broken_archives(tmp_path):
    with zipfile.ZipFile(tmp_path / "empty.pth", "w") as z:
        z.writestr("archive/version", "3")
    with pytest.raises(FileFormatError, match="without data.pkl"):
        torch_load(tmp_path / "empty.pth")
    truncated_pickle = _checkpoint(tmp_path / "t.pth", pickle.dumps({"a": [1, 2]}, protocol=2)[:-3])
    with pytest.raises(FileFormatError, match="corrupted PyTorch checkpoint"):
        torch_load(truncated_pickle)
