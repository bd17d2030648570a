"""The lazy ``Tensor``: PyTorch-style methods that build a UOp graph; nothing runs until a
result is needed (``realize``, ``numpy``, ``tolist``, ``item``).

Every method here is built from a handful of primitives: the ALU ops of ``Ops``, ``REDUCE_AXIS``
(sum and max), and the movement ops. Movement ops (reshape, permute, expand, pad, shrink, flip)
never copy; they stay in the graph and become index arithmetic when a kernel is generated.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeAlias

import numpy as np

from fusegrad.device import Buffer, Device
from fusegrad.dtype import DType, dtypes, promote_shaped, promote_types, scalar_type, to_dtype
from fusegrad.engine import realize as engine
from fusegrad.engine import shard as sharding
from fusegrad.errors import (
    FusegradError,
    InvalidArgument,
    InvalidType,
    ShapeError,
    UnknownOption,
)
from fusegrad.helpers import prod
from fusegrad.schedule.kernelize import KernelStep
from fusegrad.tensor import bounds
from fusegrad.tensor.aliases import AliasMixin
from fusegrad.tensor.autograd import _GRAD_TENSORS, REALIZED, AutogradMixin, check_differentiable
from fusegrad.tensor.functional import FunctionalMixin
from fusegrad.tensor.index import IndexMixin
from fusegrad.tensor.join import JoinMixin
from fusegrad.tensor.math_ops import MathMixin
from fusegrad.tensor.movement import (
    ONE_INT,
    MovementMixin,
    _unreshaped,
    broadcast_shapes,
    buffer_of,
    no_float_sizes,
)
from fusegrad.tensor.nn_ops import NNMixin
from fusegrad.tensor.random_ops import RandomMixin
from fusegrad.tensor.sampling import SamplingMixin
from fusegrad.tensor.scan import ScanMixin
from fusegrad.tensor.search import SearchMixin
from fusegrad.tensor.special import SpecialMixin
from fusegrad.uop import ops
from fusegrad.uop.ops import Ops, UOp, broadcast_scalar, is_symbolic, sym_eval

Scalar = int | float | bool
#: ``Tensor`` has cast methods named int, float and bool: annotations in its body use these
_int: TypeAlias = int
_float: TypeAlias = float
_bool: TypeAlias = bool


def buffer_uop(buf: Buffer, shape: tuple[int, ...]) -> UOp:
    """The graph node of a realized buffer, viewed with ``shape``."""
    node = UOp(Ops.BUFFER, buf.dtype, (), buf)
    return node if shape == (buf.size,) else UOp(Ops.RESHAPE, buf.dtype, (node,), shape)


class Tensor(
    AutogradMixin,
    MovementMixin,
    MathMixin,
    ScanMixin,
    SpecialMixin,
    IndexMixin,
    NNMixin,
    FunctionalMixin,
    SamplingMixin,
    AliasMixin,
    SearchMixin,
    JoinMixin,
    RandomMixin,
):
    """A lazy n-dimensional array on a device.

    >>> Tensor([1, 2, 3]).mul(2).tolist()
    [2, 4, 6]
    """

    __slots__ = ("uop", "device", "_requires_grad", "grad", "_graph", "__weakref__")
    _seed: ClassVar[int] = 0
    _rng_counter: ClassVar[int] = 0

    def __init__(
        self,
        data: Any,
        device: str | None = None,
        dtype: DType | str | None = None,
        requires_grad: bool | None = None,
    ):
        self.device = Device.DEFAULT if device is None else _device_arg(device)
        self.grad, self._graph = None, None
        self.requires_grad = requires_grad
        dtype = to_dtype(dtype) if dtype is not None else None
        if isinstance(data, UOp):
            self.uop = data if dtype is None else data.cast(dtype)
        elif isinstance(data, Tensor):
            self.uop = data.uop if dtype is None else data.uop.cast(dtype)
        elif isinstance(data, (bool, int, float)):
            self.uop = UOp.const(dtype or dtypes.from_py(data), data)
        elif isinstance(data, (list, tuple, np.ndarray)) or np.isscalar(data):
            self.uop = self._from_numpy(data, dtype)
        else:
            raise FusegradError(
                f"cannot make a Tensor from {type(data).__name__}; pass numbers, lists or a "
                "numpy array"
            )
        if requires_grad:
            check_differentiable(self.dtype)

    def _from_numpy(self, data: Any, dtype: DType | None) -> UOp:
        if isinstance(data, (np.ndarray, np.generic)):  # (np.True_, np.float32(2): their dtype)
            dtype = dtype or dtypes.from_numpy(data.dtype)
        else:
            dtype = dtype or dtypes.from_py(list(data) if isinstance(data, tuple) else data)
        if dtype == dtypes.bfloat16:  # numpy has no bfloat16: convert on the device
            return self._from_numpy(data, dtypes.float32).cast(dtypes.bfloat16)
        try:
            array = np.asarray(data, dtype=dtype.np)
        except ValueError as e:
            raise ShapeError(
                f"cannot make a Tensor from ragged nested lists ({e}); the lists of one level "
                "must all have the same length"
            ) from None
        if isinstance(self.device, tuple):  # several devices: a copy on each
            buffers = [Buffer(d, array.size, dtype).copyin(array) for d in self.device]
            pieces = tuple(buffer_uop(b, array.shape) for b in buffers)
            _SHARDED[0] = True
            return UOp(Ops.MULTI, dtype, pieces, (self.device, None))
        buf = Buffer(self.device, array.size, dtype).copyin(array)
        return buffer_uop(buf, array.shape)

    @classmethod
    def _wrap(cls, uop: UOp, device: str) -> Tensor:
        t = cls.__new__(cls)
        t.uop, t.device, t._requires_grad, t.grad, t._graph = uop, device, None, None, None
        return t

    # ---- properties ------------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        return self.uop.shape

    @property
    def dtype(self) -> DType:
        return self.uop.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numel(self) -> int:
        """The number of elements."""
        return prod(self.shape)

    def element_size(self) -> int:
        return self.dtype.itemsize

    def __len__(self) -> int:
        if not self.shape:
            raise InvalidType("len() of a 0-d tensor; its value is .item(), its size .numel()")
        return self.shape[0]

    def __bool__(self) -> bool:
        """The truth of a one-element tensor, as PyTorch; any other is refused, not True."""
        if self.numel() != 1:
            raise ShapeError(
                f"the truth value of a tensor of shape {self.shape} is ambiguous; "
                "use .any() or .all()"
            )
        return bool(self.item())

    def __repr__(self) -> str:
        return f"<Tensor {self.shape} {self.dtype.name} on {self.device}>"

    __hash__ = object.__hash__

    # ---- running ---------------------------------------------------------------------------------

    def schedule(self, *others: Tensor) -> list:
        """The kernels realizing these tensors would run, without running them."""
        todo = [t for t in (self, *others) if not _is_view(t.uop)]
        if _SHARDED[0] and any(_is_placed(t) for t in todo):
            raise InvalidArgument(
                "schedule() of a tensor on several devices: its kernels are planned per device "
                "as it is realized (engine/shard.py); realize it, or move it with .to(device)"
            )
        if not todo:
            return []
        plan = engine.plan_for([_unreshaped(t.uop) for t in todo], [t.device for t in todo])
        return [s for s in plan.steps if isinstance(s, KernelStep)]

    def realize(self, *others: Tensor) -> Tensor:
        """Compute this tensor (and ``others``) now, in as few kernels as the graph allows."""
        todo = [t for t in (self, *others) if not _is_view(t.uop)]
        if _SHARDED[0] and todo:
            todo = [t for t in todo if not _is_multi_view(t.uop)]
            placed = [t for t in todo if _is_placed(t)]
            if placed:
                _realize_placed(placed)
                todo = [t for t in todo if not _is_placed(t)]
        if todo:
            _realize_plain(todo)
        return self

    def contiguous(self) -> Tensor:
        """A tensor whose elements are laid out in order in a buffer of its own."""
        return self._wrap(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)), self.device)

    def clone(self) -> Tensor:
        """A copy, as ``torch.clone``: its own buffer once realized; gradients flow through it."""
        return self.contiguous()

    def _buffer(self, *also: Tensor) -> Buffer:
        """The buffer holding this tensor's elements in order (computing it if needed), with
        ``also`` realized in the same schedule. A sharded tensor's are gathered onto its first
        device first."""
        if isinstance(self.device, tuple):
            return self.to(self.device[0])._buffer(*also)
        if (buf := buffer_of(self.uop)) is not None:
            if also:
                also[0].realize(*also[1:])
            return buf
        if _GRAD_TENSORS and self._graph is None and self.requires_grad is not True:
            self._graph = self.uop  # loss.item() then loss.backward() still differentiates
        self.uop = self.contiguous().realize(*also).uop
        if self._graph is not None:
            REALIZED[self.uop] = self._graph
        return buffer_of(self.uop)  # type: ignore[return-value]

    def numpy(self) -> np.ndarray:
        """The values as a numpy array (a copy)."""
        if self.dtype == dtypes.bfloat16:
            return self.float().numpy()
        shape = tuple(sym_eval(s) for s in self.shape)  # a bound variable's value now
        if prod(shape) == 0:
            bounds.verify()
            return np.zeros(shape, dtype=self.dtype.np)
        buf = self._buffer(*bounds.waiting())  # index checks (tensor/bounds.py) run alongside
        bounds.verify()
        return buf.numpy()[: prod(shape)].reshape(shape)  # (it fits the largest value)

    def tolist(self) -> Any:
        """The values as (nested) Python lists."""
        return self.numpy().tolist()

    def item(self) -> Scalar:
        """The value of a one-element tensor."""
        if self.numel() != 1:
            raise ShapeError(
                f"item() needs a tensor with one element, this one has shape {self.shape}; "
                "read more values with .tolist() or .numpy()"
            )
        return self.numpy().reshape(()).item()

    def to(self, device: str) -> Tensor:
        """A copy on ``device`` (this tensor if it is already there); a tuple of devices
        replicates it on each (``shard(devices)``), and a sharded tensor is gathered.

        >>> Tensor([1, 2, 3], device="CPU").shard(("CPU", "PYTHON")).to("PYTHON").tolist()
        [1, 2, 3]
        """
        device = _device_arg(device)
        if device == self.device:
            return self
        if isinstance(device, tuple):
            return self.shard(device)
        engine.open_device(device)  # fail early and clearly if it cannot be opened
        if isinstance(self.device, tuple):
            return self._placed_on((device,), None)
        # copy the buffer itself (or a contiguous copy of a view), then view it again there
        src = self.uop if _is_buffer(self.uop) else self.contiguous().uop
        if src.op is Ops.RESHAPE:
            src = src.src[0]
        moved = UOp(Ops.COPY, self.dtype, (src,), (self.device, device))
        return self._wrap(moved, device).reshape(self.shape)

    def shard(self, devices: Sequence[str], axis: _int | None = None) -> Tensor:
        """This tensor on several devices: cut along ``axis`` into one piece per device (the
        longer pieces first), or whole on each when ``axis`` is None. Every op then runs on the
        pieces, each on its device (``engine/shard.py``); ``.to(device)`` and ``.numpy()``
        gather them.

        >>> t = Tensor([[1, 2], [3, 4], [5, 6]], device="CPU").shard(("CPU", "PYTHON"), axis=0)
        >>> (t * 2).sum(axis=1).tolist(), t.sum(axis=0).tolist()
        ([6, 14, 22], [9, 12])
        """
        if isinstance(devices, str) or not all(isinstance(d, str) for d in devices):
            raise InvalidType(f"shard() takes a sequence of device names, got {devices!r}")
        devices = tuple(Device.canonicalize(d) for d in devices)
        axis = None if axis is None else self._axis(axis)
        sharding.check_placement(self.shape, devices, axis)
        for device in devices:
            engine.open_device(device)
        return self._placed_on(devices, axis)

    def shard_(self, devices: Sequence[str], axis: _int | None = None) -> Tensor:
        """``shard`` in place (a model's parameters): this tensor's pieces now live on
        ``devices``, and its later values (an optimizer's updates) are placed the same way."""
        sharded = self.shard(devices, axis).realize()
        REALIZED.pop(sharded.uop, None)  # the pieces are the tensor now, no view of its old value
        self.uop, self.device, self._graph = sharded.uop, sharded.device, None
        return self

    def _placed_on(self, devices: tuple[str, ...], axis: _int | None) -> Tensor:
        """A SHARD node placing this value on ``devices`` along ``axis`` (one device: gathered)."""
        _SHARDED[0] = True
        node = UOp(Ops.SHARD, self.dtype, (self.uop,), (devices, axis))
        return self._wrap(node, devices if len(devices) > 1 else devices[0])  # type: ignore[arg-type]

    def cast(self, dtype: DType | str) -> Tensor:
        """Convert to ``dtype`` (floats to ints truncate, as in C and PyTorch)."""
        dtype = to_dtype(dtype)
        return self if dtype == self.uop.dtype else self._wrap(self.uop.cast(dtype), self.device)

    def bitcast(self, dtype: DType | str) -> Tensor:
        """Reinterpret the bits as ``dtype`` of the same size."""
        dtype = to_dtype(dtype)
        if dtype.itemsize != self.dtype.itemsize:
            raise FusegradError(f"bitcast from {self.dtype} to {dtype} changes the element size")
        return self._wrap(UOp(Ops.BITCAST, dtype, (self.uop,)), self.device)

    def float(self) -> Tensor:
        return self.cast(dtypes.float32)

    def half(self) -> Tensor:
        return self.cast(dtypes.float16)

    def int(self) -> Tensor:
        return self.cast(dtypes.int32)

    def long(self) -> Tensor:
        return self.cast(dtypes.int64)

    def bool(self) -> Tensor:
        return self.cast(dtypes.bool)

    def detach(self) -> Tensor:
        """The same values, cut off from gradient tracking."""
        return self._wrap(UOp(Ops.DETACH, self.dtype, (self.uop,)), self.device)

    # ---- creation --------------------------------------------------------------------------------

    @staticmethod
    def full(
        shape: _int | Sequence[_int],
        fill: Scalar,
        dtype: DType | str | None = None,
        device: str | None = None,
    ) -> Tensor:
        """A tensor of ``shape`` filled with ``fill`` (no memory until realized)."""
        shape = _shape_arg(shape)
        dtype = to_dtype(dtype) if dtype is not None else dtypes.from_py(fill)
        return Tensor(broadcast_scalar(fill, dtype, shape), device=device)

    @staticmethod
    def zeros(
        *shape: Any,
        dtype: DType | str | None = None,
        device: str | None = None,
        requires_grad: _bool | None = None,
    ) -> Tensor:
        t = Tensor.full(_shape_arg(shape), 0, to_dtype(dtype or dtypes.default_float), device)
        return t.requires_grad_(bool(requires_grad))

    @staticmethod
    def zeros_buffer(
        *shape: Any, dtype: DType | str | None = None, device: str | None = None
    ) -> Tensor:
        """A realized tensor of zeros, in memory the device hands out zeroed (``zeros`` is a
        constant until realized, then a kernel writes every element). On the CPU its pages
        take memory only once written: a buffer written a part at a time (a KV cache) costs
        what is written so far.

        >>> Tensor.zeros_buffer(2, 3).tolist()
        [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
        """
        return Tensor._allocated(_shape_arg(shape), dtype, device, zeroed=True)

    @staticmethod
    def ones(
        *shape: Any,
        dtype: DType | str | None = None,
        device: str | None = None,
        requires_grad: _bool | None = None,
    ) -> Tensor:
        t = Tensor.full(_shape_arg(shape), 1, to_dtype(dtype or dtypes.default_float), device)
        return t.requires_grad_(bool(requires_grad))

    @staticmethod
    def empty(
        *shape: Any,
        dtype: DType | str | None = None,
        device: str | None = None,
        requires_grad: _bool | None = None,
    ) -> Tensor:
        """Uninitialised memory of ``shape``."""
        t = Tensor._allocated(_shape_arg(shape), dtype, device)
        return t.requires_grad_(bool(requires_grad))

    @staticmethod
    def _allocated(
        shape: tuple, dtype: DType | str | None, device: str | None, zeroed: _bool = False
    ) -> Tensor:
        """A tensor over a new buffer of ``shape`` (``Buffer``'s ``zeroed``: see
        ``zeros_buffer``)."""
        dev = Device.canonicalize(device) if device else Device.DEFAULT
        buf = Buffer(dev, prod(shape), to_dtype(dtype or dtypes.default_float), zeroed=zeroed)
        return Tensor._wrap(buffer_uop(buf, shape), dev)

    @staticmethod
    def arange(
        start: _int | _float,
        stop: _int | _float | None = None,
        step: _int | _float = 1,
        dtype: DType | str | None = None,
        device: str | None = None,
    ) -> Tensor:
        """``start, start+step, ...`` up to but excluding ``stop``, as ``torch.arange``; whole
        numbers are int32, or int64 where int32 cannot hold them. Values that ``dtype`` cannot
        hold raise OverflowError (PyTorch wraps them around).

        >>> Tensor.arange(10, 4, -3).tolist()
        [10, 7]
        """
        start, stop, step = _py_number(start), _py_number(stop), _py_number(step)
        if stop is None:
            start, stop = 0, start
        if step == 0:
            raise InvalidArgument("arange step must not be zero; give a positive or negative step")
        if not all(math.isfinite(v) for v in (start, stop, step)):
            raise InvalidArgument(
                f"arange({start}, {stop}, {step}) needs finite numbers; no inf or nan"
            )
        if (stop - start) * step < 0:
            raise InvalidArgument(
                f"arange({start}, {stop}, {step}): the step goes away from stop; "
                "flip its sign, or swap start and stop"
            )
        count = max(0, math.ceil((stop - start) / step))
        ends: tuple[_int | _float, ...] = (start, start + (count - 1) * step) if count else ()
        default = dtypes.from_py([start, stop, step])
        if default.is_int and any(not dtypes.int32.min <= v <= dtypes.int32.max for v in ends):
            default = dtypes.int64
        dtype = to_dtype(dtype) if dtype is not None else default
        if dtype.is_int and any(not dtype.min <= v <= dtype.max for v in ends):
            raise OverflowError(
                f"arange({start}, {stop}, {step}) runs from {ends[0]} to "
                f"{ends[1]}, out of the range of {dtype.name}; use a wider dtype"
            )
        return Tensor(np.arange(start, stop, step).astype(dtype.np), device=device, dtype=dtype)

    @staticmethod
    def linspace(
        start: _int | _float,
        end: _int | _float,
        steps: _int,
        dtype: DType | str | None = None,
        device: str | None = None,
    ) -> Tensor:
        """``steps`` evenly spaced values from ``start`` to ``end``, both included, as
        ``torch.linspace``: the first half counted up from ``start``, the second down from
        ``end`` (so both ends are exact), in the dtype's precision (float64 for ints, which
        then truncate).

        >>> Tensor.linspace(0, 1, 5).tolist()
        [0.0, 0.25, 0.5, 0.75, 1.0]
        """
        dtype = to_dtype(dtype) if dtype is not None else dtypes.default_float
        if not isinstance(steps, ONE_INT):
            raise InvalidType(f"linspace steps must be an int, got {steps!r}; write int(steps)")
        if steps < 0 or dtype == dtypes.bool:
            raise InvalidArgument(
                f"linspace needs steps >= 0 (got {steps}) and a number dtype (got {dtype.name}), "
                "as in PyTorch"
            )
        compute: type[np.floating[Any]] = (
            np.float32 if dtype.is_float and dtype.itemsize <= 4 else np.float64
        )
        start_, end_ = compute(start), compute(end)
        step = (end_ - start_) / compute(max(steps - 1, 1))
        i = np.arange(steps)
        up = start_ + i.astype(compute) * step
        down = end_ - (steps - 1 - i).astype(compute) * step
        values = np.where((i < steps // 2) | (steps == 1), up, down)
        return Tensor(values.astype(dtype.np), device=device, dtype=dtype)

    @staticmethod
    def eye(
        n: _int, m: _int | None = None, dtype: DType | str | None = None, device: str | None = None
    ) -> Tensor:
        """The identity matrix (ones on the diagonal), ``n`` by ``m`` (default ``n``)."""
        m = n if m is None else m
        if n < 0 or m < 0:
            raise ShapeError(f"eye needs sizes >= 0, got n={n}, m={m}")
        rows = Tensor.arange(n, device=device).reshape(n, 1)
        return (rows == Tensor.arange(m, device=device)).cast(
            to_dtype(dtype or dtypes.default_float)
        )

    @staticmethod
    def manual_seed(seed: _int = 0) -> None:
        """Seed the random number generator (the same numbers on every device)."""
        Tensor._seed, Tensor._rng_counter = seed, 0

    @staticmethod
    def _generator() -> np.random.Generator:
        Tensor._rng_counter += 1
        return np.random.Generator(np.random.Philox(key=Tensor._seed, counter=Tensor._rng_counter))

    @staticmethod
    def rand(
        *shape: Any,
        dtype: DType | str | None = None,
        device: str | None = None,
        requires_grad: _bool | None = None,
    ) -> Tensor:
        """Uniform random numbers in [0, 1)."""
        dtype = to_dtype(dtype or dtypes.default_float)
        values = Tensor._generator().random(_shape_arg(shape), dtype=np.float32)
        return Tensor(values, device=device).cast(dtype).requires_grad_(bool(requires_grad))

    @staticmethod
    def randn(
        *shape: Any,
        dtype: DType | str | None = None,
        device: str | None = None,
        requires_grad: _bool | None = None,
    ) -> Tensor:
        """Normally distributed random numbers (mean 0, variance 1)."""
        dtype = to_dtype(dtype or dtypes.default_float)
        values = Tensor._generator().standard_normal(_shape_arg(shape), dtype=np.float32)
        return Tensor(values, device=device).cast(dtype).requires_grad_(bool(requires_grad))

    @staticmethod
    def uniform(
        *shape: Any,
        low: _float = 0.0,
        high: _float = 1.0,
        requires_grad: _bool | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """Uniform random numbers in [low, high) (the result, not a rand inside, is the leaf)."""
        out = Tensor.rand(*shape, **kwargs) * (high - low) + low
        return out.requires_grad_(bool(requires_grad))

    @staticmethod
    def normal(
        *shape: Any,
        mean: _float = 0.0,
        std: _float = 1.0,
        requires_grad: _bool | None = None,
        **kwargs: Any,
    ) -> Tensor:
        """Normally distributed random numbers of mean ``mean`` and deviation ``std``."""
        return (Tensor.randn(*shape, **kwargs) * std + mean).requires_grad_(bool(requires_grad))

    @staticmethod
    def scaled_uniform(*shape: Any, **kwargs: Any) -> Tensor:
        """Uniform in [-1, 1) scaled by 1 / sqrt(number of elements) (tinygrad's)."""
        shape = _shape_arg(shape)
        return Tensor.uniform(shape, low=-1.0, high=1.0, **kwargs) * prod(shape) ** -0.5

    @staticmethod
    def glorot_uniform(*shape: Any, **kwargs: Any) -> Tensor:
        """Xavier/Glorot uniform: bound sqrt(6 / (fan_in + fan_out)), fans of a (out, in, ...)
        weight as PyTorch's ``xavier_uniform_``."""
        fan_in, fan_out = _fans(shape := _shape_arg(shape))
        bound = math.sqrt(6 / max(fan_in + fan_out, 1))
        return Tensor.uniform(shape, low=-bound, high=bound, **kwargs)

    @staticmethod
    def kaiming_uniform(*shape: Any, a: _float = 0.01, **kwargs: Any) -> Tensor:
        """He/Kaiming uniform for leaky relu slope ``a``: bound sqrt(6 / ((1 + a^2) fan_in)), the
        fan-in of a (out, in, ...) weight, as PyTorch's ``kaiming_uniform_``."""
        fan_in, _ = _fans(shape := _shape_arg(shape))
        bound = math.sqrt(6 / ((1 + a * a) * max(fan_in, 1)))
        return Tensor.uniform(shape, low=-bound, high=bound, **kwargs)

    @staticmethod
    def kaiming_normal(*shape: Any, a: _float = 0.01, **kwargs: Any) -> Tensor:
        """He/Kaiming normal: deviation sqrt(2 / ((1 + a^2) fan_in)), as ``kaiming_normal_``."""
        fan_in, _ = _fans(shape := _shape_arg(shape))
        std = math.sqrt(2 / ((1 + a * a) * max(fan_in, 1)))
        return Tensor.normal(shape, std=std, **kwargs)

    @staticmethod
    def randint(
        *shape: Any,
        low: _int = 0,
        high: _int = 10,
        dtype: DType | str | None = None,
        device: str | None = None,
    ) -> Tensor:
        """Random integers in [low, high), int32 unless ``dtype`` says otherwise.

        >>> Tensor.manual_seed(0)
        >>> t = Tensor.randint(1000, low=-3, high=3)
        >>> (t.min().item(), t.max().item())
        (-3, 2)
        """
        if high <= low:
            raise FusegradError(f"randint needs low < high, got low={low}, high={high}")
        dtype = to_dtype(dtype or dtypes.int32)
        if not dtype.is_int:
            raise FusegradError(
                f"randint makes integers; got dtype={dtype.name} (cast the result instead)"
            )
        values = Tensor._generator().integers(low, high, _shape_arg(shape), dtype=np.int64)
        # cast on the host: a device without int64 (WebGPU on OpenGL) can hold the result
        return Tensor(values.astype(dtype.np), device=device, dtype=dtype)

    def full_like(self, fill: Scalar, dtype: DType | str | None = None) -> Tensor:
        return Tensor.full(self.shape, fill, dtype or self.dtype, self.device)

    def zeros_like(self, dtype: DType | str | None = None) -> Tensor:
        return self.full_like(0, dtype)

    def ones_like(self, dtype: DType | str | None = None) -> Tensor:
        return self.full_like(1, dtype)

    def rand_like(self, dtype: DType | str | None = None) -> Tensor:
        return Tensor.rand(self.shape, dtype=dtype or self.dtype, device=self.device)

    def randn_like(self, dtype: DType | str | None = None) -> Tensor:
        return Tensor.randn(self.shape, dtype=dtype or self.dtype, device=self.device)

    # ---- elementwise -----------------------------------------------------------------------------

    def _alu(self, op: Ops, *others: Tensor) -> Tensor:
        srcs = (self.uop, *(o.uop for o in others))
        dtype = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE) else self.dtype
        if op is Ops.WHERE:
            dtype = others[0].dtype
        return self._wrap(UOp(op, dtype, srcs), self.device)

    def _operands(self, other: Tensor | Scalar, reverse: _bool = False) -> tuple[Tensor, Tensor]:
        """Both operands of a binary op, promoted to one dtype and broadcast to one shape."""
        if not isinstance(other, Tensor):  # a Python scalar: a cached broadcast constant
            a = self.cast(scalar_type(other, self.dtype))
            b = self._wrap(broadcast_scalar(other, a.dtype, a.shape), self.device)
        elif other.device != self.device:
            raise FusegradError(
                f"tensors on {self.device} and {other.device} cannot be combined; "
                f"move one with .to({self.device!r})"
            )
        elif other.uop.dtype == self.uop.dtype:  # (nothing to promote)
            a, b = self, other
        else:
            dtype = promote_shaped(self.dtype, not self.shape, other.dtype, not other.shape)
            a, b = self.cast(dtype), other.cast(dtype)
        if (mine := a.uop.shape) != (theirs := b.uop.shape):
            shape = broadcast_shapes(mine, theirs)
            a, b = a._broadcast_checked(shape), b._broadcast_checked(shape)
        return (b, a) if reverse else (a, b)

    def _broadcast_checked(self, shape: tuple[_int, ...]) -> Tensor:
        """This tensor broadcast to ``shape``, which ``broadcast_shapes`` gave for it: the nodes
        ``expand`` makes (a reshape adding leading 1s, then the expand), without checking again
        what it checked. An optimizer's ``m * c`` with ``c`` of shape (1,) took 15 us so, 9 now
        (an AdamW step builds three per parameter). A symbolic shape goes through ``expand``."""
        u = self.uop
        old = u.shape
        if old == shape:
            return self
        if ops.VARIABLES_USED and (is_symbolic(shape) or is_symbolic(old)):
            return self._broadcast_to(shape)
        return self._wrap(_broadcast_node(u, shape), self.device)

    def _float_operand(self) -> Tensor:
        return self if self.dtype.is_float else self.cast(dtypes.default_float)

    def add(self, other: Tensor | Scalar, reverse: _bool = False) -> Tensor:
        """Elementwise sum, broadcasting."""
        a, b = self._operands(other, reverse)
        return a._alu(Ops.ADD, b)

    def mul(self, other: Tensor | Scalar, reverse: _bool = False) -> Tensor:
        """Elementwise product, broadcasting."""
        a, b = self._operands(other, reverse)
        return a._alu(Ops.MUL, b)

    def fma(self, other: Tensor | Scalar, addend: Tensor | Scalar) -> Tensor:
        """``self * other + addend``, rounded once where the device renders a fused multiply-add
        (``Ops.MULACC`` among its renderer's native ops: the CPU's C and OpenCL), else as a
        multiply then an add. For sums of products whose rounding is free to differ from
        separate ops (a quantized weight's ``scale * q + offset`` inside a dot product): one
        instruction instead of two. Integers: exactly ``self * other + addend``.

        >>> Tensor([1.0, 2.0]).fma(3.0, 0.5).tolist()
        [3.5, 6.5]
        """
        a, b = self._operands(other)
        if not a.dtype.is_float:
            return a * b + addend
        a, c = a._operands(addend)
        b = b.cast(a.dtype)._broadcast_to(a.shape)
        return a._alu(Ops.MULACC, b, c)

    def sub(self, other: Tensor | Scalar, reverse: _bool = False) -> Tensor:
        """Elementwise difference, broadcasting."""
        a, b = self._operands(other, reverse)
        return a._alu(Ops.ADD, b.neg())

    def div(
        self, other: Tensor | Scalar, reverse: _bool = False, rounding_mode: str | None = None
    ) -> Tensor:
        """True division; integer inputs give a float result, as in PyTorch. ``rounding_mode``
        "trunc" rounds the quotient towards zero and "floor" down (integers then stay integers).

        >>> Tensor([-7, 7]).div(2, rounding_mode="trunc").tolist()
        [-3, 3]
        """
        if rounding_mode == "floor":
            return self.floor_divide(other, reverse)
        if rounding_mode == "trunc":
            a, b = self._operands(other, reverse)
            return a._alu(Ops.IDIV, b) if a.dtype.is_int else (a / b).trunc()
        if rounding_mode is not None:
            raise UnknownOption(
                f"div rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}"
            )
        a, b = self._operands(other, reverse)
        a, b = a._float_operand(), b._float_operand()
        return a._alu(Ops.MUL, b._alu(Ops.RECIP))

    def neg(self) -> Tensor:
        """-x (logical not for bool)."""
        if self.dtype.is_unsigned:
            return self._alu(Ops.MUL, self.full_like(self.dtype.max))
        return self._alu(Ops.NEG)

    def maximum(self, other: Tensor | Scalar) -> Tensor:
        a, b = self._operands(other)
        return a._alu(Ops.MAX, b)

    def minimum(self, other: Tensor | Scalar) -> Tensor:
        """min(a, b) = -max(-a, -b) for floats, so that a tie splits the gradient as maximum's."""
        a, b = self._operands(other)
        if a.dtype.is_float:
            return -((-a)._alu(Ops.MAX, -b))
        return (a < b).where(a, b)

    def where(self, x: Tensor | Scalar, y: Tensor | Scalar) -> Tensor:
        """``x`` where this (bool) tensor is true, else ``y``."""
        cond = self.cast(dtypes.bool)
        if isinstance(x, Tensor):
            x, y = x._operands(y)
        elif isinstance(y, Tensor):
            y, x = y._operands(x)
        else:
            dtype = dtypes.from_py([x, y])
            x, y = Tensor.full((), x, dtype, self.device), Tensor.full((), y, dtype, self.device)
        shape = broadcast_shapes(cond.shape, x.shape, y.shape)
        c, x, y = (t._broadcast_checked(shape) for t in (cond, x, y))
        return c._alu(Ops.WHERE, x, y)

    def __lt__(self, other):
        a, b = self._operands(other)
        return a._alu(Ops.CMPLT, b)

    def __gt__(self, other):
        a, b = self._operands(other, reverse=True)
        return a._alu(Ops.CMPLT, b)

    def __ne__(self, other):  # type: ignore[override]
        a, b = self._operands(other)
        return a._alu(Ops.CMPNE, b)

    def __eq__(self, other):  # type: ignore[override]
        return (self != other).logical_not()

    def __ge__(self, other):
        """a >= b: not a < b, except that a nan is neither (so floats ask a > b or a == b)."""
        a, b = self._operands(other)
        return (b < a) | (a == b) if a.dtype.is_float else (a < b).logical_not()

    def __le__(self, other):
        """a <= b: not a > b, except that a nan is neither."""
        a, b = self._operands(other)
        return (a < b) | (a == b) if a.dtype.is_float else (b < a).logical_not()

    def logical_not(self) -> Tensor:
        return self.cast(dtypes.bool)._alu(
            Ops.CMPNE, Tensor.full(self.shape, True, dtypes.bool, self.device)
        )

    def __add__(self, x: Tensor | Scalar) -> Tensor:
        return self.add(x)

    def __mul__(self, x: Tensor | Scalar) -> Tensor:
        return self.mul(x)

    def __sub__(self, x: Tensor | Scalar) -> Tensor:
        return self.sub(x)

    def __truediv__(self, x: Tensor | Scalar) -> Tensor:
        return self.div(x)

    def __radd__(self, x):
        return self.add(x, True)

    def __rmul__(self, x):
        return self.mul(x, True)

    def __rsub__(self, x):
        return self.sub(x, True)

    def __rtruediv__(self, x):
        return self.div(x, True)

    def __neg__(self):
        return self.neg()

    def __matmul__(self, x):
        return self.matmul(x)

    def __rmatmul__(self, x):
        return x.matmul(self)

    # ---- unary math (built from EXP2, LOG2, SIN, SQRT, RECIP) ------------------------------------

    def exp2(self) -> Tensor:
        return self._float_operand()._alu(Ops.EXP2)

    def log2(self) -> Tensor:
        return self._float_operand()._alu(Ops.LOG2)

    def exp(self) -> Tensor:
        """e**x = 2**(x * log2(e))"""
        return (self._float_operand() * (1 / math.log(2))).exp2()

    def log(self) -> Tensor:
        """ln(x) = log2(x) * ln(2)"""
        return self.log2() * math.log(2)

    def sqrt(self) -> Tensor:
        return self._float_operand()._alu(Ops.SQRT)

    def rsqrt(self) -> Tensor:
        return self.sqrt().reciprocal()

    def sin(self) -> Tensor:
        return self._float_operand()._alu(Ops.SIN)

    def cos(self) -> Tensor:
        """cos(x) = 1 - 2 sin(x/2)**2, as accurate as the sine at any magnitude (the sine of
        pi/2 - x would round pi/2 - x first: 1e-5 off at x = 1000)."""
        half = (self._float_operand() * 0.5).sin()
        return 1 - 2 * half * half

    def tan(self) -> Tensor:
        return self.sin() / self.cos()

    def reciprocal(self) -> Tensor:
        return self._float_operand()._alu(Ops.RECIP)

    def relu(self) -> Tensor:
        """x where x > 0 or x is NaN, else 0 (so the gradient at 0 is 0, and NaN stays NaN, as in
        torch)."""
        keep = self > 0
        return (keep | (self != self) if self.dtype.is_float else keep).where(
            self, self.zeros_like()
        )

    def sigmoid(self) -> Tensor:
        """1 / (1 + e**-x), whose gradient is s * (1 - s) (``_sigmoid_gradient``).

        >>> Tensor([-1000.0, 0.0, 1000.0]).sigmoid().tolist()
        [0.0, 0.5, 1.0]
        """
        x = self._float_operand()
        s = (1 + (-x).exp()).reciprocal()
        return s._with_gradient(_sigmoid_gradient, (x,))

    def tanh(self) -> Tensor:
        """tanh(x) = 2 * sigmoid(2x) - 1"""
        return 2.0 * (2.0 * self._float_operand()).sigmoid() - 1.0

    def abs(self) -> Tensor:
        return self if self.dtype.is_unsigned or self.dtype == dtypes.bool else self.maximum(-self)

    def square(self) -> Tensor:
        return self * self

    # ---- reductions ------------------------------------------------------------------------------

    def _reduce(self, op: Ops, axis: _int | Sequence[_int] | None, keepdim: _bool) -> Tensor:
        axes = self._resolve_axes(axis)
        shape = self.shape
        if axes:
            out = self._wrap(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes)), self.device)
        else:
            out = self
        if keepdim:
            return out
        return out.reshape(tuple(s for i, s in enumerate(shape) if i not in axes))

    def _resolve_axes(self, axis: _int | Sequence[_int] | None) -> tuple[_int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        axes = (axis,) if isinstance(axis, ONE_INT) else tuple(axis)
        resolved = tuple(sorted(self._distinct_axes(axes)))
        return resolved if self.ndim else ()  # a 0-d tensor's axis 0 (or -1) has nothing to reduce

    def sum(
        self,
        axis: _int | Sequence[_int] | None = None,
        keepdim: _bool = False,
        dtype: DType | str | None = None,
    ) -> Tensor:
        """Sum over ``axis`` (all axes by default). Bools and integers narrower than 32 bits sum as
        int32 (PyTorch's int64 is missing on WebGPU), halves accumulate in float32."""
        acc = to_dtype(dtype) if dtype is not None else _sum_dtype(self.dtype)
        out = self.cast(_accumulate_dtype(acc))._reduce(Ops.ADD, axis, keepdim)
        return out.cast(acc)

    def max(self, axis: _int | Sequence[_int] | None = None, keepdim: _bool = False) -> Tensor:
        """The largest value over ``axis``; an axis of size 0 has none (``ShapeError``)."""
        self._require_elements("max", axis)
        return self._max(axis, keepdim)

    def min(self, axis: _int | Sequence[_int] | None = None, keepdim: _bool = False) -> Tensor:
        """The smallest value over ``axis``; an axis of size 0 has none (``ShapeError``)."""
        self._require_elements("min", axis)
        return self._min(axis, keepdim)

    def _max(self, axis: _int | Sequence[_int] | None, keepdim: _bool) -> Tensor:
        """``max`` that gives the dtype's smallest value over an empty axis, for methods whose
        result stays defined there (the softmax of an empty row, a scatter of no elements)."""
        return self._reduce(Ops.MAX, axis, keepdim)

    def _min(self, axis: _int | Sequence[_int] | None, keepdim: _bool) -> Tensor:
        """``min``, the dtype's largest value over an empty axis: -max(-x), or ~max(~x) for ints."""
        if self.dtype.is_int:
            flipped = self._alu(
                Ops.XOR, self.full_like(-1 if not self.dtype.is_unsigned else self.dtype.max)
            )
            back = flipped._max(axis, keepdim)
            return back._alu(
                Ops.XOR, back.full_like(-1 if not self.dtype.is_unsigned else self.dtype.max)
            )
        if self.dtype == dtypes.bool:
            return self.logical_not()._max(axis, keepdim).logical_not()
        return -((-self)._max(axis, keepdim))

    def _require_elements(self, name: str, axis: _int | Sequence[_int] | None) -> None:
        """Refuse a reduction that has no identity (max, min, argmax) over an axis of size 0,
        as PyTorch does: the result would be a made-up value."""
        empty = [a for a in self._resolve_axes(axis) if self.shape[a] == 0]
        if not empty:
            return
        where = "all axes" if axis is None else f"axis {empty[0]}"
        raise ShapeError(
            f"{name}() over {where} of shape {self.shape} has no elements to reduce: {name} of "
            "nothing is undefined (PyTorch refuses it too); reduce over a non-empty axis, or "
            "check the size first"
        )

    def mean(
        self,
        axis: _int | Sequence[_int] | None = None,
        keepdim: _bool = False,
        dtype: DType | str | None = None,
    ) -> Tensor:
        """The average over ``axis``, in ``dtype`` (a float type) if given: the input is cast to
        it first, as PyTorch's. Integers average to the default float (PyTorch refuses them).

        >>> Tensor([1, 2]).mean(dtype="float64").dtype.name
        'float64'
        """
        if dtype is not None and not (dtype := to_dtype(dtype)).is_float:
            raise InvalidArgument(
                f"mean(dtype={dtype.name}): the mean is a float; pass a float "
                "dtype, or cast the result (PyTorch refuses it too)"
            )
        x = self._float_operand() if dtype is None else self.cast(dtype)
        count = prod(self.shape[a] for a in self._resolve_axes(axis))
        total = x.sum(axis, keepdim)
        if isinstance(count, UOp):  # a symbolic count: divide by the variable's value in the kernel
            return total / total._wrap(UOp(Ops.CAST, total.dtype, (count,)), self.device)
        return total * (1 / count if count else math.nan)

    # ---- linear algebra --------------------------------------------------------------------------

    def matmul(self, other: Tensor) -> Tensor:
        """Matrix product with PyTorch's rules for 1-d and batched inputs; a multiply and a sum."""
        x, w = self, other
        xs, ws = x.uop.shape, w.uop.shape  # (read once: an eager attention step is Python-bound)
        if not xs or not ws:
            raise ShapeError(
                f"matmul needs at least 1-d inputs, got shapes {xs} and {ws}; "
                "multiply by a 0-d tensor with *"
            )
        if xs[-1] != ws[-2 if len(ws) > 1 else 0]:
            inner = (xs[-1], ws[-2 if len(ws) > 1 else 0])
            raise ShapeError(
                f"cannot multiply shapes {xs} and {ws}: inner sizes differ "
                f"({inner[0]} vs {inner[1]}); the last axis of the first must match the "
                "second-last of the second (transpose one with .T?)"
            )
        dtype = promote_types(x.dtype, w.dtype)
        if _accumulate_dtype(dtype) != dtype:  # half floats: exact products summed in float32 (the
            # gradient's too), rounded once at the end, as PyTorch's CPU matmul
            return x.cast(dtypes.float32).matmul(w.cast(dtypes.float32)).cast(dtype)
        if len(xs) == 1:
            out = x.unsqueeze(0).matmul(w)
            return out.squeeze(-2) if len(ws) > 1 else out.squeeze(-1)
        if len(ws) == 1:
            return x.matmul(w.unsqueeze(-1)).squeeze(-1)
        if (fast := _plain_matmul(x, w)) is not None:
            return fast
        xe = x.unsqueeze(-2)  # (..., n, 1, k)
        we = w.transpose(-1, -2).unsqueeze(-3)  # (..., 1, m, k): schedule/layout.py finds this
        # in the operands' dtype, as PyTorch (a bool product counts its true terms, as int64)
        return (xe * we).sum(-1, dtype=dtype if dtype != dtypes.bool else None)

    def dot(self, other: Tensor) -> Tensor:
        return self.matmul(other)


def _plain_matmul(x: Tensor, w: Tensor) -> Tensor | None:
    """``x @ w`` built node by node, the same nodes as ``matmul``'s general path makes through
    unsqueeze, transpose, broadcast, multiply and sum, without re-checking each step: the
    common case (one dtype, one device, plain int sizes) costs an eager attention step a
    fifth of the Python time. None where any of that does not hold."""
    xu, wu = x.uop, w.uop
    dtype = xu.dtype
    if wu.dtype != dtype or dtype == dtypes.bool or x.device != w.device:
        return None
    xs, ws = xu.shape, wu.shape
    if ops.VARIABLES_USED and (is_symbolic(xs) or is_symbolic(ws)):
        return None
    batch = broadcast_shapes(xs[:-2], ws[:-2])
    n, k, m = xs[-2], xs[-1], ws[-1]
    if k == 1 or m == 1:  # the transpose of w is a reshape there (Tensor._permuted)
        return None
    full = batch + (n, m, k)
    order = tuple(range(len(ws) - 2)) + (len(ws) - 1, len(ws) - 2)
    xe = _broadcast_node(UOp(Ops.RESHAPE, dtype, (xu,), xs[:-1] + (1, k)), full)
    we = UOp(Ops.PERMUTE, dtype, (wu,), order)
    we = _broadcast_node(UOp(Ops.RESHAPE, dtype, (we,), ws[:-2] + (1, m, k)), full)
    axis = len(full) - 1
    summed = UOp(Ops.REDUCE_AXIS, dtype, (UOp(Ops.MUL, dtype, (xe, we)),), (Ops.ADD, (axis,)))
    return x._wrap(UOp(Ops.RESHAPE, dtype, (summed,), full[:-1]), x.device)


def _broadcast_node(u: UOp, shape: tuple[int, ...]) -> UOp:
    """``u`` expanded to ``shape`` as ``Tensor.expand`` does it: leading 1s by a reshape first,
    and no expand where those were all it needed."""
    if u.shape == shape:
        return u
    if len(u.shape) < len(shape):
        u = UOp(Ops.RESHAPE, u.dtype, (u,), (1,) * (len(shape) - len(u.shape)) + u.shape)
        if u.shape == shape:
            return u
    return UOp(Ops.EXPAND, u.dtype, (u,), shape)


def _sigmoid_gradient(grad: Tensor, x: Tensor) -> tuple[Tensor]:
    """d sigmoid(x) = s * (1 - s), finite for every x. Through its building blocks it would be
    0 * e**-x = 0 * inf = nan for x below about -88, where e**-x overflows and s is 0."""
    s = (1 + (-x).exp()).reciprocal()  # the same nodes as the value's
    return (grad * s * (1 - s),)


def _sum_dtype(dtype: DType) -> DType:
    """What a sum of ``dtype`` is: bools and integers narrower than 32 bits add up as int32, signed
    (so ``-uint8.sum()`` is negative). PyTorch's is int64 for every integer; WebGPU in browsers and
    on OpenGL has no 64-bit integers, so a count there could not be computed at all."""
    return dtypes.int32 if dtype == dtypes.bool or (dtype.is_int and dtype.itemsize < 4) else dtype


def _accumulate_dtype(dtype: DType) -> DType:
    return dtypes.float32 if dtype in (dtypes.float16, dtypes.bfloat16) else dtype


def _device_arg(device: Any) -> str:
    """``device``'s canonical name (``"cpu:0"`` -> ``"CPU"``), or a tuple of them for several
    devices (a sharded tensor's); PyTorch users pass ``0`` or a ``torch.device`` too."""
    if isinstance(device, (tuple, list)) and device and all(isinstance(d, str) for d in device):
        names = tuple(Device.canonicalize(d) for d in device)
        return names if len(names) > 1 else names[0]  # type: ignore[return-value]
    if not isinstance(device, str):
        raise InvalidType(
            f"device must be a string such as 'CPU' or 'CUDA:0', got {type(device).__name__} "
            f"{device!r}; pass its name, e.g. device='CUDA:0' for a GPU index 0"
        )
    return Device.canonicalize(device)


#: whether any tensor was ever placed on several devices: until then ``realize`` need not look
#: for SHARD and MULTI nodes (the hot path of one device pays nothing for sharding)
_SHARDED = [False]


def _is_placed(t: Tensor) -> bool:
    """Whether ``t`` is on several devices or its graph moves values between placements."""
    return isinstance(t.device, tuple) or sharding.uses_devices(t.uop)


def _realize_placed(todo: list[Tensor]) -> None:
    """Realize tensors whose graphs hold several devices (``engine/shard.py``)."""
    wanted: list[tuple[str, ...]] = [
        t.device if isinstance(t.device, tuple) else (t.device,) for t in todo
    ]
    for t, node in zip(todo, sharding.realize([t.uop for t in todo], wanted)):
        keep_graph = bool(_GRAD_TENSORS) and t.requires_grad is not True
        if keep_graph and t._graph is None:
            t._graph = t.uop
        t.uop = node
        if keep_graph:
            REALIZED[t.uop] = t._graph


def _py_number(v: Any) -> Any:
    """A numpy scalar as the Python number it holds (PyTorch takes them); anything else as is."""
    return v.item() if isinstance(v, np.generic) else v


def _shape_arg(shape: Any) -> tuple[int, ...]:
    """A creation op's shape: an int, ints, or one sequence of them; negative sizes refused."""
    if isinstance(shape, (int, float, np.number)):
        shape = (shape,)
    if len(shape) == 1 and not isinstance(shape[0], (int, float, UOp, np.number)):
        shape = shape[0]
    out = no_float_sizes(tuple(shape))
    if any(not isinstance(s, int) or s < 0 for s in out) and any(
        not isinstance(s, (int, UOp)) or sym_eval(s) < 0 for s in out
    ):  # (bound Variables pass)
        raise ShapeError(
            f"a shape is a sequence of non-negative ints or bound Variables, got {out}"
        )
    return out


def _fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan_in, fan_out) of a weight shaped (out, in, *kernel), as ``torch.nn.init`` counts them
    (a shape of fewer than 2 axes: its number of elements, for both)."""
    if len(shape) < 2:
        return prod(shape), prod(shape)
    receptive = prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def _is_buffer(u: UOp) -> bool:
    return buffer_of(u) is not None


def _is_multi_view(u: UOp) -> bool:
    """Whether ``u`` is a realized sharded tensor: pieces that are views of buffers."""
    return u.op is Ops.MULTI and all(_is_view(s) for s in u.src)


def _realize_plain(todo: list[Tensor], ready: engine.Ready | None = None) -> None:
    """Realize ``todo`` (tensors on one device each, none a view) in one plan; ``ready``: as
    ``engine.realize_uops``'s, with indexes into ``todo``."""
    roots, devices = [_unreshaped(t.uop) for t in todo], [t.device for t in todo]
    buffers = engine.realize_uops(roots, devices, ready)
    for t, buf in zip(todo, buffers):
        # a tensor that requires grad is a target of backward(), never expanded: keeping its
        # graph (a weight update's, built on the last step's buffers) would keep every step's
        # graph alive
        keep_graph = bool(_GRAD_TENSORS) and t.requires_grad is not True
        if keep_graph and t._graph is None:
            t._graph = t.uop  # backward() differentiates the graph, not the buffer
        t.uop = buffer_uop(buf, t.shape)
        if keep_graph:
            REALIZED[t.uop] = t._graph  # graphs built on t later still reach its inputs


def realize_as_ready(tensors: Sequence[Tensor], ready: Callable[[int, Buffer], None]) -> None:
    """Realize ``tensors`` in one plan, calling ``ready(i, buffer)`` for each as soon as the
    kernel that completes ``tensors[i]`` has run, before the kernels after it: so that work on
    a result (sending a gradient to the other processes) overlaps computing the rest.

    ``buffer`` holds the tensor's values in order (its first ``numel`` elements). Each tensor is
    on one device (not sharded over several: realize those first); one already in a buffer of
    its own is ready at once; another view of a buffer is copied out in order first.
    """
    todo: list[Tensor] = []
    index: list[int] = []  # todo's position in ``tensors``
    for i, t in enumerate(tensors):
        if _SHARDED[0] and (_is_placed(t) or _is_multi_view(t.uop)):
            raise InvalidArgument(
                "realize_as_ready takes tensors of one device each; this one is sharded over "
                f"several ({t.device}): realize it first, or move it with .to(device)"
            )
        if (buf := buffer_of(t.uop)) is not None:
            ready(i, buf)
            continue
        todo.append(t if not _is_view(t.uop) else t.contiguous())
        index.append(i)

    def computed(done: list[int], bufs: list[Buffer]) -> None:
        for j, buf in zip(done, bufs):
            ready(index[j], buf)

    if todo:
        _realize_plain(todo, computed)


def _is_view(u: UOp) -> bool:
    while u.op in (Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.SHRINK, Ops.FLIP):
        u = u.src[0]
    return u.op is Ops.BUFFER
