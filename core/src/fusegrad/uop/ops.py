"""The one IR node, ``UOp``, and the ``Ops`` it may carry (defined in ``uop/opcodes.py``).

Every stage of the pipeline is a graph of UOps; the stages differ only in which ops appear:

- tensor graph: BUFFER, CONST, movement ops, ALU ops, REDUCE_AXIS, CAST, CONTIGUOUS, COPY
- kernel graph: PARAM, RANGE, SPECIAL, INDEX, LOAD, STORE, REDUCE, ALU ops, SINK
- linear program: the backend contract ops of ``BACKEND_OPS`` in program order

UOps are immutable and hash-consed: building the same ``(op, dtype, src, arg)`` twice returns the
same object, so graphs compare by identity and ``dict`` lookups on them are cheap.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from fusegrad import caches
from fusegrad.dtype import DType, cast_scalar, dtypes
from fusegrad.errors import InvalidValue
from fusegrad.helpers import prod
from fusegrad.uop.alu import exec_alu
from fusegrad.uop.opcodes import BACKEND_OPS, GroupOp, Ops  # noqa: F401 (re-exported)


def _const_key(arg: Any) -> Any:
    # 0.0 == -0.0 and 1 == 1.0 == True hash alike; constants must stay apart by value and type
    return (type(arg), arg.hex() if isinstance(arg, float) else arg)


class _Entry(weakref.ref):
    """A weak reference to a UOp that remembers its key in ``_NODES``."""

    __slots__ = ("key",)
    key: tuple


#: (op, dtype, src, arg) -> the live UOp with those fields. A plain dict of weak references
#: rather than a WeakValueDictionary, whose lookups run in Python: building the graph of an
#: MNIST training step creates about 2,500 nodes, and the lookups were a fifth of that time.
_NODES: dict[tuple, _Entry] = {}


def _forget(entry: _Entry, nodes: dict[tuple, _Entry] = _NODES) -> None:
    """Called when a UOp dies: drop its entry, unless the key already names a newer node. The
    table is bound here, not looked up: at exit Python empties this module's names before
    another module's cache of nodes lets them die (an AttributeError in each node's callback)."""
    if nodes.get(entry.key) is entry:
        del nodes[entry.key]


#: the entry (a weak reference) of the live node whose key is ``(op, dtype, src, arg)``, or None:
#: a lookup without the class call, for loops that rebuild many nodes most of which exist already
#: (``schedule.kernelize.abstract``). A constant's key holds its arg through ``_const_key``.
live_entry = _NODES.get


class UOp:
    """An immutable, hash-consed IR node: ``UOp(op, dtype, src, arg)``."""

    __slots__ = ("op", "dtype", "src", "arg", "_shape", "_bounds", "__weakref__")

    op: Ops
    dtype: DType
    src: tuple[UOp, ...]
    arg: Any
    _shape: tuple[int, ...] | None  # symbolic sizes are UOps, typed as ints like ``shape``
    _bounds: tuple[int | float, int | float] | None

    def __new__(
        cls, op: Ops, dtype: DType = dtypes.void, src: tuple[UOp, ...] = (), arg: Any = None
    ):
        key = (op, dtype, src, _const_key(arg) if op is Ops.CONST else arg)
        if (entry := _NODES.get(key)) is not None and (hit := entry()) is not None:
            return hit
        self = object.__new__(cls)
        _SET_OP(self, op)
        _SET_DTYPE(self, dtype)
        _SET_SRC(self, src)
        _SET_ARG(self, arg)
        _SET_SHAPE(self, None)
        _SET_BOUNDS(self, None)
        entry = _Entry(self, _forget)
        entry.key = key
        _NODES[key] = entry
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("UOp is immutable; build a new one")

    def __reduce__(self):
        return (UOp, (self.op, self.dtype, self.src, self.arg))

    def __repr__(self) -> str:
        if self.op is Ops.BIND:  # sizes in shapes and messages: ``seq=5``, ``seq[1..16]``
            return f"{self.src[0].arg[0]}={self.src[1].arg}"
        if self.op is Ops.DEFINE_VAR:
            return f"{self.arg[0]}[{self.arg[1]}..{self.arg[2]}]"
        return pretty(self)

    def replace(self, **kw: Any) -> UOp:
        """A copy with some of ``op``, ``dtype``, ``src``, ``arg`` changed."""
        return UOp(
            kw.get("op", self.op),
            kw.get("dtype", self.dtype),
            kw.get("src", self.src),
            kw.get("arg", self.arg),
        )

    # ---- constructors --------------------------------------------------------------------------

    @staticmethod
    def const(dtype: DType, value: Any) -> UOp:
        """A scalar constant."""
        return UOp(Ops.CONST, dtype, (), cast_scalar(value, dtype))

    def alu(self, op: Ops, *src: UOp) -> UOp:
        """Apply an ALU op; comparisons give bool, everything else keeps ``self.dtype``."""
        dtype = (
            dtypes.bool
            if op in GroupOp.Comparison
            else (src[-1].dtype if op is Ops.WHERE else self.dtype)
        )
        return UOp(op, dtype, (self, *src))

    def _operand(self, x: UOp | int | float | bool) -> UOp:
        return x if isinstance(x, UOp) else UOp.const(self.dtype, x)

    def _keeps(self, x, unit: int) -> bool:
        """Whether an index combined with the Python int ``x`` is itself (``+ 0``, ``* 1``,
        ``// 1``): symbolic sizes (``prod`` of a shape holding a variable) stay small."""
        return type(x) is int and x == unit and self.dtype is dtypes.index

    def __add__(self, x):
        return self if self._keeps(x, 0) else self.alu(Ops.ADD, self._operand(x))

    def __radd__(self, x):
        return self if self._keeps(x, 0) else self._operand(x).alu(Ops.ADD, self)

    def __mul__(self, x):
        return self if self._keeps(x, 1) else self.alu(Ops.MUL, self._operand(x))

    def __rmul__(self, x):
        return self if self._keeps(x, 1) else self._operand(x).alu(Ops.MUL, self)

    def __sub__(self, x):
        return self.alu(Ops.ADD, self._operand(x).alu(Ops.NEG))

    def __rsub__(self, x):
        return self._operand(x) - self

    def __neg__(self):
        return self.alu(Ops.NEG)

    def __floordiv__(self, x):
        return self if self._keeps(x, 1) else self.alu(Ops.IDIV, self._operand(x))

    def __mod__(self, x):
        return self.alu(Ops.MOD, self._operand(x))

    def __and__(self, x):
        return self.alu(Ops.AND, self._operand(x))

    def __or__(self, x):
        return self.alu(Ops.OR, self._operand(x))

    def lt(self, x) -> UOp:
        """``self < x`` as a bool UOp (``<`` itself stays Python's, for sorting)."""
        return self.alu(Ops.CMPLT, self._operand(x))

    def ne(self, x) -> UOp:
        return self.alu(Ops.CMPNE, self._operand(x))

    def where(self, a: UOp, b: UOp) -> UOp:
        return UOp(Ops.WHERE, a.dtype, (self, a, b))

    def cast(self, dtype: DType) -> UOp:
        return self if dtype == self.dtype else UOp(Ops.CAST, dtype, (self,))

    def bind(self, value: int) -> UOp:
        """This variable with ``value`` for one call: what a symbolic shape holds."""
        if self.op is not Ops.DEFINE_VAR:
            raise TypeError(f"only a Variable can be bound, not {self.op}")
        name, lo, hi = self.arg
        if not isinstance(value, int) or not lo <= value <= hi:
            raise InvalidValue(
                f"Variable {name!r} takes an int in [{lo}, {hi}], got {value!r}; bind a value "
                "within its bounds, or make the Variable with wider ones"
            )
        return UOp(Ops.BIND, dtypes.index, (self, UOp.const(dtypes.index, value)))

    # ---- graph walks ---------------------------------------------------------------------------

    def toposort(self) -> list[UOp]:
        """Every node reachable from here, sources before users (iterative: graphs get deep)."""
        return toposort([self])

    # ---- tensor-graph shapes -------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of a tensor-graph node (computed once)."""
        shape = self._shape
        if shape is None:
            _SET_SHAPE(self, shape := _shape_of(self))
        return shape

    @property
    def size(self) -> int:
        return prod(self.shape)

    # ---- value bounds, for index simplification -------------------------------------------------

    @property
    def vmin(self) -> int | float:
        return self.bounds[0]

    @property
    def vmax(self) -> int | float:
        return self.bounds[1]

    @property
    def bounds(self) -> tuple[int | float, int | float]:
        """Smallest and largest value this integer expression can take."""
        bounds = self._bounds
        if bounds is None:
            _SET_BOUNDS(self, bounds := _wrapped(self.dtype, _bounds_of(self)))
        return bounds


#: the slots' own setters, which bypass the immutable ``__setattr__`` (twice as fast as
#: ``object.__setattr__``, which looks each name up; a training step builds thousands of nodes)
_SET_OP, _SET_DTYPE, _SET_SRC, _SET_ARG, _SET_SHAPE, _SET_BOUNDS = (
    UOp.__dict__[name].__set__ for name in ("op", "dtype", "src", "arg", "_shape", "_bounds")
)


#: (dtype, shape, constant) -> the constant as a node broadcast to ``shape``. The constants of a
#: training step (Adam's betas, a mean's 1/N, a derivative's 2 or ln 2) come back every step
#: with the same shapes; a lookup here replaces building their nodes again. Cleared when large.
_SCALARS: dict[tuple, UOp] = {}
caches.register("broadcast scalars", _SCALARS.clear)
_SCALARS_LIMIT = 4096


def broadcast_scalar(value: bool | int | float, dtype: DType, shape: tuple[int, ...]) -> UOp:
    """The constant ``value`` of ``dtype`` seen with ``shape``: a reshape to size-1 axes and,
    unless all are 1, an expand (what ``Tensor.full`` and a Python scalar operand are)."""
    key = (dtype, shape, _const_key(value))
    if (node := _SCALARS.get(key)) is None:
        node = UOp.const(dtype, value)
        if shape:
            node = UOp(Ops.RESHAPE, dtype, (node,), (1,) * len(shape))
            if any(s != 1 for s in shape):
                node = UOp(Ops.EXPAND, dtype, (node,), shape)
        if len(_SCALARS) >= _SCALARS_LIMIT:
            _SCALARS.clear()
        _SCALARS[key] = node
    return node


def toposort(roots: list[UOp]) -> list[UOp]:
    """Nodes reachable from ``roots``, each after all of its sources (sources in order, depth
    first). Iterative, since graphs get deep: the stack holds each open node with an iterator
    over its sources, so a node is entered once and no work list is built (2.4x faster than
    pushing every source)."""
    order: list[UOp] = []
    seen: set[UOp] = set()
    for root in roots:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(root.src))]
        while stack:
            node, sources = stack[-1]
            for s in sources:
                if s not in seen:
                    seen.add(s)
                    stack.append((s, iter(s.src)))
                    break
            else:
                stack.pop()
                order.append(node)
    return order


