"""The kernel verifier: checks a linear program before it is rendered and compiled.

A kernel that divides by zero, reads or writes outside its buffers, or computes in a dtype its
target does not declare does not fail where it was built: the process dies (SIGFPE, SIGSEGV, or
the trap gcc emits for a constant ``x % 0``), or memory is silently corrupted. The verifier
refuses such a kernel with a ``KernelVerifyError`` naming the kernel and the offending UOp.

What it proves comes from the value bounds (``UOp.bounds``), which over-approximate: an index
is accepted when its whole range lies inside the buffer, a divisor is refused when its range is
exactly zero. Intervals cannot follow a division by a variable: ``(i*seq + r) // seq`` is ``i``
when ``r < seq``, but its bounds are ``[0, i.vmax*16 + 15] // [1, 16]``; an index computed through
one is not checked (it comes from a symbolic shape, whose index math is the same as for fixed
sizes). Nor is a gated load (``LOAD(index, gate, alternative)``): it reads only where its gate
holds, which intervals cannot relate to its index (the last trip of a grouped reduction).
Every check is one pass over the program, with each node's bounds computed once.

It runs once per generated kernel (``codegen/kernel.py:generate``), never per launch, when
``Context.VERIFY`` is set: always in the tests (``tests/conftest.py``), ``VERIFY=1`` otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

from fusegrad.errors import KernelVerifyError
from fusegrad.renderer import Renderer
from fusegrad.uop.ops import Ops, UOp

#: ops that reach memory through an INDEX (their first source)
MEMORY_OPS = frozenset({Ops.LOAD, Ops.STORE, Ops.ATOMIC_AND, Ops.ATOMIC_OR})
#: what an INDEX may point into; each one's arg is ``(number, element count)``
BUFFER_OPS = frozenset({Ops.PARAM, Ops.DEFINE_REG, Ops.DEFINE_LOCAL})


def describe(u: UOp, program: Sequence[UOp]) -> str:
    """One line naming ``u``: its place in the program, op, dtype and arg (not its subgraph)."""
    where = f"#{program.index(u)} " if u in program else ""
    arg = "" if u.arg is None else f" arg={u.arg!r}"
    return f"{where}{u.op.name} {u.dtype.name}{arg}"


def _buffer_name(buffer: UOp) -> str:
    kind = {Ops.PARAM: "buffer", Ops.DEFINE_REG: "register array", Ops.DEFINE_LOCAL: "shared array"}
    return f"{kind[buffer.op]} {buffer.arg[0]} ({buffer.arg[1]} elements)"


def _outside(index: UOp, unbounded: set[UOp], what: str, reach: int = 0) -> str | None:
    """Why the elements from ``index`` to ``reach`` past it (``what`` reads or writes them) may
    leave its buffer, or None when they lie inside (or the offset is in ``unbounded``, the
    values computed through a division by a variable)."""
    buffer, offset = index.src
    if buffer.op not in BUFFER_OPS:
        return f"its INDEX points into {buffer.op.name}, which is not a buffer"
    if offset in unbounded:
        return None
    lo, hi = offset.bounds
    hi += reach
    if 0 <= lo and hi < buffer.arg[1]:
        return None
    return f"{what} ranges over [{lo}, {hi}], outside {_buffer_name(buffer)}"


def check_index(u: UOp, unbounded: set[UOp]) -> str | None:
    """Why memory op ``u`` may leave its buffer, or None (``_outside``)."""
    index = u.src[0]
    if index.op is not Ops.INDEX:  # a scalar accumulator (DEFINE_REG of one element)
        return None
    if u.op is Ops.LOAD and len(u.src) == 3:  # gated: it reads only where its gate holds
        unbounded = unbounded | {index.src[1]}
    return _outside(index, unbounded, "its index")


def check_block(u: UOp, unbounded: set[UOp]) -> str | None:
    """Why TRANSPOSE_BLOCK ``u`` may leave its buffers: each index is the block's first element,
    and the block reaches ``(n - 1) * stride + n - 1`` beyond it."""
    n, source_stride, dest_stride = u.arg
    for index, stride in zip(u.src, (dest_stride, source_stride)):
        reach = (n - 1) * stride + n - 1
        if (problem := _outside(index, unbounded, f"its {n} x {n} block", reach)) is not None:
            return problem
    return None


def check_division(u: UOp) -> str | None:
    """Why IDIV or MOD ``u`` divides by zero, or None."""
    lo, hi = u.src[1].bounds
    return "its divisor is always 0" if lo == hi == 0 else None


def check_dtype(u: UOp, renderer: Renderer) -> str | None:
    """Why ``u``'s dtype cannot be rendered, or None."""
    if u.dtype.kind == "v" or u.dtype in renderer.supported_dtypes:
        return None
    return f"its dtype {u.dtype.name} is not among the renderer's supported_dtypes"


def verify_program(name: str, program: Sequence[UOp], renderer: Renderer) -> None:
    """Raise ``KernelVerifyError`` when kernel ``name``'s linear ``program`` divides by zero,
    indexes outside a buffer, or uses a dtype ``renderer`` does not declare."""
    unbounded: set[UOp] = set()
    for u in program:
        problem = check_dtype(u, renderer)
        if problem is None and u.op in MEMORY_OPS:
            problem = check_index(u, unbounded)
        elif problem is None and u.op is Ops.TRANSPOSE_BLOCK:
            problem = check_block(u, unbounded)
        elif problem is None and u.op in (Ops.IDIV, Ops.MOD):
            problem = check_division(u)
            if u.src[1].vmin != u.src[1].vmax:
                unbounded.add(u)
        if unbounded and any(s in unbounded for s in u.src):
            unbounded.add(u)
        if problem is not None:
            device = renderer.device or type(renderer).__name__
            raise KernelVerifyError(
                f"kernel {name!r} for {device} failed verification at {describe(u, program)}: "
                f"{problem}. This is a bug in fusegrad's code generation (or in a plugin's rewrite "
                "rules); please report it with the kernel printed by DEBUG=4"
            )
