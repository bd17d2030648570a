"""What goes into a runner: the model file, its constants and attributes as numpy values, and
the caller's inputs checked against the types and shapes the model declares."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import numpy_helper

from fusegrad.dtype import dtypes
from fusegrad.errors import DTypeError, FileFormatError, InvalidArgument, ShapeError
from fusegrad.nn.onnx import dtypes as onnx_dtypes
from fusegrad.tensor import Tensor

Value = Any  # a Tensor, Packed (a sub-byte type), a list of them, None, or a numpy array of str


def load_model(model: str | os.PathLike | bytes | onnx.ModelProto) -> onnx.ModelProto:
    """The ModelProto of a path, the bytes of a file, or a ModelProto; a clear error for a
    truncated or foreign file."""
    if isinstance(model, onnx.ModelProto):
        return model
    where = "the bytes given"
    if not isinstance(model, (bytes, bytearray, memoryview)):
        where = repr(os.fspath(model))
        with open(model, "rb") as f:
            model = f.read()
    try:
        proto = onnx.ModelProto.FromString(bytes(model))
    except (DecodeError, RuntimeWarning) as e:
        raise FileFormatError(
            f"{where} is not a whole ONNX model ({e}): the file is truncated or of another "
            "format; download or export it again"
        ) from None
    if not proto.graph.output or not proto.opset_import:
        lacking = "outputs" if proto.opset_import else "opsets"
        raise FileFormatError(
            f"{where} parsed as an ONNX model without {lacking}"
            ": the file is truncated or of another format; download or export it again"
        )
    return proto


def attribute_value(attr: onnx.AttributeProto) -> Any:
    """An attribute as a Python value: numbers, str, lists, numpy arrays; graphs stay protos."""
    value = onnx.helper.get_attribute_value(attr)
    if attr.type == onnx.AttributeProto.STRING:
        return value.decode("utf-8", errors="replace")
    if attr.type == onnx.AttributeProto.STRINGS:
        return [v.decode("utf-8", errors="replace") for v in value]
    if attr.type == onnx.AttributeProto.TENSOR:
        return tensor_value(value)
    if attr.type == onnx.AttributeProto.TENSORS:
        return [tensor_value(v) for v in value]
    if attr.type == onnx.AttributeProto.SPARSE_TENSOR:
        return sparse_value(value)
    if attr.type in (onnx.AttributeProto.INTS, onnx.AttributeProto.FLOATS):
        return list(value)
    return value


def tensor_value(proto: onnx.TensorProto) -> np.ndarray:
    """A TensorProto as numpy: narrow types as their uint8 codes, strings as str objects."""
    array = numpy_helper.to_array(proto)
    if proto.data_type in onnx_dtypes.NARROW:
        return onnx_dtypes.to_codes(array)
    if proto.data_type == onnx.TensorProto.STRING:
        return np.vectorize(_text, otypes=[object])(array) if array.size else array.astype(object)
    return array


def sparse_value(proto: onnx.SparseTensorProto) -> np.ndarray:
    """A sparse tensor attribute made dense."""
    values, indices = tensor_value(proto.values), numpy_helper.to_array(proto.indices)
    dense = np.zeros(tuple(proto.dims), dtype=values.dtype)
    if indices.ndim == 1:
        dense.reshape(-1)[indices] = values
    else:
        dense[tuple(indices.T)] = values
    return dense


def _text(v: Any) -> str:
    return v.decode("utf-8", errors="replace") if isinstance(v, bytes) else str(v)


@dataclass
class ValueSpec:
    """A graph input or output as the model declares it."""

    name: str
    kind: str  # "tensor", "sequence", "optional", "map" or "unknown"
    elem_type: int = 0  # the element type of the tensor (inside the sequence/optional)
    dims: tuple[int | str | None, ...] | None = None  # None: any rank

    @classmethod
    def of(cls, info: onnx.ValueInfoProto) -> ValueSpec:
        t, kind = info.type, "tensor"
        while t.HasField("sequence_type") or t.HasField("optional_type"):
            kind = "sequence" if t.HasField("sequence_type") and kind == "tensor" else kind
            kind = "optional" if t.HasField("optional_type") and kind == "tensor" else kind
            t = (
                t.sequence_type.elem_type
                if t.HasField("sequence_type")
                else t.optional_type.elem_type
            )
        if not t.HasField("tensor_type"):
            return cls(info.name, "map" if t.HasField("map_type") else "unknown")
        dims = None
        if t.tensor_type.HasField("shape"):
            dims = tuple(_dim(d) for d in t.tensor_type.shape.dim)
        return cls(info.name, kind, t.tensor_type.elem_type, dims)

    def describe(self) -> str:
        dims = "?" if self.dims is None else "[" + ", ".join(str(d) for d in self.dims) + "]"
        what = f"{onnx_dtypes.type_name(self.elem_type)} {dims}" if self.elem_type else "?"
        return what if self.kind == "tensor" else f"{self.kind} of {what}"


def _dim(d: onnx.TensorShapeProto.Dimension) -> int | str | None:
    if d.HasField("dim_value"):
        return d.dim_value
    return d.dim_param if d.HasField("dim_param") else None


def bind_input(spec: ValueSpec, given: dict[str, Any], device: str) -> Value:
    """The value of input ``spec``: checked against the declared type, made a Tensor."""
    if spec.name not in given or (given[spec.name] is None and spec.kind != "optional"):
        raise InvalidArgument(
            f"missing required input {spec.name!r} ({spec.describe()}); pass it in the inputs "
            f"dict: runner({{{spec.name!r}: array, ...}})"
        )
    value = given[spec.name]
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [to_tensor(spec, v, device) for v in value]
    return to_tensor(spec, value, device)


def to_tensor(spec: ValueSpec, value: Any, device: str) -> Value:
    """``value`` as a Tensor on ``device``, after checking its dtype and shape against ``spec``
    (a host array of a sub-byte type becomes ``Packed``: only its packed bytes are copied)."""
    if isinstance(value, onnx_dtypes.Packed):
        return _packed_input(spec, value, device)
    if isinstance(value, np.ndarray) and value.dtype.kind in "OSU":
        return value.astype(object)
    if isinstance(value, (np.ndarray, np.generic)) and spec.elem_type in onnx_dtypes.NARROW:
        if value.dtype != np.uint8:
            value = onnx_dtypes.to_codes(np.asarray(value))
    if not isinstance(value, Tensor):
        value = np.asarray(value)
    if isinstance(value, np.ndarray) and value.dtype.name == "bfloat16":
        value = onnx_dtypes.host_tensor(value, device)
    dtype = value.dtype if isinstance(value, Tensor) else _fusegrad_dtype(spec, value.dtype)
    if spec.elem_type:
        expected = onnx_dtypes.to_dtype(spec.elem_type)
        if dtype != expected:
            raise DTypeError(
                f"input {spec.name!r} is {getattr(dtype, 'name', value.dtype)}, the model declares "
                f"{spec.describe()}; convert it first, e.g. array.astype(np.{expected.np.name})"
            )
    shape = tuple(value.shape)
    if spec.dims is not None and spec.kind == "tensor":
        check_shape(spec, shape)
    if isinstance(value, Tensor):
        return value if value.device == device else value.to(device)
    if spec.elem_type in onnx_dtypes.SUB_BYTE:
        return onnx_dtypes.Packed.from_numpy(value, spec.elem_type, device)
    return Tensor(value, device=device)


def _packed_input(spec: ValueSpec, value: onnx_dtypes.Packed, device: str) -> Value:
    if spec.elem_type and spec.elem_type != value.elem_type:
        raise DTypeError(
            f"input {spec.name!r} is packed {onnx_dtypes.type_name(value.elem_type)}, the model "
            f"declares {spec.describe()}; pack the values as that type"
        )
    if spec.dims is not None and spec.kind == "tensor":
        check_shape(spec, value.shape)
    return value.to(device)


def _fusegrad_dtype(spec: ValueSpec, npdtype: np.dtype) -> Any:
    try:
        return dtypes.from_numpy(npdtype)
    except DTypeError:
        raise DTypeError(
            f"input {spec.name!r} is a numpy {npdtype} array, which fusegrad cannot hold; the model"
            f" declares {spec.describe()}: convert it first"
        ) from None


def check_shape(spec: ValueSpec, shape: tuple[Any, ...]) -> None:
    """Refuse a shape that contradicts the declared one (named dims, and the 0 or -1 some
    exporters write for an unknown size, may be anything)."""
    assert spec.dims is not None
    fits = len(shape) == len(spec.dims) and all(
        not isinstance(d, int) or not isinstance(s, int) or d == s or d <= 0
        for d, s in zip(spec.dims, shape)
    )
    if not fits:
        raise ShapeError(
            f"input {spec.name!r} has shape {list(shape)}, the model declares {spec.describe()} "
            "(named dims may be any size); reshape or resize the input to fit"
        )