def substitute(root: UOp, new: dict[UOp, UOp]) -> UOp:
    """``root`` with each node of ``new`` replaced by its value there (the nodes above rebuilt)."""
    done: dict[UOp, UOp] = {}
    for u in toposort([root]):
        if u in new:
            done[u] = new[u]
        else:
            src = tuple(done[s] for s in u.src)
            done[u] = u if src == u.src else u.replace(src=src)
    return done[root]


# ---- symbolic sizes ------------------------------------------------------------------------------

#: a size: an int, or an index expression of variables (``seq * 64``)
sint = int | UOp


def Variable(name: str, lo: int, hi: int) -> UOp:  # noqa: N802 (it names a kind of value, as a class would)
    """An integer that may change between calls, from ``lo`` to ``hi``: a size such as a
    sequence length. Bind it to a value and use it in a shape, ``x.reshape(seq.bind(5), 64)``:
    kernels take its value as an argument, so a new value compiles nothing."""
    if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi):
        raise InvalidValue(
            f"Variable {name!r} needs int bounds 0 <= lo <= hi, got {lo!r} and {hi!r}"
        )
    if not name.isidentifier():
        raise ValueError(
            f"Variable name {name!r} must be an identifier (it names a kernel argument)"
        )
    global VARIABLES_USED
    VARIABLES_USED = True
    return UOp(Ops.DEFINE_VAR, dtypes.index, (), (name, lo, hi))


