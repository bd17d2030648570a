"""Every public torch name a model might use, and where fusegrad stands on it: docs/torch-names.md.

    python scripts/torch_names.py           # rewrite docs/torch-names.md
    python scripts/torch_names.py --check   # exit 1 (and show the difference) when it is stale

Three sources are compared with fusegrad's API (``Tensor``'s attributes, ``fusegrad.__all__``,
``fusegrad.nn.__all__``): the public attributes of ``torch.Tensor``, the ``torch.*`` functions
that are also Tensor methods or make and combine tensors (``FUNCTIONS``), and
``torch.nn.functional``. Each name gets one status:

- supported: fusegrad has the same name;
- named differently: fusegrad has it under another name (``RENAMED``; each target is looked up,
  and one that no longer exists is reported on stderr and not counted);
- deliberately absent: left out on purpose, with the reason (``ABSENT`` by name, ``ABSENT_KINDS``
  by pattern);
- missing: none of these, so far.

``COMMON`` lists the names model code commonly reaches for; its coverage is the headline figure.
Other helpers add ops all the time, so nothing here assumes fusegrad has a given name.
The script needs torch (the development environment has it); fusegrad itself never imports it.
"""

from __future__ import annotations

import difflib
import re
import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F  # noqa: N812 (torch's own spelling)

import fusegrad
import fusegrad.nn
from fusegrad import Tensor

OUT = Path(__file__).resolve().parent.parent / "docs" / "torch-names.md"

SUPPORTED, RENAMED_STATUS, ABSENT_STATUS, MISSING = STATUSES = (
    "supported",
    "named differently",
    "deliberately absent",
    "missing",
)

#: torch functions that are not Tensor methods but make, combine or describe tensors
FUNCTIONS = tuple(
    """
arange as_tensor asarray atleast_1d atleast_2d atleast_3d block_diag broadcast_shapes
broadcast_tensors bucketize cartesian_prod cat cdist column_stack combinations concat
concatenate cumulative_trapezoid dstack einsum empty empty_like eye from_numpy full full_like
hstack inference_mode isin linspace logspace manual_seed meshgrid no_grad normal ones ones_like
poisson rand rand_like randint randint_like randn randn_like randperm row_stack scalar_tensor
searchsorted seed stack std_mean tensor tensordot trapezoid tril_indices triu_indices
unravel_index vander var_mean vstack zeros zeros_like
""".split()
)

