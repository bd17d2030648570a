"""The error an ONNX model meets when it uses what fusegrad does not implement."""

from fusegrad.errors import UnsupportedOp


class OnnxUnsupported(UnsupportedOp):
    """An op, opset, domain or attribute value fusegrad cannot run. Raised when an
    ``OnnxRunner`` is built (every node of every subgraph is checked first), never mid-run; the
    message names the node, the op, the opset, the attribute and the closest alternative."""
