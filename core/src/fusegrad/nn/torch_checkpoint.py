"""Read PyTorch checkpoints (``torch.save`` files) without torch and without running their code.

A checkpoint is a zip: ``<name>/data.pkl`` pickles the object, and each tensor's storage is the
raw file ``<name>/data/<key>``, named from the pickle by a persistent id. Unpickling normally
imports and calls whatever the pickle names; here only the few globals a checkpoint of tensors
needs are allowed, each mapped to a function of ours, and anything else is refused unrun.
"""

from __future__ import annotations

import collections
import os
import pickle
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fusegrad.dtype import DType, dtypes
from fusegrad.errors import FileFormatError, FusegradError, UnsafePickleError
from fusegrad.helpers import prod
from fusegrad.nn.host import tensor_from_host
from fusegrad.tensor import Tensor

#: The storage classes old-style (typed) storages are pickled as, and the dtype they hold.
TORCH_STORAGES: dict[str, DType] = {
    "FloatStorage": dtypes.float32,
    "DoubleStorage": dtypes.float64,
    "HalfStorage": dtypes.float16,
    "BFloat16Storage": dtypes.bfloat16,
    "LongStorage": dtypes.int64,
    "IntStorage": dtypes.int32,
    "ShortStorage": dtypes.int16,
    "CharStorage": dtypes.int8,
    "ByteStorage": dtypes.uint8,
    "BoolStorage": dtypes.bool,
}

#: torch dtypes, which newer checkpoints name next to an untyped storage.
TORCH_DTYPES: dict[str, DType] = {
    "float32": dtypes.float32,
    "float64": dtypes.float64,
    "float16": dtypes.float16,
    "bfloat16": dtypes.bfloat16,
    "int64": dtypes.int64,
    "int32": dtypes.int32,
    "int16": dtypes.int16,
    "int8": dtypes.int8,
    "uint8": dtypes.uint8,
    "bool": dtypes.bool,
    "uint16": dtypes.uint16,
    "uint32": dtypes.uint32,
    "uint64": dtypes.uint64,
}


#: A tensor whose strides overlap (a view saved as such) is copied out in order; one needing more
#: than this many times its storage's bytes, and more than ``MAX_OVERLAP_BYTES``, is refused.
MAX_OVERLAP = 16
MAX_OVERLAP_BYTES = 1 << 26


@dataclass(frozen=True, slots=True)
class StorageType:
    """What a pickled storage class stands for: its dtype, or None for untyped (bytes)."""

    dtype: DType | None


@dataclass(frozen=True, slots=True)
class Storage:
    """A storage's bytes, as read from the zip, and the dtype it was saved with (if typed)."""

    data: bytes
    dtype: DType | None
    key: str = ""  # its file's name in the archive, ``<name>/data/<key>``


def _latin1(text: str, encoding: str = "latin1") -> bytes:
    """``_codecs.encode``, which protocol-2 pickles use to rebuild ``bytes``; latin-1 only."""
    if encoding not in ("latin1", "latin-1"):
        raise UnsafePickleError(f"refusing _codecs.encode with encoding {encoding!r}")
    return text.encode("latin1")