#: torch name -> fusegrad's spelling of the same thing ("Tensor.x", "fusegrad.x", "fusegrad.nn.X")
RENAMED = {
    "absolute": "Tensor.abs",
    "arccos": "Tensor.acos",
    "arccosh": "Tensor.acosh",
    "arcsin": "Tensor.asin",
    "arcsinh": "Tensor.asinh",
    "arctan": "Tensor.atan",
    "arctan2": "Tensor.atan2",
    "arctanh": "Tensor.atanh",
    "as_tensor": "fusegrad.Tensor",
    "asarray": "fusegrad.Tensor",
    "batch_norm": "Tensor.batchnorm",
    "bfloat16": "Tensor.cast",
    "binary_cross_entropy": "Tensor.binary_crossentropy",
    "binary_cross_entropy_with_logits": "Tensor.binary_crossentropy_logits",
    "bitwise_and": "Tensor.__and__",
    "bitwise_left_shift": "Tensor.lshift",
    "bitwise_not": "Tensor.__invert__",
    "bitwise_or": "Tensor.__or__",
    "bitwise_right_shift": "Tensor.rshift",
    "bitwise_xor": "Tensor.__xor__",
    "bool": "Tensor.cast",
    "byte": "Tensor.cast",
    "char": "Tensor.cast",
    "clamp": "Tensor.clip",
    "clamp_max": "Tensor.clip",
    "clamp_min": "Tensor.clip",
    "concat": "Tensor.cat",
    "concatenate": "Tensor.cat",
    "copy_": "Tensor.assign",
    "cpu": "Tensor.to",
    "cuda": "Tensor.to",
    "data": "Tensor.detach",
    "dim": "Tensor.ndim",
    "divide": "Tensor.div",
    "double": "Tensor.cast",
    "embedding": "fusegrad.nn.Embedding",
    "fix": "Tensor.trunc",
    "float": "Tensor.cast",
    "from_numpy": "fusegrad.Tensor",
    "greater": "Tensor.__gt__",
    "greater_equal": "Tensor.__ge__",
    "group_norm": "fusegrad.nn.GroupNorm",
    "half": "Tensor.cast",
    "inference_mode": "Tensor.no_grad_mode",
    "int": "Tensor.cast",
    "itemsize": "Tensor.element_size",
    "layer_norm": "Tensor.layernorm",
    "max_pool1d_with_indices": "Tensor.max_pool1d",
    "max_pool2d_with_indices": "Tensor.max_pool2d",
    "max_pool3d_with_indices": "Tensor.max_pool3d",
    "less": "Tensor.__lt__",
    "less_equal": "Tensor.__le__",
    "long": "Tensor.cast",
    "multiply": "Tensor.mul",
    "ndimension": "Tensor.ndim",
    "negative": "Tensor.neg",
    "nelement": "Tensor.numel",
    "no_grad": "Tensor.no_grad_mode",
    "not_equal": "Tensor.__ne__",
    "rms_norm": "fusegrad.nn.RMSNorm",
    "scalar_tensor": "fusegrad.Tensor",
    "short": "Tensor.cast",
    "size": "Tensor.shape",
    "subtract": "Tensor.sub",
    "tensor": "fusegrad.Tensor",
    "true_divide": "Tensor.div",
    "type": "Tensor.cast",
    "unsafe_chunk": "Tensor.chunk",
    "unsafe_split": "Tensor.split",
    "unsafe_split_with_sizes": "Tensor.split",
    "upsample": "Tensor.interpolate",
    "upsample_bilinear": "Tensor.interpolate",
    "upsample_nearest": "Tensor.interpolate",
    "view": "Tensor.reshape",
}

#: names fusegrad has with another meaning: RENAMED's entry wins over the same name
OTHER_MEANING = {"no_grad"}  # Tensor.no_grad is the flag that Tensor.no_grad_mode() sets
#: torch.nn.functional names whose meaning differs from the Tensor method of the same name
#: (F.unfold is im2col; Tensor.unfold, torch's and ours, takes sliding windows of one axis)
FUNCTIONAL_OTHER_MEANING = {"unfold"}

IN_PLACE = (
    "in-place variant: fusegrad ops return new lazy tensors; x.assign(value) or x[i] = value "
    "rebinds a tensor to a new value, so write x.assign(x.op(...))"
)

#: torch name -> why fusegrad leaves it out
ABSENT = {
    "apply_": "no Python callback per element: graphs are compiled",
    "data_ptr": "buffers belong to the device plugins; Tensor.numpy() copies the values out",
    "is_pinned": "no pinned host memory: copies are the device plugin's business",
    "is_shared": "no tensors shared between processes",
    "map_": "no Python callback per element: graphs are compiled",
    "pin_memory": "no pinned host memory: copies are the device plugin's business",
    "record_stream": "no user-visible streams",
    "register_hook": "no autograd hooks: derivatives are a rewrite of the lazy graph",
    "retain_grad": "gradients are computed for what is asked (Tensor.gradient, backward's leaves)",
    "share_memory_": "no tensors shared between processes",
    "storage": "buffers belong to the device plugins; Tensor.numpy() copies the values out",
}