#: set once a Variable exists: until then the scheduler skips looking for them
VARIABLES_USED = False


def sym_eval(x: sint, values: dict[UOp, int] | None = None) -> int:
    """The value of a size: bound variables give theirs, free ones theirs in ``values``."""
    if isinstance(x, int):
        return x
    if x.op is Ops.CONST:
        return x.arg
    if x.op is Ops.BIND:
        return x.src[1].arg
    if x.op is Ops.DEFINE_VAR:
        if values is None or x not in values:
            raise InvalidValue(f"Variable {x.arg[0]!r} has no value here; bind it: var.bind(n)")
        return values[x]
    return int(exec_alu(x.op, x.dtype, tuple(sym_eval(s, values) for s in x.src)))


def sym_max(x: sint) -> int:
    """The largest value a size can take (for bounds and for memory that must fit every value)."""
    return x if isinstance(x, int) else int(x.vmax)


def _map_binds(x: sint, bound: Callable[[UOp], UOp]) -> sint:
    """``x`` with each BIND in it replaced by ``bound(that BIND)``."""
    if isinstance(x, int) or x.op is Ops.CONST:
        return x
    if x.op is Ops.BIND:
        return bound(x)
    new_src = tuple(_map_binds(s, bound) for s in x.src)
    return x if new_src == x.src else x.replace(src=new_src)


