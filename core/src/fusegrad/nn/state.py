"""Model weights: state dicts, safetensors files, and PyTorch checkpoints (``torch_load``).

A state dict maps dotted names (``"layers.0.weight"``) to the Tensors of a model, found by
walking its attributes. safetensors files are written and read here directly: an 8-byte
little-endian header length, a JSON header, then the tensors' bytes.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from fusegrad.dtype import DType, dtypes
from fusegrad.errors import FileFormatError, StateDictError
from fusegrad.helpers import prod
from fusegrad.nn.gguf import gguf_load as gguf_load  # re-exported: fusegrad.nn.state.gguf_load
from fusegrad.nn.host import host_array, tensor_from_host
from fusegrad.nn.torch_checkpoint import torch_load
from fusegrad.tensor import Tensor
from fusegrad.tensor.autograd import replace_value

__all__ = [
    "get_parameters",
    "get_state_dict",
    "load_state_dict",
    "safe_load",
    "safe_load_metadata",
    "safe_save",
    "shard_model",
    "torch_load",
]

# ---- state dicts ---------------------------------------------------------------------------------

#: Attribute values never walked into: they hold no weights of the model they hang from.
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType)


def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
    """Every Tensor reachable from ``obj`` through attributes, lists, tuples and dicts.

    Names join the path with dots, as in PyTorch and tinygrad. A tensor reachable by two
    paths (tied weights) appears under both names.

    >>> class Linear:
    ...     def __init__(self): self.weight, self.bias = Tensor([[1.0]]), Tensor([0.0])
    >>> class Net:
    ...     def __init__(self): self.layers = [Linear(), Linear()]
    >>> list(get_state_dict(Net()))
    ['layers.0.weight', 'layers.0.bias', 'layers.1.weight', 'layers.1.bias']
    """
    found: dict[str, Tensor] = {}
    _collect(obj, prefix, found, set())
    return found


def _collect(obj: Any, prefix: str, found: dict[str, Tensor], path: set[int]) -> None:
    """Add the tensors under ``obj`` to ``found``; ``path`` holds the objects above, to stop
    cycles."""
    if isinstance(obj, Tensor):
        found[prefix.rstrip(".")] = obj
        return
    if id(obj) in path or isinstance(obj, _OPAQUE):
        return
    if isinstance(obj, Mapping):
        items: Any = obj.items()
    elif isinstance(obj, (list, tuple)):
        items = enumerate(obj)
    elif hasattr(obj, "__dict__"):
        items = vars(obj).items()
    else:
        return
    path.add(id(obj))
    for key, value in items:
        _collect(value, f"{prefix}{key}.", found, path)
    path.discard(id(obj))


def get_parameters(obj: Any) -> list[Tensor]:
    """The Tensors of ``obj``'s state dict, each once (tied weights are not repeated).

    >>> class Net:
    ...     def __init__(self): self.w = Tensor([1.0]); self.tied = self.w
    >>> len(get_parameters(Net()))
    1
    """
    unique = {id(t): t for t in get_state_dict(obj).values()}
    return list(unique.values())


def shard_model(
    obj: Any, devices: Sequence[str], axes: Mapping[str, int] | None = None
) -> dict[str, Tensor]:
    """Place every tensor of ``obj``'s state dict on ``devices``, in place (``Tensor.shard_``):
    whole on each device, or cut along ``axes[name]`` for the names ``axes`` lists (a large
    layer's weight, along its outputs); returns the state dict.

    >>> class Net:
    ...     def __init__(self): self.w, self.b = Tensor([[1.0, 2.0], [3.0, 4.0]]), Tensor([0.0])
    >>> net = Net()
    >>> sorted(shard_model(net, ("CPU", "PYTHON"), {"w": 0}))
    ['b', 'w']
    >>> net.w.device
    ('CPU', 'PYTHON')
    """
    state = get_state_dict(obj)
    unknown = sorted(set(axes or {}) - set(state))
    if unknown:
        raise StateDictError(f"shard_model: no tensors named {unknown} (names: {sorted(state)})")
    done: set[int] = set()
    for name, t in state.items():
        if id(t) not in done:  # a tied weight once, placed as its first name says
            t.shard_(devices, (axes or {}).get(name))
            done.add(id(t))
    return state


def _compatible(src: DType, dst: DType) -> bool:
    """Whether a checkpoint's ``src`` values may be cast into a model's ``dst`` tensor."""
    group = {"f": "float", "i": "int", "u": "int", "b": "bool"}
    return group[src.kind] == group[dst.kind]


def load_state_dict(
    model: Any, state_dict: Mapping[str, Tensor | np.ndarray], strict: bool = True
) -> None:
    """Copy ``state_dict``'s values into ``model``'s tensors, which keep their device and dtype.

    Values are cast within their kind (a float16 checkpoint loads into float32 weights).
    Missing and unexpected names are errors unless ``strict=False``; wrong shapes and kinds
    always are. Every problem is named in one StateDictError, and then nothing is changed.
    As in tinygrad, a value already of the right device and dtype is shared, not copied.
    """
    targets = get_state_dict(model)
    sources = {k: v if isinstance(v, Tensor) else Tensor(v) for k, v in state_dict.items()}
    problems = []
    if strict:
        if missing := [k for k in targets if k not in sources]:
            problems.append(f"missing from the state dict: {', '.join(missing)}")
        if unexpected := [k for k in sources if k not in targets]:
            problems.append(f"not in the model: {', '.join(unexpected)}")
    mismatched = [
        f"{k} (state dict {sources[k].shape} {sources[k].dtype.name}, "
        f"model {t.shape} {t.dtype.name})"
        for k, t in targets.items()
        if k in sources
        and (sources[k].shape != t.shape or not _compatible(sources[k].dtype, t.dtype))
    ]
    if mismatched:
        problems.append(f"wrong shape or kind: {', '.join(mismatched)}")
    if problems:
        hint = "; pass strict=False to skip missing and unexpected names" if strict else ""
        raise StateDictError(f"the state dict does not fit the model: {'; '.join(problems)}{hint}")
    loaded = {id(t): t for k, t in targets.items() if k in sources}
    for k, t in targets.items():
        if k in sources:
            replace_value(t, sources[k].to(t.device).cast(t.dtype).uop)
    if loaded:
        first, *rest = loaded.values()
        first.realize(*rest)


# ---- host copies ---------------------------------------------------------------------------------


# ---- safetensors ---------------------------------------------------------------------------------

#: safetensors' dtype names, and ours.
SAFETENSORS_DTYPES: dict[str, DType] = {
    "BOOL": dtypes.bool,
    "U8": dtypes.uint8,
    "I8": dtypes.int8,
    "U16": dtypes.uint16,
    "I16": dtypes.int16,
    "U32": dtypes.uint32,
    "I32": dtypes.int32,
    "U64": dtypes.uint64,
    "I64": dtypes.int64,
    "F16": dtypes.float16,
    "BF16": dtypes.bfloat16,
    "F32": dtypes.float32,
    "F64": dtypes.float64,
}
_SAFETENSORS_NAMES = {v: k for k, v in SAFETENSORS_DTYPES.items()}


def safe_save(
    state_dict: Mapping[str, Tensor],
    path: str | os.PathLike,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write ``state_dict`` as a safetensors file, readable by the ``safetensors`` library.

    The file appears whole or not at all: it is written beside ``path`` and renamed into place.
    """
    if metadata is not None and not all(
        isinstance(v, str) for v in (*metadata, *metadata.values())
    ):
        raise TypeError(f"safetensors metadata must map str to str, got {dict(metadata)!r}")
    header: dict[str, Any] = {"__metadata__": dict(metadata)} if metadata else {}
    arrays, offset = [], 0
    for name, t in state_dict.items():
        if name == "__metadata__" or not isinstance(name, str):
            raise StateDictError(
                f"cannot save a tensor named {name!r}: names are strings, "
                "and '__metadata__' is reserved for the file's metadata"
            )
        array = host_array(t).astype(t.dtype.np.newbyteorder("<"), copy=False)
        header[name] = {
            "dtype": _SAFETENSORS_NAMES[t.dtype],
            "shape": list(t.shape),
            "data_offsets": [offset, offset + array.nbytes],
        }
        arrays.append(array)
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # so the data starts 8-byte aligned
    _write_atomically(Path(path), [struct.pack("<Q", len(text)), text, *arrays])


def _write_atomically(path: Path, chunks: list[Any]) -> None:
    """Write ``chunks`` to a temporary file beside ``path``, then rename it to ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            for chunk in chunks:
                f.write(chunk.data if isinstance(chunk, np.ndarray) else chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _read_header(f: Any, path: Path) -> tuple[dict[str, Any], int]:
    """The JSON header of an open safetensors file, checked, and where its data starts."""
    size = os.fstat(f.fileno()).st_size
    if size < 8:
        raise FileFormatError(f"{path} is {size} bytes, too short for a safetensors file")
    (length,) = struct.unpack("<Q", f.read(8))
    if 8 + length > size:
        raise FileFormatError(
            f"{path}: the header claims {length} bytes but the file has only "
            f"{size - 8} after the length; it is truncated or not safetensors"
        )
    try:
        header = json.loads(f.read(length))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FileFormatError(f"{path}: the safetensors header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise FileFormatError(f"{path}: the safetensors header is not a JSON object")
    for name, info in header.items():
        if name != "__metadata__":
            _check_entry(name, info, size - 8 - length, path)
    return header, 8 + length


def _check_entry(name: str, info: Any, data_size: int, path: Path) -> None:
    """Raise FileFormatError unless one tensor's header entry is sound."""
    where = f"{path}: tensor {name!r}"
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise FileFormatError(f"{where} needs dtype, shape and data_offsets, has {info!r}")
    if info["dtype"] not in SAFETENSORS_DTYPES:
        raise FileFormatError(
            f"{where} has dtype {info['dtype']!r}, which fusegrad cannot hold "
            f"(known: {', '.join(SAFETENSORS_DTYPES)})"
        )
    shape, offsets = info["shape"], info["data_offsets"]
    if not (isinstance(shape, list) and all(isinstance(s, int) and s >= 0 for s in shape)):
        raise FileFormatError(f"{where} has shape {shape!r}, expected a list of sizes")
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(isinstance(o, int) for o in offsets)
        and 0 <= offsets[0] <= offsets[1]
    ):
        raise FileFormatError(f"{where} has data_offsets {offsets!r}, expected [begin, end]")
    if offsets[1] > data_size:
        raise FileFormatError(
            f"{where} ends at byte {offsets[1]} of data but the file holds "
            f"{data_size}; the file is truncated"
        )
    expected = prod(shape) * SAFETENSORS_DTYPES[info["dtype"]].itemsize
    if offsets[1] - offsets[0] != expected:
        raise FileFormatError(
            f"{where} spans {offsets[1] - offsets[0]} bytes, but shape {shape} "
            f"of {info['dtype']} needs {expected}"
        )


def safe_load(path: str | os.PathLike, device: str | None = None) -> dict[str, Tensor]:
    """The tensors of a safetensors file, in file order, on ``device`` (default: the default)."""
    path = Path(path)
    tensors = {}
    with open(path, "rb") as f:
        header, start = _read_header(f, path)
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dtype = SAFETENSORS_DTYPES[info["dtype"]]
            begin, end = info["data_offsets"]
            f.seek(start + begin)
            little = dtype.np.newbyteorder("<")
            array = np.frombuffer(f.read(end - begin), dtype=little).reshape(info["shape"])
            tensors[name] = tensor_from_host(array, dtype, device)
    return tensors


def safe_load_metadata(path: str | os.PathLike) -> dict[str, str]:
    """The ``__metadata__`` of a safetensors file (an empty dict if it has none)."""
    path = Path(path)
    with open(path, "rb") as f:
        header, _ = _read_header(f, path)
    return dict(header.get("__metadata__") or {})