#: (pattern, reason): whole kinds of names left out; the first match gives the reason
ABSENT_KINDS = (
    (
        r"^(is_)?sparse|_sparse|^to_sparse|coalesce|^indices$|^values$|crow_|col_indices|ccol_"
        r"|row_indices|^dense_dim$|^to_dense$|^smm$|^sspaddmm$",
        "sparse tensors: fusegrad tensors are dense",
    ),
    (
        r"^q_|quantize|^int_repr$|qscheme|^is_quantized$|^dequantize",
        "quantized tensors: low-bit weights are a model loader's business, not a tensor kind",
    ),
    (
        r"^(is_)?conj|complex|^real$|^imag$|^angle$|^resolve_neg$|^is_neg$|^resolve_conj$|^polar$"
        r"|^view_as_real$|^c(double|float|half)$",
        "complex numbers: no complex dtypes",
    ),
    (
        r"^(is_)?cuda$|^is_(mps|xpu|ipu|hpu|mtia|vulkan|xla|maia|meta|mkldnn|nested)$"
        r"|^(ipu|xpu|mtia)$|mkldnn|^nested|^is_cpu$|^get_device$",
        "device kinds are plugins here: Tensor.device names one, Tensor.to moves there",
    ),
    (
        r"^names$|^rename_?$|^refine_names$|^align_to$|^align_as$|^has_names$|^unflatten_names",
        "named tensors: axes are positional",
    ),
    (r"_$", IN_PLACE),
    (
        r"^is_inference$|^is_leaf$|^output_nr$|^grad_fn$|^retains_grad$|^_version$"
        r"|^untyped_storage$|^storage_offset$|^stride$|^is_set_to$|^dim_order$|^module_load$|^new$"
        r"|^sum_to_size$|^as_subclass$",
        "autograd and storage internals with no counterpart in a lazy graph",
    ),
    (
        r"^(fbgemm|quantized|mkldnn|miopen|cudnn|native|rnn_|lstm|gru|batch_norm_|cummaxmin"
        r"|segment_reduce)",
        "backend-specific kernels and internals",
    ),
    (
        r"^(cholesky|qr|svd|eig|symeig|lstsq|lu|lu_solve|solve|triangular_solve|inverse|pinverse"
        r"|det|logdet|slogdet|geqrf|orgqr|ormqr|matrix_exp|cholesky_inverse"
        r"|cholesky_solve)$",
        "dense linear-algebra solvers (LAPACK's work) are outside a fusing compiler's core; "
        "numpy.linalg has them",
    ),
    (
        r"^(assert_int_or_pair|boolean_dispatch|handle_torch_function|has_torch_function.*"
        r"|is_distributed|hash_tensor|reinforce|volatile|const_data_ptr|grad_dtype|layout"
        r"|slice_inverse|to_padded_tensor|register_.*hook|new_empty_strided|as_strided.*|name"
        r"|storage_type)$",
        "torch's dispatch, storage or layout machinery, not tensor math",
    ),
)

#: what model code commonly uses: the headline coverage is measured on these
COMMON = frozenset(
    """
abs acos acosh adaptive_avg_pool1d adaptive_avg_pool2d adaptive_max_pool1d adaptive_max_pool2d
add addcdiv addcmul addmm affine_grid all allclose amax amin aminmax any arange argmax argmin
argsort argwhere as_tensor asin asinh atan atan2 atanh avg_pool1d avg_pool2d avg_pool3d backward
baddbmm batch_norm bernoulli binary_cross_entropy binary_cross_entropy_with_logits bitwise_and
bitwise_not bitwise_or bitwise_xor bmm bool broadcast_to bucketize cat cdist ceil celu chunk
clamp clamp_max clamp_min clip clone contiguous conv1d conv2d conv3d conv_transpose1d
conv_transpose2d copy_ cos cosh cosine_similarity count_nonzero cross cross_entropy ctc_loss
cummax cummin cumprod cumsum deg2rad detach device diag diagonal diff dim div dot double dropout
dropout2d dtype einsum elu embedding empty eq equal erf erfinv exp exp2 expand expand_as expm1
eye flatten flip float floor floor_divide fmod fold frac from_numpy full full_like gather
gaussian_nll_loss ge gelu glu grad grid_sample group_norm gt gumbel_softmax half hardsigmoid
hardswish hardtanh hstack huber_loss hypot index_add index_fill index_select instance_norm int
interpolate isclose isfinite isinf isnan item kl_div kron kthvalue l1_loss layer_norm le
leaky_relu lerp linear linspace log log10 log1p log2 log_softmax logaddexp logcumsumexp
logical_and logical_not logical_or logit logsigmoid logsumexp long lt mT manual_seed
margin_ranking_loss masked_fill masked_select matmul max max_pool1d max_pool2d max_pool3d
max_unpool2d maximum mean median meshgrid min minimum mish mm movedim mse_loss mul multinomial
nan_to_num nanmean nansum narrow ndim ne neg new_full new_ones new_tensor new_zeros nll_loss
no_grad nonzero norm normal normalize numel numpy one_hot ones ones_like outer pad
pairwise_distance permute pixel_shuffle pixel_unshuffle poisson_nll_loss pow prelu prod quantile
rand rand_like randint randn randn_like randperm reciprocal relu relu6 remainder repeat
repeat_interleave requires_grad requires_grad_ reshape reshape_as rms_norm roll round rsqrt
scaled_dot_product_attention scatter scatter_add scatter_reduce searchsorted select selu shape
sigmoid sign silu sin sinh size smooth_l1_loss softmax softmin softplus softshrink softsign sort
split sqrt square squeeze stack std std_mean sub sum swapaxes t take_along_dim tan tanh tensor
tensor_split tensordot threshold tile to tolist topk trace transpose tril triplet_margin_loss
triu trunc type_as unbind unflatten unfold unique unsqueeze var var_mean view view_as vstack
where xlogy zeros zeros_like
""".split()
)


