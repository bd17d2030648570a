"""Bad input a PyTorch user would write: each raises a typed error whose message names what was
wrong and how to fix it, never an internal error (AttributeError, KeyError...) from deep inside.

Each row is (id, what the user does, the exception type, a regex the message must match). The
regexes check both halves of the message: the value that was wrong and the way out.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

from fusegrad import Tensor, Variable, nn
from fusegrad.errors import (
    DTypeError,
    FusegradError,
    InvalidArgument,
    InvalidType,
    ShapeError,
    StateDictError,
)
from fusegrad.nn.optim import SGD, Adam, AdamW
from fusegrad.nn.state import load_state_dict


def t(*shape: int) -> Tensor:
    return Tensor(np.zeros(shape, np.float32))


def ti(*shape: int) -> Tensor:
    return Tensor(np.zeros(shape, np.int32))


def _consumed_generator():
    params = (p for p in [t(2).requires_grad_()])
    list(params)
    return params


def _two_bounds():
    return Tensor.ones(4).reshape(Variable("n_dup", 1, 20).bind(4)) + Tensor.ones(4).reshape(
        Variable("n_dup", 1, 10).bind(4)
    )


def _cat_two_bounds():
    a = Tensor.ones(4, 2).reshape(Variable("n_cat", 1, 20).bind(4), 2)
    return a.cat(Tensor.ones(4, 2).reshape(Variable("n_cat", 1, 10).bind(4), 2), dim=1)


def _backward(gradient: Tensor | None) -> None:
    x = t(3).requires_grad_()  # (held here: the graph alone does not keep a leaf alive)
    (x * 2).backward(gradient)


def _backward_without_leaves() -> None:
    gc.collect()  # (tensors of earlier cases that require grad, caught in reference cycles)
    t(3).sum().backward()


class _Device:
    """What ``torch.device("cpu")`` looks like: not a string."""

    type = "cpu"

    def __repr__(self) -> str:
        return "device(type='cpu')"


_AXIS = r"axis {a} is out of range for a {n}-d tensor \(valid: .*\)"

CASES = [
    # --- reshape / view / expand / repeat ---
    (
        "reshape_count",
        lambda: t(2, 3).reshape(4, 2),
        ShapeError,
        r"cannot reshape \(2, 3\).*8 elements\); the new sizes must multiply to 6",
    ),
    (
        "reshape_two_minus_one",
        lambda: t(2, 3).reshape(-1, -1),
        ShapeError,
        r"only one size may be -1",
    ),
    ("reshape_float", lambda: t(2, 3).reshape(3.0, 2), TypeError, r"got \(3\.0, 2\); write int"),
    (
        "view_count",
        lambda: t(2, 3).view(5),
        ShapeError,
        r"\(5,\) \(5 elements\); the new sizes must multiply to 6",
    ),
    (
        "expand_negative",
        lambda: t(1, 3).expand(-2, 3),
        ShapeError,
        r"\(-2, 3\): sizes must be non-negative \(or -1 to keep a size\)",
    ),
    (
        "expand_incompatible",
        lambda: t(2, 3).expand(4, 3),
        ShapeError,
        r"cannot expand \(2, 3\) to \(4, 3\): only size-1 axes can grow",
    ),
    (
        "expand_fewer_dims",
        lambda: t(2, 3).expand(3),
        ShapeError,
        r"fewer dimensions \(3,\); give a size for each axis",
    ),
    (
        "expand_float",
        lambda: t(1, 3).expand(2.5, 3),
        TypeError,
        r"got \(2\.5, 3\); write int\(size\)",
    ),
    ("repeat_negative", lambda: t(2).repeat(-1), ValueError, r"non-negative ints, got \(-1,\)"),
    ("repeat_fewer", lambda: t(2, 3).repeat(2), ShapeError, r"at least 2 counts.*or use tile"),
    ("repeat_float", lambda: t(2).repeat(1.5), ValueError, r"non-negative ints, got \(1\.5,\)"),
    (
        "permute_repeated",
        lambda: t(2, 3).permute(0, 0),
        ShapeError,
        r"2-d tensor needs each axis once, got \(0, 0\)",
    ),
    (
        "permute_too_few",
        lambda: t(2, 3, 4).permute(0, 1),
        ShapeError,
        r"3-d tensor needs each axis once, got \(0, 1\)",
    ),
    ("permute_out_of_range", lambda: t(2, 3).permute(0, 2), IndexError, _AXIS.format(a=2, n=2)),
    ("transpose_dim", lambda: t(2, 3).transpose(0, 2), IndexError, _AXIS.format(a=2, n=2)),
    ("squeeze_dim", lambda: t(2, 3).squeeze(3), IndexError, _AXIS.format(a=3, n=2)),
    ("unsqueeze_dim", lambda: t(2, 3).unsqueeze(-4), IndexError, _AXIS.format(a=-4, n=3)),
    ("flatten_dim", lambda: t(2, 3).flatten(0, 2), IndexError, _AXIS.format(a=2, n=2)),
    ("flip_dim", lambda: t(2, 3).flip(2), IndexError, _AXIS.format(a=2, n=2)),
    ("movedim_dim", lambda: t(2, 3).movedim(0, 2), IndexError, _AXIS.format(a=2, n=2)),
    (
        "unflatten_sizes",
        lambda: t(6).unflatten(0, (4, 2)),
        RuntimeError,
        r"sizes \(4, 2\) do not multiply up to the size 6.*at most one size may be -1",
    ),
    # --- reductions and softmax ---
    ("sum_dim", lambda: t(2, 3).sum(2), IndexError, _AXIS.format(a=2, n=2)),
    ("mean_dim", lambda: t(2, 3).mean(-3), IndexError, _AXIS.format(a=-3, n=2)),
    ("max_dim", lambda: t(2, 3).max(5), IndexError, _AXIS.format(a=5, n=2)),
    ("min_dim", lambda: t(2, 3).min(2), IndexError, _AXIS.format(a=2, n=2)),
    ("prod_dim", lambda: t(2, 3).prod(2), IndexError, _AXIS.format(a=2, n=2)),
    ("std_dim", lambda: t(2, 3).std(2), IndexError, _AXIS.format(a=2, n=2)),
    ("var_dim", lambda: t(2, 3).var(2), IndexError, _AXIS.format(a=2, n=2)),
    ("argmax_dim", lambda: t(2, 3).argmax(2), IndexError, _AXIS.format(a=2, n=2)),
    ("argmin_dim", lambda: t(2, 3).argmin(2), IndexError, _AXIS.format(a=2, n=2)),
    ("any_dim", lambda: t(2, 3).any(2), IndexError, _AXIS.format(a=2, n=2)),
    ("all_dim", lambda: t(2, 3).all(2), IndexError, _AXIS.format(a=2, n=2)),
    ("logsumexp_dim", lambda: t(2, 3).logsumexp(2), IndexError, _AXIS.format(a=2, n=2)),
    ("cumsum_dim", lambda: t(2, 3).cumsum(2), IndexError, _AXIS.format(a=2, n=2)),
    ("softmax_dim", lambda: t(2, 3).softmax(2), IndexError, _AXIS.format(a=2, n=2)),
    ("log_softmax_dim", lambda: t(2, 3).log_softmax(-3), IndexError, _AXIS.format(a=-3, n=2)),
    ("sort_dim", lambda: t(2, 3).sort(2), IndexError, _AXIS.format(a=2, n=2)),
    ("topk_dim", lambda: t(2, 3).topk(1, 2), IndexError, _AXIS.format(a=2, n=2)),
    (
        "topk_k",
        lambda: t(2, 3).topk(4),
        RuntimeError,
        r"topk k=4 is out of range for a dimension of size 3; k must lie in 0\.\.3",
    ),
    # --- joining and splitting ---
    ("cat_dim", lambda: Tensor.cat(t(2, 3), t(2, 3), dim=2), IndexError, _AXIS.format(a=2, n=2)),
    ("cat_plain_list", lambda: Tensor.cat([[1.0], [2.0]]), TypeError, r"cat joins Tensors.*wrap"),
    ("cat_list_arg", lambda: t(2).cat([2.0]), TypeError, r"got list \[2\.0\] at position 1; wrap"),
    (
        "cat_both_forms",
        lambda: Tensor.cat([t(2)], t(2)),
        ValueError,
        r"give a sequence of tensors or the tensors themselves, not both",
    ),
    (
        "cat_empty",
        lambda: Tensor.cat([]),
        ShapeError,
        r"cat needs at least one tensor, got an empty list",
    ),
    (
        "cat_shapes",
        lambda: t(2, 3).cat(t(2, 4)),
        ShapeError,
        r"\(2, 4\) does not match \(2, 3\); every size but dim 0's",
    ),
    ("stack_dim", lambda: Tensor.stack(t(2), t(2), dim=3), IndexError, _AXIS.format(a=3, n=2)),
    ("stack_plain_list", lambda: Tensor.stack([1, 2]), TypeError, r"stack joins Tensors, got int"),
    ("stack_shapes", lambda: t(2).stack(t(3)), ShapeError, r"one shape, got \(2,\).*\(3,\)"),
    ("split_sum", lambda: t(6).split([2, 3]), ShapeError, r"\[2, 3\] do not add up to 6"),
    ("split_zero", lambda: t(6).split(0), ValueError, r"split size must be positive \(>= 1\)"),
    ("split_dim", lambda: t(6).split(2, dim=1), IndexError, _AXIS.format(a=1, n=1)),
    ("chunk_zero", lambda: t(6).chunk(0), ValueError, r"chunks >= 1, got chunks=0"),
    ("chunk_negative", lambda: t(6).chunk(-2), ValueError, r"chunks >= 1, got chunks=-2"),
    ("chunk_dim", lambda: t(6).chunk(2, dim=1), IndexError, _AXIS.format(a=1, n=1)),
    # --- gathering ---
    ("gather_dim", lambda: t(2, 3).gather(2, ti(2, 3)), IndexError, _AXIS.format(a=2, n=2)),
    (
        "gather_float_index",
        lambda: t(2, 3).gather(1, t(2, 3)),
        RuntimeError,
        r"gather index must be an int tensor, got float32; cast it with \.long\(\)",
    ),
    (
        "index_select_dim",
        lambda: t(2, 3).index_select(2, ti(1)),
        IndexError,
        _AXIS.format(a=2, n=2),
    ),
    (
        "index_out_of_range",
        lambda: t(3)[3],
        IndexError,
        r"index 3 is out of bounds for dimension 0 with size 3",
    ),
    ("index_float", lambda: t(3)[1.0], IndexError, r"unsupported index 1\.0; use ints"),
    ("narrow_start", lambda: t(2, 3).narrow(1, 5, 1), IndexError, r"narrow start 5.*size 3"),
    ("select_index", lambda: t(2, 3).select(1, 4), IndexError, r"select index 4.*size 3"),
    ("unbind_dim", lambda: t(2, 3).unbind(2), IndexError, r"dim 2 is out of range for a 2-d"),
    # --- broadcasting and matmul ---
    (
        "broadcast",
        lambda: t(2, 3) + t(4),
        ShapeError,
        r"\(2, 3\) and \(4,\) do not broadcast: .*equal or 1",
    ),
    (
        "matmul_inner",
        lambda: t(2, 3) @ t(4, 5),
        ShapeError,
        r"inner sizes differ \(3 vs 4\); the last axis of the first must match",
    ),
    (
        "matmul_scalar",
        lambda: Tensor(2.0) @ t(2),
        ShapeError,
        r"at least 1-d inputs, got shapes \(\) and \(2,\); multiply by a 0-d tensor",
    ),
    (
        "linear_in_features",
        lambda: nn.Linear(3, 2)(t(4, 5)),
        ShapeError,
        r"\(4, 5\) and \(3, 2\): inner sizes differ",
    ),
    (
        "where_shapes",
        lambda: (t(3) > 0).where(t(2), t(3)),
        ShapeError,
        r"\(2,\) and \(3,\) do not broadcast: .*equal or 1",
    ),
    # --- dtypes ---
    (
        "dtype_unknown_string",
        lambda: Tensor([1], dtype="float8"),
        DTypeError,
        r"unknown dtype 'float8'; known dtypes: bool",
    ),
    (
        "dtype_numpy_object",
        lambda: Tensor([1], dtype=np.complex64),
        DTypeError,
        r"numpy dtype complex64 has no fusegrad equivalent; cast it first",
    ),
    (
        "dtype_wrong_object",
        lambda: Tensor([1], dtype=3),
        DTypeError,
        r"got int 3; use e\.g\. dtypes\.float32",
    ),
    (
        "dtype_python_type",
        lambda: Tensor([1], dtype=list),
        DTypeError,
        r"got type <class 'list'>; use e\.g\. dtypes\.float32",
    ),
    ("cast_unknown", lambda: t(2).cast("halfs"), DTypeError, r"unknown dtype 'halfs'"),
    (
        "bitwise_and_float",
        lambda: t(2) & t(2),
        InvalidArgument,
        r"integer or bool tensors, got float32; cast",
    ),
    (
        "bitwise_or_float",
        lambda: t(2) | t(2),
        InvalidArgument,
        r"integer or bool tensors, got float32; cast",
    ),
    (
        "bitwise_xor_float",
        lambda: t(2) ^ t(2),
        InvalidArgument,
        r"integer or bool tensors, got float32; cast",
    ),
    (
        "bitwise_not_float",
        lambda: ~t(2),
        InvalidArgument,
        r"integer or bool tensors, got float32; cast",
    ),
    (
        "shift_float",
        lambda: t(2) << 1,
        InvalidArgument,
        r"integer or bool tensors, got float32; cast",
    ),
    (
        "int_requires_grad",
        lambda: Tensor([1, 2], requires_grad=True),
        DTypeError,
        r"only floating-point tensors can require gradients, got int32; cast it first",
    ),
    (
        "int_requires_grad_",
        lambda: ti(2).requires_grad_(),
        DTypeError,
        r"require gradients, got int32; cast it first with \.float\(\)",
    ),
    (
        "add_string",
        lambda: t(2) + "a",
        DTypeError,
        r"cannot combine str 'a' with a dtypes\.float32 tensor; use a number or a Tensor",
    ),
    # --- construction ---
    (
        "tensor_ragged",
        lambda: Tensor([[1, 2], [3]]),
        ShapeError,
        r"ragged nested lists .*; the lists of one level must all have the same length",
    ),
    (
        "tensor_string",
        lambda: Tensor("abc"),
        FusegradError,
        r"from str 'abc'; use numbers or lists",
    ),
    (
        "tensor_object",
        lambda: Tensor(object()),
        FusegradError,
        r"cannot make a Tensor from object; pass numbers, lists or a numpy array",
    ),
    (
        "tensor_device_int",
        lambda: Tensor([1.0], device=0),
        TypeError,
        r"device must be a string such as 'CPU' or 'CUDA:0', got int 0; pass its name",
    ),
    (
        "tensor_device_object",
        lambda: Tensor([1.0], device=_Device()),
        TypeError,
        r"device must be a string .*got _Device device\(type='cpu'\); pass its name",
    ),
    ("to_device_int", lambda: t(2).to(0), TypeError, r"got int 0; pass its name"),
    ("zeros_device_int", lambda: Tensor.zeros(2, device=1), TypeError, r"got int 1; pass its"),
    (
        "to_unknown_device",
        lambda: t(2).to("NOSUCHDEV"),
        LookupError,
        r"no installed backend provides 'NOSUCHDEV'.*install it with",
    ),
    (
        "zeros_float_size",
        lambda: Tensor.zeros(2.0, 3),
        TypeError,
        r"sizes must be ints, got .*2\.0.*; write int\(size\)",
    ),
    (
        "ones_float_size",
        lambda: Tensor.ones(2, 3.5),
        TypeError,
        r"sizes must be ints, got \(2, 3\.5\); write int\(size\)",
    ),
    (
        "empty_float_size",
        lambda: Tensor.empty(2.0),
        TypeError,
        r"sizes must be ints, got .*2\.0.*; write int\(size\)",
    ),
    (
        "rand_float_size",
        lambda: Tensor.rand(2.0),
        TypeError,
        r"sizes must be ints, got .*2\.0.*; write int\(size\)",
    ),
    (
        "randn_float_size",
        lambda: Tensor.randn(1.5),
        TypeError,
        r"sizes must be ints, got \(1\.5,\); write int\(size\)",
    ),
    (
        "full_float_size",
        lambda: Tensor.full((2.0,), 1),
        TypeError,
        r"sizes must be ints, got .*2\.0.*; write int\(size\)",
    ),
    ("zeros_negative", lambda: Tensor.zeros(2, -1), ShapeError, r"non-negative ints.*\(2, -1\)"),
    (
        "arange_step_zero",
        lambda: Tensor.arange(0, 5, 0),
        FusegradError,
        r"step must not be zero; give a positive or negative step",
    ),
    (
        "linspace_negative",
        lambda: Tensor.linspace(0, 1, -1),
        RuntimeError,
        r"linspace needs steps >= 0 \(got -1\)",
    ),
    ("eye_negative", lambda: Tensor.eye(-1), ShapeError, r"eye needs sizes >= 0, got n=-1"),
    (
        "one_hot_negative",
        lambda: ti(3).one_hot(-2),
        RuntimeError,
        r"num_classes must be -1 \(infer\) or >= 0, got -2",
    ),
    ("one_hot_float", lambda: t(3).one_hot(4), RuntimeError, r"got float32; cast it with \.long"),
    (
        "randint_empty",
        lambda: Tensor.randint(2, low=5, high=5),
        FusegradError,
        r"low < high, got low=5, high=5",
    ),
    # --- functional arguments ---
    ("dropout_negative", lambda: t(2).dropout(-0.1), ValueError, r"between 0 and 1, but got -0\.1"),
    ("dropout_above_one", lambda: t(2).dropout(1.5), ValueError, r"between 0 and 1, but got 1\.5"),
    ("nn_dropout_above_one", lambda: nn.Dropout(2.0), ValueError, r"between 0 and 1, but got 2\.0"),
    (
        "max_pool_kernel_zero",
        lambda: t(1, 1, 4, 4).max_pool2d(0),
        ValueError,
        r"kernel_size must be at least 1.*got 0",
    ),
    (
        "avg_pool_kernel_zero",
        lambda: t(1, 1, 4, 4).avg_pool2d(0),
        ValueError,
        r"kernel_size must be at least 1.*got 0",
    ),
    (
        "max_pool_stride_zero",
        lambda: t(1, 1, 4, 4).max_pool2d(2, 0),
        ValueError,
        r"stride must be at least 1",
    ),
    (
        "avg_pool_stride_zero",
        lambda: t(1, 1, 4, 4).avg_pool2d(2, 0),
        ValueError,
        r"stride must be at least 1",
    ),
    (
        "pool_kernel_too_big",
        lambda: t(1, 1, 2, 2).max_pool2d(3),
        ShapeError,
        r"window of 3 does not fit in an axis of size 2",
    ),
    (
        "conv_stride_zero",
        lambda: t(1, 1, 4, 4).conv2d(t(1, 1, 3, 3), stride=0),
        ValueError,
        r"stride must be at least 1",
    ),
    (
        "conv_dilation_zero",
        lambda: t(1, 1, 4, 4).conv2d(t(1, 1, 3, 3), dilation=0),
        ValueError,
        r"dilation must be at least 1",
    ),
    (
        "conv_channels",
        lambda: t(1, 2, 4, 4).conv2d(t(1, 3, 3, 3)),
        ShapeError,
        r"need input \(N, 3, \.\.\.\)",
    ),
    (
        "conv_groups",
        lambda: t(1, 4, 4, 4).conv2d(t(2, 2, 3, 3), groups=3),
        ShapeError,
        r"groups=3: need input \(N, 6",
    ),
    (
        "conv_kernel_too_big",
        lambda: t(1, 1, 2, 2).conv2d(t(1, 1, 3, 3)),
        ShapeError,
        r"window of 3 does not fit",
    ),
    (
        "conv_input_dims",
        lambda: t(4, 4).conv2d(t(1, 1, 3, 3)),
        ShapeError,
        r"input \(4, 4\).*need input \(N, 1, \.\.\.\) with 2 spatial axes",
    ),
    (
        "pad_mode",
        lambda: t(1, 4).pad((1, 1), mode="mirror"),
        ValueError,
        r"unknown padding mode 'mirror'; use 'constant', 'reflect'",
    ),
    (
        "pad_negative_beyond",
        lambda: t(3).pad((-2, -2)),
        ShapeError,
        r"crops more than the axis holds; .*at most 3",
    ),
    ("pad_odd", lambda: t(3).pad((1,)), ShapeError, r"needs an even number of values"),
    (
        "reflect_pad_too_big",
        lambda: t(1, 3).pad((3, 3), mode="reflect"),
        ShapeError,
        r"must be less than the axis size",
    ),
    (
        "interpolate_mode",
        lambda: t(1, 1, 4).interpolate((8,), mode="cubicx"),
        FusegradError,
        r"'cubicx' is not supported; use one of nearest, nearest-exact, linear",
    ),
    (
        "cross_entropy_reduction",
        lambda: t(2, 3).cross_entropy(ti(2), reduction="avg"),
        ValueError,
        r"reduction must be 'none', 'mean' or 'sum', got 'avg'",
    ),
    (
        "cross_entropy_numpy_target",
        lambda: t(2, 3).cross_entropy(np.array([0, 2], np.int32)),
        InvalidType,
        r"cross_entropy: target must be a Tensor, got ndarray; wrap it first: Tensor\(target\)",
    ),
    (
        "nll_loss_list_target",
        lambda: t(2, 3).log_softmax(1).nll_loss([0, 2]),
        InvalidType,
        r"nll_loss: target must be a Tensor, got list; wrap it first",
    ),
    (
        "mse_reduction",
        lambda: t(2).mse_loss(t(2), reduction="batchmean"),
        ValueError,
        r"'none', 'mean' or 'sum', got 'batchmean'",
    ),
    (
        "cross_entropy_shape",
        lambda: t(2, 3).cross_entropy(ti(3)),
        ShapeError,
        r"needs class indices of shape \(2,\), got \(3,\)",
    ),
    (
        "multinomial_zero",
        lambda: t(3).softmax().multinomial(0),
        ValueError,
        r"num_samples >= 1, got 0",
    ),
    (
        "repeat_interleave_negative",
        lambda: t(3).repeat_interleave(-1),
        ValueError,
        r"repeats >= 0 \(an int\), got -1",
    ),
    (
        "unfold_step_zero",
        lambda: t(6).unfold(0, 2, 0),
        RuntimeError,
        r"step > 0, got size=2, step=0",
    ),
    (
        "pool_padding_big",
        lambda: t(1, 1, 4, 4).max_pool2d(2, padding=2),
        ValueError,
        r"padding 2 must be at most half the window \(1 .*pad the input with \.pad\(\) first",
    ),
    (
        "conv_padding_string",
        lambda: t(1, 1, 4, 4).conv2d(t(1, 1, 3, 3), padding="full"),
        ValueError,
        r"int, ints, 'same' or 'valid', got 'full'",
    ),
    (
        "conv_transpose_channels",
        lambda: t(1, 3, 4, 4).conv_transpose2d(t(4, 2, 3, 3), stride=2),
        RuntimeError,
        r"weight is \(C_in, C_out / groups, \*kernel\), so the input needs shape \(N, 4, \.\.\.\)",
    ),
    (
        "conv_transpose_stride_zero",
        lambda: t(1, 1, 3, 3).conv_transpose2d(t(1, 1, 2, 2), stride=0),
        ValueError,
        r"stride must be at least 1",
    ),
    (
        "sum_repeated_axis",
        lambda: t(2, 3).sum(axis=(0, 0)),
        RuntimeError,
        r"dim 0 appears multiple times .*; name each axis once",
    ),
    (
        "reshape_not_divide",
        lambda: Tensor.arange(5).reshape(2, -1),
        ShapeError,
        r"cannot reshape \(5,\) to \(2, -1\): sizes do not divide",
    ),
    (
        "flatten_start_after_end",
        lambda: t(2, 3, 4).flatten(2, 0),
        ShapeError,
        r"start_dim comes after end_dim",
    ),
    (
        "scatter_float_index",
        lambda: t(3).scatter(0, t(3), 1.0),
        RuntimeError,
        r"scatter index must be an integer tensor, got float32",
    ),
    (
        "index_select_float",
        lambda: t(2, 3).index_select(0, t(1)),
        IndexError,
        r"must be int or bool tensors, got float32",
    ),
    ("eye_float", lambda: Tensor.eye(2.5), TypeError, r"sizes must be ints, got \(2\.5"),
    ("topk_negative", lambda: t(3).topk(-1), RuntimeError, r"k=-1 is out of range"),
    ("kthvalue_big", lambda: t(3).kthvalue(5), RuntimeError, r"k=5 is out of range.*counts from 1"),
    ("cross_size", lambda: t(2, 2).cross(t(2, 2)), ShapeError, r"cross needs size 3 along axis"),
    (
        "linspace_float_steps",
        lambda: Tensor.linspace(0, 1, 2.5),
        TypeError,
        r"steps must be an int, got 2\.5; write int\(steps\)",
    ),
    ("arange_nan", lambda: Tensor.arange(float("nan")), RuntimeError, r"finite numbers; no inf"),
    (
        "clip_none",
        lambda: t(3).clip(None, None),
        RuntimeError,
        r"clip needs min_ or max_ \(or both\)",
    ),
    ("sum_unknown_dtype", lambda: t(3).sum(dtype="x"), DTypeError, r"unknown dtype 'x'; known"),
    ("tensor_none", lambda: Tensor(None), FusegradError, r"from NoneType; pass numbers, lists"),
    ("tensor_set", lambda: Tensor({1, 2}), FusegradError, r"from set; pass numbers, lists"),
    ("tril_1d", lambda: t(3).tril(), ShapeError, r"at least 2 dimensions, got shape \(3,\)"),
    (
        "roll_shifts_no_dims",
        lambda: t(2, 3).roll((1, 2)),
        RuntimeError,
        r"roll needs one shift per dim, got shifts=\(1, 2\) and dims=None",
    ),
    (
        "nll_float_target",
        lambda: t(2, 3).nll_loss(t(2)),
        RuntimeError,
        r"class indices as an int tensor, got float32",
    ),
    (
        "cross_entropy_prob_shape",
        lambda: t(2, 3).cross_entropy(t(2, 4)),
        ShapeError,
        r"pass class indices \(\(2,\)\) as an int tensor",
    ),
    (
        "gather_out_of_range",
        lambda: t(3).gather(0, Tensor([5])).numpy(),
        IndexError,
        r"index 5 is out of bounds for dim 0 \(size 3\): valid indices are 0\.\.2",
    ),
    # --- nn layers ---
    (
        "linear_zero_in",
        lambda: nn.Linear(0, 4),
        ValueError,
        r"Linear: in_features=0 must be a positive size \(>= 1\)",
    ),
    (
        "linear_negative_in",
        lambda: nn.Linear(-1, 4),
        ValueError,
        r"in_features=-1 must be a positive size \(>= 1\)",
    ),
    (
        "linear_negative_out",
        lambda: nn.Linear(4, -3),
        ValueError,
        r"out_features=-3 must be a positive size \(>= 1\)",
    ),
    (
        "linear_float",
        lambda: nn.Linear(2.5, 4),
        TypeError,
        r"in_features=2\.5 must be an int; write int",
    ),
    (
        "conv_zero_channels",
        lambda: nn.Conv2d(0, 4, 3),
        ValueError,
        r"Conv2d: in_channels=0 must be a positive size \(>= 1\)",
    ),
    (
        "conv_zero_out",
        lambda: nn.Conv2d(3, 0, 3),
        ValueError,
        r"out_channels=0 must be a positive size \(>= 1\)",
    ),
    (
        "conv_kernel_zero",
        lambda: nn.Conv2d(3, 4, 0),
        ValueError,
        r"kernel_size=0 must be a positive size \(>= 1\)",
    ),
    (
        "conv_layer_stride_zero",
        lambda: nn.Conv2d(3, 4, 3, stride=0),
        ValueError,
        r"stride=0 must be a positive size \(>= 1\)",
    ),
    (
        "conv_layer_groups",
        lambda: nn.Conv2d(4, 4, 3, groups=3),
        ShapeError,
        r"groups=3 must divide in_channels=4",
    ),
    (
        "conv_layer_groups_zero",
        lambda: nn.Conv2d(4, 4, 3, groups=0),
        ValueError,
        r"groups=0 must be a positive size \(>= 1\)",
    ),
    (
        "conv_padding_mode",
        lambda: nn.Conv2d(1, 1, 3, padding="full"),
        ValueError,
        r"padding='full' is not a padding; use an int, 'same'",
    ),
    (
        "embedding_negative",
        lambda: nn.Embedding(-1, 4),
        ValueError,
        r"vocab_size=-1 must be a positive size \(>= 1\)",
    ),
    (
        "embedding_float_index",
        lambda: nn.Embedding(4, 2)(t(3)),
        RuntimeError,
        r"integer indices, got float32; cast them",
    ),
    (
        "batchnorm_zero",
        lambda: nn.BatchNorm2d(0),
        ValueError,
        r"num_features=0 must be a positive size \(>= 1\)",
    ),
    (
        "layernorm_zero",
        lambda: nn.LayerNorm(0),
        ValueError,
        r"normalized_shape=0 must be a positive size \(>= 1\)",
    ),
    (
        "groupnorm_zero",
        lambda: nn.GroupNorm(0, 4),
        ValueError,
        r"num_groups=0 must be a positive size \(>= 1\)",
    ),
    (
        "groupnorm_divide",
        lambda: nn.GroupNorm(3, 4),
        ShapeError,
        r"num_groups=3 must divide num_channels=4",
    ),
    (
        "layernorm_input",
        lambda: nn.LayerNorm(4)(t(2, 3)),
        ShapeError,
        r"got input of shape \(2, 3\); its last axes must be \(4,\)",
    ),
    (
        "batchnorm_input",
        lambda: nn.BatchNorm2d(3)(t(3)),
        ShapeError,
        r"needs \(batch, channels, \.\.\.\) input, got shape \(3,\)",
    ),
    (
        "conv_layer_input",
        lambda: nn.Conv2d(3, 4, 3)(t(1, 2, 5, 5)),
        ShapeError,
        r"need input \(N, 3, \.\.\.\)",
    ),
    # --- optimizers ---
    (
        "sgd_empty",
        lambda: SGD([]),
        ValueError,
        r"SGD got no parameters.*pass the model's parameters",
    ),
    (
        "adam_empty",
        lambda: Adam([]),
        ValueError,
        r"Adam got no parameters.*pass the model's parameters",
    ),
    (
        "adamw_empty",
        lambda: AdamW([]),
        ValueError,
        r"AdamW got no parameters.*pass the model's parameters",
    ),
    (
        "adam_consumed_generator",
        lambda: Adam(_consumed_generator()),
        ValueError,
        r"Adam got no parameters.*a generator can be used once only: make it a list",
    ),
    (
        "sgd_negative_lr",
        lambda: SGD([t(2).requires_grad_()], lr=-0.1),
        ValueError,
        r"SGD: invalid learning rate lr=-0\.1; it must be >= 0",
    ),
    (
        "adam_negative_lr",
        lambda: Adam([t(2).requires_grad_()], lr=-1),
        ValueError,
        r"Adam: invalid learning rate lr=-1; it must be >= 0",
    ),
    (
        "adam_beta_one",
        lambda: Adam([t(2).requires_grad_()], b1=1.0),
        ValueError,
        r"Adam: b1=1\.0 is not a beta; betas lie in \[0, 1\)",
    ),
    (
        "adamw_beta_negative",
        lambda: AdamW([t(2).requires_grad_()], b2=-0.5),
        ValueError,
        r"AdamW: b2=-0\.5 is not a beta; betas lie in \[0, 1\)",
    ),
    (
        "sgd_negative_momentum",
        lambda: SGD([t(2).requires_grad_()], momentum=-1),
        ValueError,
        r"SGD: momentum=-1 .*must be >= 0",
    ),
    (
        "sgd_no_grad",
        lambda: SGD([t(2).requires_grad_()]).step(),
        FusegradError,
        r"have no \.grad; call loss\.backward\(\) before step\(\)",
    ),
    (
        "sgd_lr_string",
        lambda: SGD([t(2).requires_grad_()], lr="0.1"),
        TypeError,
        r"SGD: lr must be a number, got str",
    ),
    (
        "sgd_tensor_not_list",
        lambda: SGD(t(2).requires_grad_()),
        TypeError,
        r"got one Tensor; pass \[tensor\]",
    ),
    # --- state dicts ---
    (
        "state_missing",
        lambda: load_state_dict(nn.Linear(2, 3), {"weight": t(3, 2)}),
        StateDictError,
        r"missing from the state dict: bias; pass strict=False",
    ),
    (
        "state_unexpected",
        lambda: load_state_dict(nn.Linear(2, 3, bias=False), {"weight": t(3, 2), "extra": t(1)}),
        StateDictError,
        r"not in the model: extra.*strict=False",
    ),
    (
        "state_shape",
        lambda: load_state_dict(nn.Linear(2, 3), {"weight": t(2, 3), "bias": t(3)}),
        StateDictError,
        r"wrong shape or kind: weight \(state dict \(2, 3\) float32, model \(3, 2\)",
    ),
    # --- symbolic sizes ---
    (
        "variable_same_name_other_bounds",
        _two_bounds,
        ValueError,
        r"two Variables named 'n_dup' have different bounds \[1, [12]0\] and \[1, [12]0\]; "
        r"make each Variable once",
    ),
    (
        "variable_same_name_in_cat",
        _cat_two_bounds,
        ValueError,
        r"two Variables named 'n_cat' have different bounds \[1, [12]0\] and \[1, [12]0\]",
    ),
    (
        "variable_out_of_bounds",
        lambda: Variable("seq", 1, 10).bind(11),
        ValueError,
        r"Variable 'seq' takes an int in \[1, 10\], got 11; bind a value within its bounds",
    ),
    (
        "variable_bad_bounds",
        lambda: Variable("n", 5, 2),
        ValueError,
        r"Variable 'n' needs int bounds 0 <= lo <= hi, got 5 and 2",
    ),
    (
        "variable_unbound",
        lambda: t(4, 3).reshape(Variable("seq", 1, 10), 3),
        ValueError,
        r"Variable 'seq' has no value here; bind it: var\.bind\(n\)",
    ),
    # --- autograd and reading values ---
    (
        "backward_non_scalar",
        lambda: _backward(None),
        ShapeError,
        r"backward\(\) of a tensor of shape \(3,\) needs gradient=",
    ),
    (
        "backward_no_requires_grad",
        lambda: _backward_without_leaves(),
        FusegradError,
        r"no tensor in this graph has requires_grad=True; make",
    ),
    (
        "backward_gradient_shape",
        lambda: _backward(t(2)),
        ShapeError,
        r"gradient of shape \(2,\) for a tensor of shape \(3,\); pass a gradient of the",
    ),
    (
        "item_multi",
        lambda: t(2, 3).item(),
        ShapeError,
        r"one element, this one has shape \(2, 3\); read more values with \.tolist",
    ),
    (
        "bool_requires_grad",
        lambda: Tensor([True]).requires_grad_(),
        DTypeError,
        r"require gradients, got bool",
    ),
    (
        "len_scalar",
        lambda: len(Tensor(1.0)),
        TypeError,
        r"len\(\) of a 0-d tensor; its value is \.item\(\)",
    ),
    (
        "bool_multi",
        lambda: bool(t(2)),
        ShapeError,
        r"truth value of a tensor of shape \(2,\) is ambiguous; use \.any\(\) or \.all\(\)",
    ),
]


@pytest.mark.parametrize("do, error, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input(do, error, message):
    with pytest.raises(error, match=message) as info:
        do()
    assert isinstance(info.value, FusegradError), f"not a fusegrad error: {info.value!r}"


def test_there_are_enough_cases():
    assert len(CASES) >= 100
    assert len({c[0] for c in CASES}) == len(CASES)
