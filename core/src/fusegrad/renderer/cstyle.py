"""The base of every C-family renderer (C, OpenCL C, CUDA C, Metal): one table of op spellings
and one walk over the linear program. A backend subclass changes only what its language spells
differently: type names, the kernel signature, how a thread finds its index, math functions."""

from __future__ import annotations

import math
from collections.abc import Callable

from fusegrad.dtype import DType, dtypes
from fusegrad.renderer import Renderer
from fusegrad.uop.ops import GroupOp, Ops, UOp, variables_of


def _binary(symbol: str) -> Callable[[str, str], str]:
    return lambda a, b: f"({a}{symbol}{b})"


#: The short type names OpenCL C and Metal share (``uchar``, ``ulong``...): a GPU renderer's table.
SHORT_TYPE_NAMES: dict[DType, str] = {
    dtypes.bool: "bool",
    dtypes.int8: "char",
    dtypes.uint8: "uchar",
    dtypes.int16: "short",
    dtypes.uint16: "ushort",
    dtypes.int32: "int",
    dtypes.uint32: "uint",
    dtypes.int64: "long",
    dtypes.uint64: "ulong",
    dtypes.float16: "half",
    dtypes.float32: "float",
    dtypes.float64: "double",
}


def fill_param_gaps(params: list[UOp]) -> list[UOp]:
    """``params`` with a byte-buffer stand-in for each number below the largest that no op uses.

    Kernels are called with every buffer of their step, by position; a buffer the kernel never
    reads (the input of a sum over zero elements) must still hold its place in the signature.
    """
    by_number = {p.arg[0]: p for p in params}
    top = max(by_number, default=-1)
    return [by_number.get(i) or UOp(Ops.PARAM, dtypes.uint8, (), (i, 0)) for i in range(top + 1)]


def grid_index_kind(name: str) -> str:
    """The kind of a grid index from its SPECIAL's name: ``gidx``, ``group`` or ``lidx``."""
    return name.rstrip("0123456789")