class CheckpointUnpickler(pickle.Unpickler):
    """An unpickler that rebuilds tensors from ``archive`` and refuses every other global."""

    def __init__(
        self,
        data: Any,
        archive: zipfile.ZipFile,
        prefix: str,
        device: str | None,
        source: Path,
        big_endian: bool,
    ):
        super().__init__(data)
        self.archive, self.prefix, self.device = archive, prefix, device
        self.source, self.big_endian = source, big_endian
        self.storages: dict[str, Storage] = {}

    def find_class(self, module: str, name: str) -> Any:
        """Map the few globals a checkpoint of tensors uses to our own functions; refuse the
        rest."""
        if module == "torch" and name in TORCH_STORAGES:
            return StorageType(TORCH_STORAGES[name])
        if module == "torch" and name in TORCH_DTYPES:
            return TORCH_DTYPES[name]
        allowed = {
            "collections.OrderedDict": collections.OrderedDict,
            "torch._utils._rebuild_tensor_v2": self.rebuild_tensor,
            "torch._utils._rebuild_tensor_v3": self.rebuild_tensor_v3,
            "torch._utils._rebuild_parameter": rebuild_parameter,
            "torch.storage.UntypedStorage": StorageType(None),
            "_codecs.encode": _latin1,
        }
        found = allowed.get(f"{module}.{name}")
        if found is None:
            raise UnsafePickleError(
                f"refusing to load {module}.{name} from {self.source}: torch_load only reads "
                "tensors, and running other code from a file could do anything; if you trust "
                "the file, load it with torch and save its tensors with safe_save"
            )
        return found

    def persistent_load(self, pid: Any) -> Storage:
        """The storage a persistent id names: ``('storage', type, key, location, size)``."""
        if not (
            isinstance(pid, tuple)
            and len(pid) >= 3
            and pid[0] == "storage"
            and isinstance(pid[1], StorageType)
        ):
            raise FileFormatError(f"{self.source}: unexpected persistent id {pid!r}")
        key = str(pid[2])
        if key not in self.storages:
            try:
                data = self.archive.read(f"{self.prefix}data/{key}")
            except KeyError:
                raise FileFormatError(f"{self.source}: storage {key!r} is missing") from None
            self.storages[key] = Storage(data, pid[1].dtype, key)
        return self.storages[key]

    def rebuild_tensor(
        self,
        storage: Storage,
        offset: int,
        size: tuple,
        stride: tuple,
        requires_grad: bool = False,
        hooks: Any = None,
        metadata: Any = None,
    ) -> Tensor:
        """``torch._utils._rebuild_tensor_v2``: a strided view of a typed storage, copied."""
        if storage.dtype is None:
            raise FileFormatError(f"{self.source}: an untyped storage needs a dtype (v3 tensor)")
        return self.rebuild_tensor_v3(
            storage, offset, size, stride, requires_grad, hooks, storage.dtype
        )

    def rebuild_tensor_v3(
        self,
        storage: Storage,
        offset: int,
        size: tuple,
        stride: tuple,
        requires_grad: bool,
        hooks: Any,
        dtype: DType,
        metadata: Any = None,
    ) -> Tensor:
        """``torch._utils._rebuild_tensor_v3``: as v2, with the dtype given separately.

        An axis of stride 0 (a tensor saved expanded) is read once and expanded lazily, so a
        small storage that claims a huge size takes no more memory than it holds.
        """
        stored = dtype.np.newbyteorder(">" if self.big_endian else "<")
        flat = np.frombuffer(storage.data, dtype=stored, count=len(storage.data) // dtype.itemsize)
        size, stride = tuple(size), tuple(stride)
        span = sum((n - 1) * s for n, s in zip(size, stride, strict=True))
        outside = 0 not in size and offset + span >= len(flat)
        where = f"{self.source}: the tensor in storage {storage.key!r}"
        if offset < 0 or any(s < 0 for s in stride) or outside:
            raise FileFormatError(
                f"{where}, of size {size}, stride {stride} at offset {offset}, lies outside its "
                f"storage of {len(flat)} elements"
            )
        read = tuple(1 if s == 0 else n for n, s in zip(size, stride))  # stride-0 axes once
        if prod(read) * dtype.itemsize > max(MAX_OVERLAP * len(storage.data), MAX_OVERLAP_BYTES):
            raise FileFormatError(
                f"{where} claims size {size} with stride {stride}: its elements overlap, and "
                f"copying them would take {prod(read) * dtype.itemsize} bytes from a storage of "
                f"{len(storage.data)}; the file is corrupt or was crafted to exhaust memory"
            )
        view = np.lib.stride_tricks.as_strided(
            flat[offset:], shape=read, strides=[s * dtype.itemsize for s in stride]
        )
        array = np.array(view, dtype=dtype.np, order="C")  # a copy, in order
        tensor = tensor_from_host(array, dtype, self.device)
        if read != size:
            tensor = tensor.expand(size)
        if requires_grad:
            tensor.requires_grad = True
        return tensor


def rebuild_parameter(data: Tensor, requires_grad: bool, hooks: Any = None) -> Tensor:
    """``torch._utils._rebuild_parameter``: a Parameter is its tensor here."""
    data.requires_grad = bool(requires_grad)
    return data


def torch_load(path: str | os.PathLike, device: str | None = None) -> Any:
    """What ``torch.save`` saved to ``path``, with each torch tensor read as a Tensor.

    For a saved state dict, a dict of names to Tensors. Works without torch installed,
    and runs no code from the file: an UnsafePickleError names any global it refuses.
    """
    source = Path(path)
    if not zipfile.is_zipfile(source):
        with open(source, "rb") as f:
            start = f.read(2)
        if start[:1] == b"\x80":
            raise FileFormatError(
                f"{source} is a legacy (pre-1.6) PyTorch checkpoint, which "
                "torch_load does not read; re-save it with torch.save in a "
                "current PyTorch"
            )
        raise FileFormatError(f"{source} is not a PyTorch checkpoint (not a zip archive)")
    try:
        with zipfile.ZipFile(source) as archive:
            return _unpickle(archive, source, device)
    except FusegradError:
        raise
    except (
        zipfile.BadZipFile,
        pickle.UnpicklingError,
        EOFError,
        AttributeError,
        TypeError,
        ValueError,
        IndexError,
        KeyError,
    ) as e:
        raise FileFormatError(f"{source} is a corrupted PyTorch checkpoint: {e}") from None


def _unpickle(archive: zipfile.ZipFile, source: Path, device: str | None) -> Any:
    """Unpickle the ``data.pkl`` of an open checkpoint archive."""
    pickles = [n for n in archive.namelist() if n.endswith("data.pkl")]
    if not pickles:
        raise FileFormatError(f"{source} is a zip archive without data.pkl, not a checkpoint")
    prefix = pickles[0][: -len("data.pkl")]
    big_endian = False
    if f"{prefix}byteorder" in archive.namelist():
        big_endian = archive.read(f"{prefix}byteorder").strip() == b"big"
    with archive.open(pickles[0]) as data:
        return CheckpointUnpickler(data, archive, prefix, device, source, big_endian).load()
