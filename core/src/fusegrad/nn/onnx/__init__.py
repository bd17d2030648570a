"""Run ONNX models: ``OnnxRunner(path)({"x": array})`` (see docs/onnx.md).

Needs the ``onnx`` package (``pip install fusegrad[onnx]``) to parse models. The op modules
below register their ops with ``registry.onnx_op`` when imported.
"""

from fusegrad.nn.onnx import (  # noqa: F401 (importing a module registers its ops)
    ops_attention,
    ops_control,
    ops_detection,
    ops_index,
    ops_loss,
    ops_math,
    ops_ml,
    ops_nn,
    ops_quant,
    ops_reduce,
    ops_rnn,
    ops_sequence,
    ops_shape,
    ops_signal,
    ops_string,
    ops_training,
    ops_vision,
)
from fusegrad.nn.onnx.errors import OnnxUnsupported
from fusegrad.nn.onnx.registry import OPS, Node, lookup, onnx_op
from fusegrad.nn.onnx.runner import OnnxRunner, load_model, onnx_check

__all__ = [
    "OPS",
    "Node",
    "OnnxRunner",
    "OnnxUnsupported",
    "load_model",
    "lookup",
    "onnx_check",
    "onnx_op",
]