def unbind(x: sint, values: dict[UOp, int]) -> sint:
    """``x`` with each bound variable replaced by the free one; the values go into ``values``."""

    def free(b: UOp) -> UOp:
        var, value = b.src[0], b.src[1].arg
        if values.setdefault(var, value) != value:
            raise ValueError(
                f"Variable {var.arg[0]!r} is bound to {values[var]} and {value} in one graph"
            )
        return var

    return _map_binds(x, free)


def rebind(x: sint, values: dict[UOp, int]) -> sint:
    """``x`` with each bound variable bound to its value in ``values`` instead."""
    return _map_binds(x, lambda b: b.src[0].bind(values[b.src[0]]))


def variables_of(nodes: Iterable[UOp]) -> tuple[UOp, ...]:
    """The variables among ``nodes``, in the order a kernel takes their values: by name."""
    return tuple(sorted((u for u in nodes if u.op is Ops.DEFINE_VAR), key=lambda v: v.arg[0]))


def graph_variables(roots: list[UOp]) -> tuple[UOp, ...]:
    """The variables a tensor graph (or kernel AST) depends on: in sizes of movement ops and
    in values (a mean divides by a symbolic count)."""
    nodes = toposort(roots)
    sizes = [
        x
        for u in nodes
        if u.op in GroupOp.Movement and is_symbolic(u.arg)
        for a in u.arg
        for x in (a if type(a) is tuple else (a,))
        if type(x) is UOp
    ]
    return variables_of({*nodes, *toposort(sizes)})


def is_symbolic(shape: tuple) -> bool:
    """Whether a shape (or a movement op's argument) holds a variable."""
    return any(type(s) is UOp or (type(s) is tuple and is_symbolic(s)) for s in shape)


def _shape_of(u: UOp) -> tuple[int, ...]:
    op, arg = u.op, u.arg
    if op in GroupOp.ALU:  # (most nodes of a graph: asked first)
        return u.src[0].shape
    if op is Ops.BUFFER:
        return (arg.size,)
    if op is Ops.PARAM:
        return (arg[1],)
    if op in (Ops.CONST, Ops.DEFINE_VAR, Ops.BIND):
        return ()
    if op in (Ops.RESHAPE, Ops.EXPAND):
        return arg
    if op is Ops.GATHER:
        return u.src[1].shape
    if op is Ops.MULTI and arg[1] is not None:  # pieces laid end to end along the axis
        axis, first = arg[1], u.src[0].shape
        return (*first[:axis], sum(p.shape[axis] for p in u.src), *first[axis + 1 :])
    src = u.src[0].shape
    if op is Ops.PERMUTE:
        return tuple(src[i] for i in arg)
    if op is Ops.PAD:
        return tuple(s + b + a for s, (b, a) in zip(src, arg))
    if op is Ops.SHRINK:  # (a shrink from 0 keeps its end as the size: `n`, not `n - 0`)
        return tuple(e if type(b) is int and b == 0 else e - b for b, e in arg)
    if op is Ops.REDUCE_AXIS:
        return tuple(1 if i in arg[1] else s for i, s in enumerate(src))
    if op is Ops.STORE:
        return ()
    return src  # elementwise ops, FLIP, CAST, CONTIGUOUS, COPY, DETACH, SHARD, MULTI of copies