class CStyleRenderer(Renderer):
    """Renders a linear program as one C-family function."""

    kernel_prefix = "void"
    buffer_qualifier = ""  # "__global " in OpenCL, "device " in Metal
    restrict = "restrict"
    type_names: dict[DType, str] = {
        dtypes.bool: "bool",
        dtypes.int8: "signed char",
        dtypes.uint8: "unsigned char",
        dtypes.int16: "short",
        dtypes.uint16: "unsigned short",
        dtypes.int32: "int",
        dtypes.uint32: "unsigned int",
        dtypes.int64: "long long",
        dtypes.uint64: "unsigned long long",
        dtypes.float16: "half",
        dtypes.float32: "float",
        dtypes.float64: "double",
    }
    #: C spells most ops the same everywhere; math functions get a type suffix below
    code_for_op: dict[Ops, Callable[..., str]] = {
        Ops.ADD: _binary("+"),
        Ops.MUL: _binary("*"),
        Ops.IDIV: _binary("/"),
        Ops.MOD: _binary("%"),
        Ops.CMPLT: _binary("<"),
        Ops.CMPNE: _binary("!="),
        Ops.AND: _binary("&"),
        Ops.OR: _binary("|"),
        Ops.XOR: _binary("^"),
        Ops.SHL: _binary("<<"),
        Ops.SHR: _binary(">>"),
        Ops.MAX: lambda a, b: f"(({a}>{b})?{a}:{b})",
        Ops.WHERE: lambda c, a, b: f"({c}?{a}:{b})",
        Ops.MULACC: lambda a, b, c: f"(({a}*{b})+{c})",
    }
    math_functions = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin"}
    #: appended to a math function's name for float32 (C's ``sqrtf``); "" where names are overloaded
    float32_math_suffix = "f"
    #: dtypes whose math functions are computed in float32 and rounded back (no half-precision libm)
    math_in_float32: frozenset[DType] = frozenset({dtypes.float16})
    #: how the language spells the float constants NaN and infinity
    nan, infinity = "NAN", "INFINITY"
    #: literal suffixes of 64-bit (signed, unsigned) constants; OpenCL C and Metal say ``l``, ``ul``
    int64_suffixes = ("ll", "ull")
    #: GPU targets whose launch covers more threads than the grid's size (whole groups) set this:
    #: each thread past the end returns at once, before it loads or stores anything
    guard_grid = False
    #: how the language spells a grid index, by the SPECIAL's name without its dimension:
    #: ``gidx`` the thread's index in the whole grid, ``group`` its group's index, ``lidx`` its
    #: index in its group. ``{d}`` is the dimension's number, ``{x}`` its letter.
    special_spellings: dict[str, str] = {}
    #: the qualifier of an array shared by a group's threads (``__local `` in OpenCL C)
    local_qualifier = ""
    #: the statement that waits for every thread of the group, with shared memory in sync
    barrier = ""

    # ---- pieces a subclass overrides ------------------------------------------------------------

    def type_name(self, dtype: DType) -> str:
        return self.type_names[dtype]

    def prelude(self, program: list[UOp]) -> str:
        """Headers and helpers placed before the kernel."""
        return ""

    def render_math(self, op: Ops, dtype: DType, x: str) -> str:
        """sqrt/exp2/log2/sin of ``x``: ``sqrtf`` for float, ``sqrt`` for double."""
        if dtype in self.math_in_float32:
            f32 = f"({self.type_name(dtypes.float32)})({x})"
            return self.render_cast(self.render_math(op, dtypes.float32, f32), dtype)
        suffix = self.float32_math_suffix if dtype == dtypes.float32 else ""
        return f"{self.math_functions[op]}{suffix}({x})"

    def render_special(self, u: UOp) -> str:
        """The expression for a grid index (SPECIAL ``gidx0``, ``group0``, ``lidx0``)."""
        kind, dim = grid_index_kind(u.arg[0]), int(u.arg[0][-1])
        if kind not in self.special_spellings:
            raise NotImplementedError(f"{type(self).__name__} cannot render grid index {u.arg[0]}")
        return self.special_spellings[kind].format(d=dim, x="xyz"[dim])

    def render_grid_index(self, u: UOp) -> list[str]:
        """The lines that define grid index ``u`` (a SPECIAL ``(name, size)``), guarded if needed.

        Only a flat index (``gidx``) is guarded: a grouped kernel's launch is exact, and its
        threads must not return before the barrier.
        """
        name, size = u.arg
        lines = [f"int {name} = {self.render_special(u)};"]
        if self.guard_grid and grid_index_kind(name) == "gidx":  # no barrier follows a flat index
            lines.append(f"if ({name} >= {size}) return;")
        return lines

    def render_group_op(self, u: UOp, name: str) -> str:
        """A shared array (``DEFINE_LOCAL``, arg ``(id, count)``) or a ``BARRIER``."""
        if u.op is Ops.BARRIER:
            return self.barrier
        return f"{self.local_qualifier}{self.type_name(u.dtype)} {name}[{u.arg[1]}];"

    def render_loop(self, u: UOp, name: str, size: str) -> list[str]:
        """The line(s) that open the loop of a RANGE."""
        return [f"for (int {name} = 0; {name} < {size}; {name}++) {{"]

    def render_cast(self, x: str, dtype: DType) -> str:
        return f"(({self.type_name(dtype)})({x}))"

    def render_bitcast(self, x: str, src: DType, dtype: DType) -> str:
        a, b = self.type_name(src), self.type_name(dtype)
        return f"(((union {{ {a} a; {b} b; }}){{.a = {x}}}).b)"

    def render_const(self, value: bool | int | float, dtype: DType) -> str:
        if dtype.is_float:
            if math.isnan(value):
                text = self.nan
            elif math.isinf(value):
                text = self.infinity if value > 0 else f"-{self.infinity}"
            else:
                text = repr(float(value)) + ("f" if dtype != dtypes.float64 else "")
            return (
                text if dtype in (dtypes.float32, dtypes.float64) else self.render_cast(text, dtype)
            )
        if dtype == dtypes.bool:
            return "1" if value else "0"
        if dtype.itemsize == 8:
            suffix = self.int64_suffixes[dtype.is_unsigned]
            if value == dtype.min:
                return f"({value + 1}{suffix}-1)"
            return f"{value}{suffix}"
        if value == dtype.min and dtype.kind == "i":
            return f"({value + 1}-1)"
        return f"{value}u" if dtype.is_unsigned else str(value)

    def param_type(self, dtype: DType) -> str:
        """The element type of a buffer argument (OpenCL may not pass ``bool*``)."""
        return self.type_name(dtype)

    def render_param(self, u: UOp) -> str:
        """One buffer argument of the kernel, ``float* restrict data1``."""
        restrict = f" {self.restrict}" if self.restrict else ""
        return f"{self.buffer_qualifier}{self.param_type(u.dtype)}*{restrict} data{u.arg[0]}"

    def render_variable(self, u: UOp, position: int) -> str:
        """One integer argument of the kernel, the ``position``-th: a variable's value (``int seq``)."""
        return f"{self.type_name(dtypes.int32)} {u.arg[0]}"

    def extra_params(self, program: list[UOp]) -> list[str]:
        """Arguments after the buffers (Metal's thread position)."""
        return []

    def kernel_signature(
        self, name: str, params: list[UOp], program: list[UOp] | None = None
    ) -> str:
        """``void name(float* restrict data0, ...)``: the prefix, the buffers, any extra arguments."""
        args = [self.render_param(p) for p in fill_param_gaps(params)]
        args += [self.render_variable(v, len(args) + i) for i, v in enumerate(variables_of(program or []))]
        args += self.extra_params(program or [])
        return f"{self.kernel_prefix} {name}({', '.join(args)})"

    # ---- the walk ------------------------------------------------------------------------------

    def render(self, name: str, program: list[UOp]) -> str:
        names: dict[UOp, str] = {}
        lines: list[str] = []
        params: list[UOp] = []
        depth = 1
        counter = 0

        def emit(line: str) -> None:
            lines.append("  " * depth + line)

        def temp(u: UOp, prefix: str, expr: str) -> None:
            nonlocal counter
            names[u] = f"{prefix}{counter}"
            counter += 1
            emit(f"{self.type_name(u.dtype)} {names[u]} = {expr};")

        for u in program:
            op, src = u.op, [names.get(s, "") for s in u.src]
            if op is Ops.PARAM:
                params.append(u)
                names[u] = f"data{u.arg[0]}"
            elif op is Ops.CONST:
                names[u] = self.render_const(u.arg, u.dtype)
            elif op is Ops.DEFINE_VAR:
                names[u] = u.arg[0]
            elif op is Ops.SPECIAL:
                names[u] = u.arg[0]
                for line in self.render_grid_index(u):
                    emit(line)
            elif op is Ops.RANGE:
                names[u] = f"ridx{u.arg[0]}"
                for line in self.render_loop(u, names[u], src[0]):
                    emit(line)
                depth += 1
            elif op is Ops.IF:
                emit(f"if ({src[0]}) {{")
                depth += 1
            elif op in (Ops.END, Ops.ENDIF):
                depth -= 1
                emit("}")
            elif op in (Ops.DEFINE_LOCAL, Ops.BARRIER):
                names[u] = f"shared{u.arg[0]}" if op is Ops.DEFINE_LOCAL else ""
                emit(self.render_group_op(u, names[u]))
            elif op is Ops.DEFINE_REG:
                names[u] = f"acc{u.arg[0]}"
                size = f"[{u.arg[1]}]" if u.arg[1] > 1 else ""
                emit(f"{self.type_name(u.dtype)} {names[u]}{size};")
            elif op is Ops.INDEX:
                names[u] = f"{src[0]}[{src[1]}]"
            elif op is Ops.LOAD and u.src[0].op is Ops.DEFINE_REG:
                names[u] = src[0]
            elif op is Ops.LOAD:
                temp(u, "val", f"({src[1]}?{src[0]}:{src[2]})" if len(src) == 3 else src[0])
            elif op is Ops.STORE:
                emit(f"{src[0]} = {src[1]};")
            elif op is Ops.CAST:
                temp(u, "cast", self.render_cast(src[0], u.dtype))
            elif op is Ops.BITCAST:
                temp(u, "cast", self.render_bitcast(src[0], u.src[0].dtype, u.dtype))
            elif op in GroupOp.ALU:
                temp(u, "alu", self.render_alu(u, src))
            else:
                raise NotImplementedError(f"{type(self).__name__} cannot render {op}")
        body = "\n".join(lines)
        signature = self.kernel_signature(name, params, program)
        return f"{self.prelude(program)}{signature} {{\n{body}\n}}\n"

    def render_alu(self, u: UOp, src: list[str]) -> str:
        if u.op in self.math_functions:
            return self.render_math(u.op, u.dtype, src[0])
        if u.op is Ops.NEG:
            return f"(!{src[0]})" if u.dtype == dtypes.bool else f"(-{src[0]})"
        if u.op is Ops.RECIP:
            return f"({self.render_const(1.0, u.dtype)}/{src[0]})"
        if u.op is Ops.MAX and u.dtype.is_float:
            return self.render_float_max(u, src)
        return self.code_for_op[u.op](*src)

    def render_float_max(self, u: UOp, src: list[str]) -> str:
        """MAX of floats propagates NaN from either side, as numpy's and torch's maximum do (C's
        ``a>b?a:b`` loses a NaN ``a``, so a reduction's result would depend on element order).
        Against a constant (relu's 0) one comparison does: ``!(a<=c)`` holds for a NaN ``a``."""
        (a, b), (ua, ub) = src, u.src
        if ua.op is Ops.CONST:
            (a, b), (ua, ub) = (b, a), (ub, ua)
        if ub.op is Ops.CONST and ub.arg == ub.arg:
            return f"((!({a}<={b}))?{a}:{b})"
        return f"((({a}>{b})||({a}!={a}))?{a}:{b})"
