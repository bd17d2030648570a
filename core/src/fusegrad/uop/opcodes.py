"""The op codes of the IR: ``Ops``, the named sets of them in ``GroupOp``, and ``BACKEND_OPS``.

Apart from ``uop/ops.py`` (the ``UOp`` node) so that tables keyed by op, such as the ALU table
in ``uop/alu.py``, can be imported by ``uop/ops.py`` without a circle. Import them from either.
"""

from __future__ import annotations

from enum import Enum, auto


class Ops(Enum):
    """Every op a UOp can carry. Groups of them are in ``GroupOp``."""

    # tensor graph
    BUFFER = auto()  # arg: Buffer; a realized 1-d buffer
    RESHAPE = auto()  # arg: new shape
    PERMUTE = auto()  # arg: order of the source axes
    EXPAND = auto()  # arg: new shape (size-1 axes grow)
    PAD = auto()  # arg: ((before, after), ...) per axis
    SHRINK = auto()  # arg: ((start, end), ...) per axis
    FLIP = auto()  # arg: tuple of bools, one per axis
    REDUCE_AXIS = auto()  # arg: (Ops.ADD | Ops.MAX, axes)
    CONTIGUOUS = auto()  # forces a buffer to exist here
    COPY = auto()  # arg: target device name
    DETACH = auto()  # cuts gradients; no-op for values
    # src: (table, index); arg: axis. out[p] = table[p with p[axis] = index[p]], shape of index;
    # on the other axes the table is as long as the index or 1 (read at 0): a lookup with no
    # one-hot comparison, one load per element (embeddings, gather)
    GATHER = auto()
    # src: (value, *inputs); arg: (rule, params). The value is src[0]; its gradient is not taken
    # through src[0]'s graph but given by ``rule(g, inputs, params)`` (see gradient.py). The
    # scheduler drops the node (schedule/kernelize.py ``abstract``).
    CUSTOM_GRAD = auto()
    # several devices in one process (engine/shard.py lowers both before anything is planned):
    # MULTI src: one piece per device, arg: (devices, axis); the pieces laid end to end along
    # axis (None: each piece is the whole value). SHARD src: (value,), arg: (devices, axis);
    # the value placed that way (one device and axis None: gathered onto that device).
    MULTI = auto()
    SHARD = auto()
    # symbolic sizes (a sequence length that changes between calls); see ``Variable``
    DEFINE_VAR = auto()  # arg: (name, min, max); an int the kernel takes as an argument
    BIND = auto()  # src: (DEFINE_VAR, CONST value); a variable with its value for one call
    # kernel graph and linear program
    SINK = auto()
    PARAM = auto()  # arg: (position, element count); a buffer argument of a kernel
    DEFINE_LOCAL = auto()
    DEFINE_REG = auto()  # arg: (id, count); an accumulator
    SPECIAL = auto()  # arg: (name, size); a group/thread index
    RANGE = auto()  # src: (size,); arg: LoopArg(axis id, AxisKind, LoopHint), see uop/loops.py
    END = auto()  # src: (range,); closes a loop
    REDUCE = auto()  # src: (value, *ranges); arg: Ops.ADD | Ops.MAX
    IF = auto()
    ENDIF = auto()
    BARRIER = auto()
    INDEX = auto()  # src: (param, offset); a pointer into a buffer
    LOAD = auto()  # src: (index,) or (index, gate, alternative)
    STORE = auto()  # src: (index, value)
    ATOMIC_AND = auto()  # src: (index, value); *index &= value, atomically (packed narrow stores)
    ATOMIC_OR = auto()  # src: (index, value[, after]); *index |= value atomically, after ``after``
    PREFETCH = auto()  # src: (index,); asks for that address in cache; never faults, no value
    # src: (dest index, source index), arg (n, source stride, dest stride): an n x n block
    # transposed, dest[c * dest stride + r] = source[r * source stride + c] for r, c < n
    TRANSPOSE_BLOCK = auto()
    CONST = auto()
    CAST = auto()
    BITCAST = auto()
    # ALU
    NEG = auto()
    RECIP = auto()
    SQRT = auto()
    EXP2 = auto()
    LOG2 = auto()
    SIN = auto()
    ADD = auto()
    MUL = auto()
    IDIV = auto()  # truncates towards zero, as C does; x // 0 = 0 (never traps: guard_division)
    MOD = auto()  # takes the sign of the dividend, as C does; x % 0 = 0
    MAX = auto()
    CMPLT = auto()
    CMPNE = auto()
    AND = auto()
    OR = auto()
    XOR = auto()
    SHL = auto()
    SHR = auto()
    WHERE = auto()
    MULACC = auto()  # optional: a * b + c
    # a warp's tensor-core multiply-accumulate (codegen/tensorcore.py); arg (TensorCore, element).
    # Lowered, a value: element e of this lane's share of the product of the fragment registers
    # in src. Linear (element None), a statement: src (INDEX(acc, base), registers...), adding
    # the product into acc[base], acc[base + 1], ...
    WMMA = auto()

    def __repr__(self) -> str:
        return f"Ops.{self.name}"

    # members are singletons compared by identity: hash by identity too, in C (Enum's own
    # __hash__ is Python code, and every UOp built hashes its op)
    __hash__ = object.__hash__


class GroupOp:
    """Named sets of ops that rules and passes match on."""

    Unary = frozenset({Ops.NEG, Ops.RECIP, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN})
    Binary = frozenset(
        {Ops.ADD, Ops.MUL, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.CMPLT, Ops.CMPNE}
        | {Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR}
    )
    Ternary = frozenset({Ops.WHERE, Ops.MULACC})
    ALU = Unary | Binary | Ternary
    Movement = frozenset({Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP})
    Commutative = frozenset({Ops.ADD, Ops.MUL, Ops.MAX, Ops.CMPNE, Ops.AND, Ops.OR, Ops.XOR})
    Comparison = frozenset({Ops.CMPLT, Ops.CMPNE})


# The ops a linear kernel program may contain: what every renderer must handle (DESIGN.md section
# 3).
BACKEND_OPS = frozenset(
    {
        Ops.PARAM,
        Ops.DEFINE_VAR,
        Ops.DEFINE_LOCAL,
        Ops.DEFINE_REG,
        Ops.SPECIAL,
        Ops.RANGE,
        Ops.END,
        Ops.IF,
    }
    | {Ops.ENDIF, Ops.BARRIER, Ops.INDEX, Ops.LOAD, Ops.STORE, Ops.CONST, Ops.CAST, Ops.BITCAST}
    | GroupOp.ALU
    # only in programs for renderers with ``min_storage_bits`` > 8 (see codegen/decompose.py)
    | {Ops.ATOMIC_AND, Ops.ATOMIC_OR}
    # only in programs for renderers with ``prefetch_bytes`` (see codegen/prefetch.py)
    | {Ops.PREFETCH}
    # only in programs for renderers with ``transpose_block`` (see codegen/packed.py)
    | {Ops.TRANSPOSE_BLOCK}
)