def wraps(dtype: DType) -> bool:
    """Whether arithmetic in ``dtype`` wraps around in every backend: unsigned and narrow integers.
    (32- and 64-bit signed arithmetic is index math, where C, like us, assumes no overflow.)"""
    return dtype.is_int and (dtype.is_unsigned or dtype.itemsize < 4)


def _wrapped(
    dtype: DType, bounds: tuple[int | float, int | float]
) -> tuple[int | float, int | float]:
    """``bounds`` of the exact result, as the bounds of the value ``dtype`` holds: a result that may
    wrap around can be anything."""
    if wraps(dtype) and (bounds[0] < dtype.min or bounds[1] > dtype.max):
        return (dtype.min, dtype.max)
    return bounds


def _bounds_of(u: UOp) -> tuple[int | float, int | float]:
    op = u.op
    if op is Ops.CONST:
        return (u.arg, u.arg)
    if op is Ops.DEFINE_VAR:
        return (u.arg[1], u.arg[2])
    if op is Ops.BIND:
        return u.src[1].bounds
    if op is Ops.RANGE:
        return (0, u.src[0].vmax - 1)
    if op is Ops.SPECIAL:
        return (0, u.arg[1] - 1)
    if op is Ops.ADD:
        (a0, a1), (b0, b1) = u.src[0].bounds, u.src[1].bounds
        return (a0 + b0, a1 + b1)
    if op is Ops.NEG:
        a0, a1 = u.src[0].bounds
        return (-a1, -a0)
    if op is Ops.MUL:
        (a0, a1), (b0, b1) = u.src[0].bounds, u.src[1].bounds
        corners = [
            x * y for x in (a0, a1) for y in (b0, b1) if not (math.isinf(x) or math.isinf(y))
        ]
        if len(corners) < 4:
            return (u.dtype.min, u.dtype.max)
        return (min(corners), max(corners))
    if op is Ops.IDIV:
        (a0, a1), (b0, b1) = u.src[0].bounds, u.src[1].bounds
        if b0 == b1 and b0 > 0 and a0 >= 0:
            return (a0 // b0, a1 // b0)
    if op is Ops.MOD:
        (a0, a1), (b0, b1) = u.src[0].bounds, u.src[1].bounds
        if b0 == b1 and b0 > 0 and a0 >= 0:
            return (0, min(a1, b0 - 1))
    if op is Ops.MAX:
        (a0, a1), (b0, b1) = u.src[0].bounds, u.src[1].bounds
        return (max(a0, b0), max(a1, b1))
    if op is Ops.SHR:  # a packed narrow element's word: i >> 2
        (a0, a1), (b0, b1) = u.src[0].bounds, u.src[1].bounds
        if a0 >= 0 and b0 == b1 and b0 >= 0:
            return (int(a0) >> int(b0), int(a1) >> int(b0))
    if op is Ops.AND and u.dtype != dtypes.bool:  # x & m keeps only m's bits: [0, m] for m >= 0
        (a0, a1), (b0, b1) = u.src[0].bounds, u.src[1].bounds
        if a0 >= 0 or b0 >= 0:
            return (0, min(a1 if a0 >= 0 else b1, b1 if b0 >= 0 else a1))
    if op is Ops.WHERE:
        (a0, a1), (b0, b1) = u.src[1].bounds, u.src[2].bounds
        return (min(a0, b0), max(a1, b1))
    if u.dtype == dtypes.bool:
        return (False, True)
    return (u.dtype.min, u.dtype.max)


def pretty(u: UOp, depth: int = 0, seen: dict[UOp, int] | None = None) -> str:
    """A readable, indented dump of a graph; shared nodes are printed once and then referenced."""
    seen = {} if seen is None else seen
    pad = "  " * depth
    if u in seen:
        return f"{pad}<{seen[u]}>"
    seen[u] = len(seen)
    arg = "" if u.arg is None else f", arg={u.arg!r}"
    if not u.src:
        return f"{pad}<{seen[u]}> UOp({u.op}, {u.dtype}{arg})"
    inner = ",\n".join(pretty(s, depth + 1, seen) for s in u.src)
    return f"{pad}<{seen[u]}> UOp({u.op}, {u.dtype}{arg}, src=(\n{inner}))"