def api() -> dict[str, str]:
    """fusegrad's public names -> where they live (``Tensor.x``, ``fusegrad.x``, ``fusegrad.nn.x``).

    ``Tensor`` first: a torch name that is both a method and a function is found as the method.
    Modules (``fusegrad.tensor``) and names a module merely imports are not API.
    """
    found: dict[str, str] = {}
    spaces = (
        ("Tensor", Tensor, dir(Tensor)),
        ("fusegrad", fusegrad, _public(fusegrad)),
        ("fusegrad.nn", fusegrad.nn, _public(fusegrad.nn)),
    )
    for label, space, names in spaces:
        for name in names:
            if not name.startswith("_") and not isinstance(_get(space, name), types.ModuleType):
                found.setdefault(name, f"{label}.{name}")
    return found


def _public(module: types.ModuleType) -> list[str]:
    return list(getattr(module, "__all__", None) or dir(module))


def _get(space: object, name: str) -> object:
    """``getattr`` that never raises: a half-written op elsewhere must not stop the report."""
    try:
        return getattr(space, name, _NOTHING)
    except Exception:  # noqa: BLE001 (a property or descriptor may raise anything)
        return _NOTHING


_NOTHING = object()


def exists(target: str) -> bool:
    """Whether a RENAMED target (``Tensor.x``, ``fusegrad.x``, ``fusegrad.nn.X``) exists today."""
    head, _, attr = target.rpartition(".")
    space = {"Tensor": Tensor, "fusegrad": fusegrad, "fusegrad.nn": fusegrad.nn}.get(head)
    return space is not None and _get(space, attr) is not _NOTHING


def status(name: str, ours: dict[str, str], functional: bool = False) -> tuple[str, str]:
    """(status, fusegrad's name or the reason) of one torch name, given ``api()`` (and whether
    it is the ``torch.nn.functional`` name)."""
    if functional and name in FUNCTIONAL_OTHER_MEANING:
        ours = {k: v for k, v in ours.items() if k != name}
    renamed = RENAMED.get(name)
    if renamed and name in OTHER_MEANING and exists(renamed):
        return RENAMED_STATUS, f"`{renamed}`"
    if name in ours:
        return SUPPORTED, f"`{ours[name]}`"
    if renamed and exists(renamed):
        return RENAMED_STATUS, f"`{renamed}`"
    if name in ABSENT:
        return ABSENT_STATUS, ABSENT[name]
    for pattern, reason in ABSENT_KINDS:
        if re.search(pattern, name):
            return ABSENT_STATUS, reason
    return MISSING, ""


FUNCTIONAL = "`torch.nn.functional`"


