"""Every public torch name a model might use, and where fusegrad stands on it: docs/torch-names.md.

    python scripts/torch_names.py           # rewrite docs/torch-names.md
    python scripts/torch_names.py --check   # exit 1 when the file is stale

Three sources are compared with fusegrad's API (``Tensor``'s attributes, the ``fusegrad`` package,
``fusegrad.nn``): the public attributes of ``torch.Tensor``, the ``torch.*`` functions that are
also Tensor methods or create tensors, and ``torch.nn.functional``. Each name gets one status:

- supported: fusegrad has the same name;
- renamed: fusegrad has it under another name (``RENAMED``, each target checked to exist);
- absent: deliberately left out, with the reason (``ABSENT`` by name, ``ABSENT_KINDS`` by pattern);
- missing: none of these, so far.

``COMMON`` lists the names model code commonly reaches for; its coverage is the headline figure.
The script needs torch (the development environment has it); fusegrad itself never imports it.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812 (torch's own spelling)

import fusegrad
import fusegrad.nn
from fusegrad import Tensor

OUT = Path(__file__).resolve().parent.parent / "docs" / "torch-names.md"

#: torch functions that make tensors without taking one (not Tensor methods)
CREATION = (
    "arange", "cat", "concat", "concatenate", "einsum", "empty", "empty_like", "eye", "full",
    "full_like", "hstack", "linspace", "logspace", "meshgrid", "ones", "ones_like", "rand",
    "rand_like", "randint", "randint_like", "randn", "randn_like", "randperm", "stack", "tensor",
    "tril_indices", "triu_indices", "vstack", "where", "zeros", "zeros_like", "cdist",
    "broadcast_tensors", "from_numpy", "manual_seed", "no_grad", "multinomial", "normal",
)

#: torch name -> the fusegrad spelling ("Tensor.x" or "fusegrad.x" / "fusegrad.nn.x")
RENAMED = {
    "concat": "Tensor.cat", "concatenate": "Tensor.cat", "clamp": "Tensor.clip",
    "clamp_min": "Tensor.clip", "clamp_max": "Tensor.clip", "absolute": "Tensor.abs",
    "negative": "Tensor.neg", "multiply": "Tensor.mul", "subtract": "Tensor.sub",
    "divide": "Tensor.div", "greater": "Tensor.__gt__", "less": "Tensor.__lt__",
    "greater_equal": "Tensor.__ge__", "less_equal": "Tensor.__le__", "not_equal": "Tensor.__ne__",
    "bitwise_not": "Tensor.__invert__", "bitwise_and": "Tensor.__and__", "bitwise_or": "Tensor.__or__",
    "bitwise_xor": "Tensor.__xor__", "bitwise_left_shift": "Tensor.__lshift__",
    "bitwise_right_shift": "Tensor.__rshift__", "tensor": "Tensor", "from_numpy": "Tensor",
    "manual_seed": "Tensor.manual_seed", "no_grad": "Tensor.train", "view": "Tensor.reshape",
    "numel": "Tensor.numel", "requires_grad_": "Tensor.requires_grad_", "arccos": "Tensor.acos",
    "arcsin": "Tensor.asin", "arctan": "Tensor.atan", "arccosh": "Tensor.acosh",
    "arcsinh": "Tensor.asinh", "arctanh": "Tensor.atanh", "arctan2": "Tensor.atan2",
    "fix": "Tensor.trunc", "matrix_power": "Tensor.matmul", "silu": "Tensor.silu",
    "scaled_dot_product_attention": "Tensor.scaled_dot_product_attention",
    "dropout": "Tensor.dropout", "embedding": "fusegrad.nn.Embedding",
    "batch_norm": "Tensor.batchnorm", "layer_norm": "Tensor.layernorm",
    "group_norm": "fusegrad.nn.GroupNorm", "rms_norm": "fusegrad.nn.RMSNorm",
    "linear": "Tensor.linear", "pixel_shuffle": "Tensor.pixel_shuffle",
    "binary_cross_entropy": "Tensor.binary_crossentropy",
    "binary_cross_entropy_with_logits": "Tensor.binary_crossentropy_logits",
    "avg_pool1d": "Tensor.avg_pool1d", "interpolate": "Tensor.interpolate",
    "upsample": "Tensor.interpolate", "conv_transpose2d": "Tensor.conv_transpose2d",
    "logsumexp": "Tensor.logsumexp", "size": "Tensor.shape", "dim": "Tensor.ndim",
    "ndimension": "Tensor.ndim", "nelement": "Tensor.numel", "data": "Tensor.detach",
    "cuda": "Tensor.to", "cpu": "Tensor.to", "type": "Tensor.cast", "double": "Tensor.cast",
    "short": "Tensor.cast", "char": "Tensor.cast", "byte": "Tensor.cast", "bfloat16": "Tensor.cast",
    "backward": "Tensor.backward", "grad": "Tensor.grad", "dtype": "Tensor.dtype",
}

#: torch name -> why fusegrad leaves it out
ABSENT = {
    "storage": "fusegrad buffers are owned by devices; Tensor.numpy() and Tensor.data() give the bytes",
    "data_ptr": "fusegrad buffers are owned by devices; Tensor.numpy() and Tensor.data() give the bytes",
    "is_pinned": "no pinned host memory: copies are the device's business",
    "pin_memory": "no pinned host memory: copies are the device's business",
    "share_memory_": "no shared-memory tensors between processes",
    "is_shared": "no shared-memory tensors between processes",
    "record_stream": "no user-visible streams",
    "retain_grad": "gradients are computed for what is asked (Tensor.gradient), not retained",
    "register_hook": "no autograd hooks: the derivative graph is built lazily and fused",
    "apply_": "no Python callbacks per element: graphs are compiled",
    "map_": "no Python callbacks per element: graphs are compiled",
    "set_": "tensors do not change their storage",
    "resize_": "tensors do not change their storage",
    "resize_as_": "tensors do not change their storage",
    "element_size": "use Tensor.dtype.itemsize",
    "nbytes": "use Tensor.nbytes() where a size in bytes is needed",
}

#: (pattern, reason): whole kinds of names left out
ABSENT_KINDS = (
    (r"^(is_)?sparse|_sparse|^to_sparse|coalesce|^indices$|^values$|crow_|col_indices|ccol_|row_indices|^dense_dim$|^to_dense$|^smm$|^sspaddmm$",
     "sparse tensors: fusegrad tensors are dense"),
    (r"^q_|quantize|^int_repr$|qscheme|^is_quantized$|fake_quantize|^dequantize",
     "quantized tensors: low-bit weights are handled by the model loaders, not a tensor kind"),
    (r"^(is_)?conj|complex|^real$|^imag$|^angle$|^resolve_neg$|^is_neg$|^resolve_conj$|^polar$|^view_as_real$",
     "complex numbers: no complex dtypes"),
    (r"^(is_)?cuda$|^is_mps$|^is_xpu$|^is_ipu$|^is_hpu$|^is_mtia$|^is_vulkan$|^is_xla$|^is_maia$|^is_meta$|^ipu$|^xpu$|^mtia$|^is_mkldnn$|^to_mkldnn$|mkldnn|^is_nested$|^nested",
     "device kinds are plugins here: Tensor.device names one, Tensor.to moves"),
    (r"^names$|^rename_?$|^refine_names$|^align_to$|^align_as$|^has_names$|^unflatten_names",
     "named tensors: axes are positional"),
    (r"_$", "in-place methods: fusegrad tensors are values in a lazy graph; write x = x.op(...) or x.assign(...)"),
    (r"^is_inference$|^inference_mode|^is_leaf$|^output_nr$|^grad_fn$|^requires_grad$|^retains_grad$|^_version$|^untyped_storage$|^storage_offset$|^stride$|^is_set_to$|^dim_order$|^module_load$|^new$|^smm$|^sum_to_size$|^align_|^as_subclass$|^has_",
     "autograd and storage internals that have no counterpart in a lazy graph"),
    (r"^(fbgemm|quantized|mkldnn|miopen|cudnn|native|rnn_|lstm|gru|batch_norm_|cummaxmin|segment_reduce|_)",
     "backend-specific kernels and internals"),
    (r"^(cholesky|qr|svd|eig|symeig|lstsq|lu|lu_solve|solve|triangular_solve|inverse|pinverse|det|"
     r"logdet|slogdet|geqrf|orgqr|ormqr|matrix_exp|cholesky_inverse|cholesky_solve)$",
     "dense linear-algebra solvers (LAPACK's work): not in a fusing compiler's core yet; numpy has them"),
    (r"^(assert_int_or_pair|boolean_dispatch|handle_torch_function|has_torch_function.*|"
     r"get_device|is_distributed|hash_tensor|reinforce|volatile|const_data_ptr|grad_dtype|layout|"
     r"slice_inverse|to_padded_tensor|register_.*hook|new_empty_strided|unsafe_.*|istft|stft|"
     r"as_strided.*|name|itemsize|is_cpu|storage_type)$",
     "torch's dispatch, storage or layout machinery, not tensor math"),
)

#: what model code commonly uses: the headline coverage is measured on these
COMMON = tuple(sorted(set("""
abs acos acosh add addcdiv addcmul addmm all allclose amax amin aminmax any arange argmax argmin
argsort asin asinh atan atan2 atanh backward baddbmm bitwise_and bitwise_not bitwise_or bitwise_xor
bmm broadcast_to cat ceil chunk clamp clip clone contiguous cos cosh cross cummax cummin cumprod
cumsum deg2rad detach diag diagonal dim div dot dropout einsum elu empty eq equal erf exp exp2
expand expand_as expm1 eye flatten flip float floor floor_divide fmod frac full full_like gather ge
gelu grad gt half hardswish hardtanh index_select int isclose isfinite isinf isnan item
layer_norm le leaky_relu lerp linspace log log10 log1p log2 log_softmax logaddexp logcumsumexp
logical_and logical_not logical_or logsigmoid logsumexp long lt masked_fill masked_select matmul max
maximum mean meshgrid min minimum mish mm mul multinomial nan_to_num narrow ne neg nonzero norm
normalize numel numpy one_hot ones ones_like outer pad permute pow prod rand rand_like randint randn
randn_like reciprocal relu relu6 remainder repeat repeat_interleave reshape roll round rsqrt
scaled_dot_product_attention scatter scatter_reduce selu sigmoid sign silu sin sinh size softmax
softmin softplus sort split sqrt square squeeze stack std sub sum t tan tanh tensor tile to tolist
topk transpose tril triu trunc type_as unbind unflatten unfold unique unsqueeze var view where
zeros zeros_like conv1d conv2d conv3d conv_transpose1d conv_transpose2d avg_pool1d avg_pool2d
avg_pool3d max_pool1d max_pool2d max_pool3d max_unpool2d adaptive_avg_pool2d adaptive_max_pool2d
interpolate embedding cross_entropy nll_loss mse_loss l1_loss smooth_l1_loss huber_loss
binary_cross_entropy binary_cross_entropy_with_logits kl_div cosine_similarity linear batch_norm
group_norm instance_norm rms_norm softsign hardsigmoid celu glu pixel_shuffle unfold fold
""".split())))


def fusegrad_has(name: str) -> bool:
    return any(hasattr(where, name) for where in (Tensor, fusegrad, fusegrad.nn))


def exists(target: str) -> bool:
    """Whether a RENAMED target ("Tensor.x", "fusegrad.x", "fusegrad.nn.X") exists."""
    head, _, attr = target.rpartition(".")
    where = {"Tensor": Tensor, "fusegrad": fusegrad, "fusegrad.nn": fusegrad.nn, "": fusegrad}[head]
    return hasattr(where, attr or target)


def status(name: str) -> tuple[str, str]:
    """(status, fusegrad name or reason) of one torch name."""
    if fusegrad_has(name):
        return "supported", ""
    if name in RENAMED and exists(RENAMED[name]):
        return "renamed", f"`{RENAMED[name]}`"
    if name in ABSENT:
        return "absent", ABSENT[name]
    for pattern, reason in ABSENT_KINDS:
        if re.search(pattern, name):
            return "absent", reason
    return "missing", ""


def sources() -> dict[str, list[str]]:
    """The torch names per source, sorted."""
    methods = sorted(n for n in dir(torch.Tensor) if not n.startswith("_"))
    functions = sorted(
        n for n in dir(torch)
        if not n.startswith("_") and callable(getattr(torch, n, None)) and n[0].islower()
        and (n in methods or n in CREATION)
    )
    functional = sorted(
        n for n in dir(F)
        if not n.startswith("_") and callable(getattr(F, n)) and n[0].islower()
        and getattr(getattr(F, n), "__module__", "").startswith("torch")
    )
    return {"torch.Tensor": methods, "torch": functions, "torch.nn.functional": functional}


def render() -> str:
    tables = sources()
    everything = {n for names in tables.values() for n in names}
    common = [n for n in COMMON if n in everything]
    covered = [n for n in common if status(n)[0] in ("supported", "renamed")]
    lines = [
        "# torch names in fusegrad",
        "",
        "Generated by `python scripts/torch_names.py` (torch " + torch.__version__.split("+")[0]
        + "); a test fails when it is stale. Each public name of `torch.Tensor`, the `torch.*` "
        "tensor functions and `torch.nn.functional` is **supported** (fusegrad has the same "
        "name on `Tensor`, `fusegrad` or `fusegrad.nn`), **renamed** (fusegrad's spelling given), "
        "**absent** (left out on purpose, with the reason) or **missing** (not yet).",
        "",
        f"**Commonly used names: {len(covered)} / {len(common)} supported or renamed "
        f"({100 * len(covered) / len(common):.0f}%).** Missing among them: "
        + (", ".join(f"`{n}`" for n in common if n not in covered) or "none") + ".",
        "",
    ]
    for source, names in tables.items():
        counts = Counter(status(n)[0] for n in names)
        summary = ", ".join(f"{counts[s]} {s}" for s in ("supported", "renamed", "absent", "missing"))
        lines += [f"## {source} ({len(names)} names: {summary})", "", "| name | status | fusegrad / why |",
                  "|---|---|---|"]
        lines += [f"| `{n}` | {s} | {note} |" for n in names for s, note in [status(n)]]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    text = render()
    if "--check" in sys.argv:
        stale = not OUT.exists() or OUT.read_text() != text
        if stale:
            print(f"{OUT.name} is stale: run python scripts/torch_names.py")
        return int(stale)
    OUT.write_text(text)
    print(next(line for line in text.split("\n") if line.startswith("**Commonly")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
