"""The least kernels and memory traffic a GPT training step needs, to read fusegrad's against.

bench/bench_gpt.py and bench/run.py print fusegrad's kernels and MB moved per step of the
examples/gpt.py step; this module says what those figures could be with perfect fusion, and
sorts fusegrad's kernels into kinds, so that "200 kernels, 355 MB" reads as a distance from
a floor.

Kernels. Every matmul-shaped reduction (a sum over a contraction axis of the product of two
operands, each following an output axis the other ignores) is a kernel of its own in this
design, and everything else (norms, softmax, the loss, bias gradients, activations, the AdamW
update) could fuse into one of them as prologue or epilogue. So the minimum is the number of
those products in forward and backward, counted from the model's structure
(``minimum_matmuls``).

Bytes. A step with perfect fusion must still move (``minimum_bytes``):
  (a) each parameter read and written once, and AdamW's two moments read and written once:
      24 bytes per float32 parameter. Gradients never reach memory: the weight-gradient
      product's epilogue can apply the update (a bias gradient is a sum fused likewise). The
      other reads of a weight (by the forward, and by the backward's input-gradient product)
      are not counted, since a cache large enough could keep it; nor are AdamW's few scalars;
  (b) the activations autograd keeps from forward to backward, each written once and read
      once. They are measured, not derived: the unique float storages that torch's autograd
      saves for the same model (``saved_activation_bytes``), less the weights (counted in a).
      torch keeps some of them for convenience (a layernorm's output next to its input, a
      transposed copy of the attention output, the whole log-softmax of the logits), so this
      is a practical bound rather than a proof; its attention keeps no T x T matrix;
  (c) the input tokens read once (int32) and the loss written once.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusegrad.codegen.tiled import matmul_axes
from fusegrad.dtype import dtypes
from fusegrad.engine import capture
from fusegrad.uop.opcodes import GroupOp
from fusegrad.uop.ops import Ops, UOp, substitute, toposort

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import gpt  # noqa: E402  (examples/gpt.py)

#: the kinds of kernels of a step, in the order they are printed
KINDS = ("matmul-shaped", "other reductions", "elementwise", "copies")


# ---- kernels ------------------------------------------------------------------------------------


def minimum_matmuls(cfg: gpt.Config) -> dict[str, int]:
    """The matmul-shaped products of one step, by where they come from. Each block has four
    linear layers (qkv, attention output, MLP in and out), each a product forward and two
    backward (input and weight gradients); attention has two forward (q k^T, p v) and four
    backward (dp, dv, dq, dk). The head (x wte^T) has three; the embedding's forward is a
    gather (it fuses into the first layernorm; examples/gpt.py computes it as a one-hot
    product, one kernel above this count) but its gradient is a sum over the batch, a product
    of one-hot tokens with the gradient."""
    return {
        "linear layers": 4 * 3 * cfg.layers,
        "attention": (2 + 4) * cfg.layers,
        "head": 3,
        "embedding gradient": 1,
    }


def kernel_kind(ast: UOp) -> str:
    """One of ``KINDS`` for a kernel's AST: matmul-shaped when any of its sums is one (as the
    optimiser's ``matmul_axes`` defines it), another reduction when it reduces otherwise, a
    copy when every value it stores is a buffer moved (the layout pass's CONTIGUOUS copies),
    else elementwise."""
    values = _stored(ast)
    if matmul_products(ast):
        return "matmul-shaped"
    if any(u.op is Ops.REDUCE_AXIS for u in toposort(values)):
        return "other reductions"
    if all(_moved_buffer(v) for v in values):
        return "copies"
    return "elementwise"


def matmul_products(ast: UOp) -> int:
    """How many matmul-shaped sums a kernel holds: attention fused with online softmax holds
    two (q k^T and p v) in one kernel, a plain matmul one."""
    return sum(_matmul_shaped(u) for u in toposort(_stored(ast)) if u.op is Ops.REDUCE_AXIS)


def _stored(ast: UOp) -> list[UOp]:
    """The values a kernel stores, one per output."""
    return [store.src[1] for store in ast.src if store.op is Ops.STORE]


def _moved_buffer(value: UOp) -> bool:
    """Whether ``value`` is one buffer seen through movement ops only (a layout copy)."""
    while value.op in GroupOp.Movement:
        value = value.src[0]
    return value.op is Ops.PARAM


def _matmul_shaped(reduce: UOp) -> bool:
    """Whether the sum ``reduce`` is matmul-shaped. Sums nested inside it (a softmax's, fused
    into an attention product) are replaced by buffers of their shape first: ``matmul_axes``
    looks at one sum, and what the product's operands depend on is all that matters."""
    inner = [u for u in toposort(list(reduce.src)) if u.op is Ops.REDUCE_AXIS]
    placeholders = {  # (buffer numbers past any kernel's own)
        u: UOp(Ops.RESHAPE, u.dtype, (UOp(Ops.PARAM, u.dtype, (), (1000 + i, u.size)),), u.shape)
        for i, u in enumerate(inner)
    }
    value = substitute(reduce, placeholders)
    store = UOp(Ops.STORE, dtypes.void, (value, value))
    return matmul_axes(UOp(Ops.SINK, dtypes.void, (store,))) is not None


@dataclass(frozen=True)
class StepKernels:
    """The kernels of one step: how many of each kind, and the matmul-shaped products in them
    (what the minimum counts: a kernel holding two is one kernel but two products)."""

    kinds: Counter[str]
    products: int

    @property
    def total(self) -> int:
        return sum(self.kinds.values())


def kernels_of_step(run: Callable[[], object]) -> StepKernels:
    """The kernels one call of ``run`` launches, by kind (recorded as TinyJit records a call,
    so every launch is seen, whichever realize made it)."""
    with capture.capturing() as recorded:
        run()
    asts = [runner.kernel.ast for runner, _ in recorded.launches]
    return StepKernels(Counter(map(kernel_kind, asts)), sum(map(matmul_products, asts)))


# ---- bytes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MinimumBytes:
    """The compulsory traffic of one step, in bytes, by part (the module docstring's a-c)."""

    state: int  # (a) parameters and AdamW moments, read and written once
    activations: int  # (b) what autograd keeps, counted once; moved twice
    io: int  # (c) tokens and loss

    @property
    def total(self) -> int:
        return self.state + 2 * self.activations + self.io

    def describe(self) -> str:
        """The sum spelled out, in MB."""
        return (
            f"{self.state / 1e6:.1f} MB parameters and AdamW moments (each read and written "
            f"once; gradients stay in registers) + 2 x {self.activations / 1e6:.1f} MB "
            f"activations torch's autograd saves (written, then read) + {self.io / 1e6:.3f} MB "
            "tokens and loss"
        )


def minimum_bytes(cfg: gpt.Config, activations: int) -> MinimumBytes:
    """The least traffic of a step of ``cfg``, given the ``activations`` bytes autograd keeps."""
    parameters = sum(a.size for a in gpt.initial_weights(cfg).values())
    tokens = cfg.batch * (cfg.context + 1) * 4  # int32, read once
    return MinimumBytes(state=parameters * 4 * 6, activations=activations, io=tokens + 4)


def saved_activation_bytes(loss_of: Callable[[], Any], leaves: Iterable[Any]) -> int:
    """Bytes of the float tensors torch's autograd saves for backward while ``loss_of()``
    builds the graph: each storage once (q, k and v are views of one), without the storages
    of ``leaves`` (the weights, and views of them such as wte^T) or integer tensors (tokens)."""
    import torch

    weights = {t.untyped_storage().data_ptr() for t in leaves}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if t.is_floating_point() and storage.data_ptr() not in weights:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_of()
    return sum(saved.values())


# ---- the report ---------------------------------------------------------------------------------


def summary(
    cfg: gpt.Config,
    ours: StepKernels,
    counted: dict[str, tuple[int, float]],
    minimum: MinimumBytes | None,
) -> list[str]:
    """Lines saying each contender's kernels and MB per step (``counted``: name -> (kernels,
    MB), fusegrad's eager step among them) against the minimum, with fusegrad's kernels
    (``ours``) by kind."""
    matmuls = minimum_matmuls(cfg)
    parts = " + ".join(f"{ours.kinds.get(k, 0)} {k}" for k in KINDS)
    where = " + ".join(f"{n} {what}" for what, n in matmuls.items())
    totals = ", ".join(f"{name} {n}" for name, (n, _) in counted.items())
    lines = [
        f"kernels per step: fusegrad {ours.total} = {parts} (holding {ours.products} "
        "matmul-shaped products)",
        f"  minimum {sum(matmuls.values())} = {where} (the matmul-shaped products, a kernel "
        f"each; all else could fuse into them); totals: {totals}",
    ]
    if minimum is None:
        return lines + ["MB moved per step: no minimum (torch is needed to measure activations)"]
    least = minimum.total / 1e6
    our_mb = counted["fusegrad"][1]
    others = [
        f"{name} {mb:.1f} ({mb / least:.2f}x)"
        for name, (_, mb) in counted.items()
        if name != "fusegrad"
    ]
    return lines + [
        f"MB moved per step: fusegrad {our_mb:.1f}, minimum {least:.1f} ({our_mb / least:.2f}x); "
        + "; ".join(others + ["torch not counted (no counter)"]),
        f"  minimum = {minimum.describe()}",
    ]