def sources() -> dict[str, list[str]]:
    """The torch names per source (title -> sorted names)."""
    methods = sorted(n for n in dir(torch.Tensor) if not n.startswith("_"))
    functions = sorted(
        n
        for n in dir(torch)
        if not n.startswith("_")
        and n[0].islower()
        and callable(_get(torch, n))
        and (n in methods or n in FUNCTIONS)
    )
    functional = sorted(
        n
        for n in dir(F)
        if not n.startswith("_")
        and n[0].islower()
        and callable(_get(F, n))
        and getattr(_get(F, n), "__module__", "").startswith("torch")
    )
    return {
        "Tensor methods (`torch.Tensor`)": methods,
        "torch functions (`torch.*`)": functions,
        FUNCTIONAL: functional,
    }


def problems(tables: dict[str, list[str]]) -> list[str]:
    """What the hand-kept lists got wrong (stale targets, unknown names): warnings, not errors."""
    everything = {n for names in tables.values() for n in names}
    stale = sorted(f"{k} -> {v}" for k, v in RENAMED.items() if not exists(v))
    unknown = sorted(n for n in COMMON if n not in everything)
    return [f"RENAMED target that does not exist: {s}" for s in stale] + [
        f"COMMON name that torch does not have: {n}" for n in unknown
    ]


def render() -> str:
    """The whole of docs/torch-names.md."""
    ours, tables = api(), sources()
    per_table = {
        title: {n: status(n, ours, functional=title == FUNCTIONAL) for n in names}
        for title, names in tables.items()
    }
    statuses = {n: st for table in reversed(per_table.values()) for n, st in table.items()}
    common = sorted(n for n in COMMON if n in statuses)
    covered = [n for n in common if statuses[n][0] in (SUPPORTED, RENAMED_STATUS)]
    missing = [n for n in common if statuses[n][0] == MISSING]
    lines = [
        "# torch names in fusegrad",
        "",
        f"Generated by `python scripts/torch_names.py` from torch "
        f"{torch.__version__.split('+')[0]} and today's fusegrad (`--check` says whether this "
        "page is current; a test in `tests/docs` runs it). Each public name of `torch.Tensor`, "
        "of the `torch.*` functions that are Tensor methods or make tensors, and of "
        "`torch.nn.functional` is **supported** (the same name on `Tensor`, `fusegrad` or "
        "`fusegrad.nn`), **named differently** (fusegrad's name given), **deliberately absent** "
        "(with the reason) or **missing** (not yet).",
        "",
        f"**Commonly used: supported or named differently {len(covered)} / {len(common)} "
        f"({100 * len(covered) / len(common):.0f}%).** The script's `COMMON` list holds the "
        "names model code commonly uses.",
        "",
        "Commonly used and missing: " + (", ".join(f"`{n}`" for n in missing) or "none") + ".",
        "",
        "| status | " + " | ".join(tables) + " | all names |",
        "|---" * (len(tables) + 2) + "|",
    ]
    for s in STATUSES:
        counts = [sum(st[0] == s for st in table.values()) for table in per_table.values()]
        total = sum(v[0] == s for v in statuses.values())
        lines.append(f"| {s} | " + " | ".join(map(str, counts)) + f" | {total} |")
    lines.append(
        "| total | " + " | ".join(str(len(v)) for v in tables.values()) + f" | {len(statuses)} |"
    )
    for title, names in tables.items():
        lines += [
            "",
            f"## {title}",
            "",
            "| name | status | fusegrad name / reason |",
            "|---|---|---|",
        ]
        lines += [f"| `{n}` | {per_table[title][n][0]} | {per_table[title][n][1]} |" for n in names]
    return "\n".join(lines) + "\n"


def main() -> int:
    text = render()
    for warning in problems(sources()):
        print(f"warning: {warning}", file=sys.stderr)
    if "--check" in sys.argv:
        old = OUT.read_text() if OUT.exists() else ""
        if old == text:
            return 0
        diff = difflib.unified_diff(
            old.splitlines(), text.splitlines(), "committed", "now", lineterm="", n=0
        )
        print("\n".join(list(diff)[:40]))
        print(
            f"docs/{OUT.name} is stale: run `python scripts/torch_names.py` and commit the result"
        )
        return 1
    OUT.write_text(text)
    print(next(line for line in text.splitlines() if line.startswith("**Commonly")))
    print(next(line for line in text.splitlines() if line.startswith("Commonly used and missing")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
