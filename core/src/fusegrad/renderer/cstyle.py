"""The base of every C-family renderer (C, OpenCL C, CUDA C, Metal): tables of op spellings
and a walk over the linear program that renders each op by its entry in ``OP_RENDERERS``. A
backend subclass changes only what its language spells differently: type names, the kernel
signature, how a thread finds its index, math functions, the pragmas before loops."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from fusegrad.dtype import DType, dtypes
from fusegrad.renderer import Renderer, body_line_owners
from fusegrad.uop.loops import AxisKind, LoopHint
from fusegrad.uop.ops import GroupOp, Ops, UOp, variables_of


def _binary(symbol: str) -> Callable[[str, str], str]:
    return lambda a, b: f"({a}{symbol}{b})"


#: A GPU C dialect's loop pragmas (CUDA, OpenCL C): a register tile's loops (UPCAST, whatever
#: their hint) and unrolled lanes unrolled whole, so that each accumulator is a register of its own.
UNROLL_REGISTER_TILES: dict[tuple[AxisKind, LoopHint], str] = {
    **{(AxisKind.UPCAST, hint): "#pragma unroll" for hint in LoopHint},
    (AxisKind.LANE, LoopHint.UNROLL): "#pragma unroll",
}

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


@dataclass
class RenderContext:
    """One render of a kernel in progress: the name (a C expression) of each value rendered so
    far, the lines of the body, the buffers met, and how deep the open loops and ifs nest."""

    renderer: CStyleRenderer
    names: dict[UOp, str] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)
    params: list[UOp] = field(default_factory=list)
    depth: int = 1
    #: values declared so far; numbers the next one (``val4``, ``alu5``: one count for all)
    temps: int = 0
    #: the integer values and loop counters declared 64 bits wide (``address_values``)
    wide: set[UOp] = field(default_factory=set)

    def emit(self, *lines: str) -> None:
        self.lines.extend("  " * self.depth + line for line in lines)

    def temp(self, u: UOp, prefix: str, expr: str) -> None:
        """Declare ``u``'s value as a new variable ``{prefix}{n} = expr``."""
        self.names[u] = f"{prefix}{self.temps}"
        self.temps += 1
        self.emit(f"{self.value_type(u)} {self.names[u]} = {expr};")

    def value_type(self, u: UOp) -> str:
        """The C type ``u``'s variable is declared with: its dtype's, or 64-bit for a value
        that only addresses memory (``wide``)."""
        return self.renderer.type_name(dtypes.int64 if u in self.wide else u.dtype)

    def open(self, *lines: str) -> None:
        """Emit ``lines`` that open a block (a loop, an if); what follows is inside it."""
        self.emit(*lines)
        self.depth += 1

    def close(self) -> None:
        self.depth -= 1
        self.emit("}")


def address_values(program: list[UOp]) -> set[UOp]:
    """The 32-bit integer values and loop counters of ``program`` that only address memory: each
    use is the offset of an INDEX, another such value, or (a counter) its loop's END or the read
    of an accumulator in it, which lists the loop only to be ordered inside it. A 64-bit
    target declares them 64 bits wide (``Renderer.wide_addresses``): in C, ``p[i]`` with a
    32-bit ``i`` sign-extends ``i`` first, an instruction per load that a register tile's inner
    loop repeats for each of its rows (a 6 x 16 AVX2 matmul tile: 35 instructions a step, 29
    wide; 1024² 9.63 -> 9.53 ms in C). Values anything else reads stay 32-bit (a comparison,
    a value stored: 32-bit wrapping is theirs), and so do values that move with a vector loop
    (SIMD, LANE), which the compiler may compute in vector lanes: twice as many at 32 bits."""
    users: dict[UOp, list[UOp]] = {}
    lanes: set[UOp] = set()  # values that move with a vector loop
    for u in program:
        for s in u.src:
            users.setdefault(s, []).append(u)
        vector = u.op is Ops.RANGE and (u.arg.hint is LoopHint.SIMD or u.arg.kind is AxisKind.LANE)
        if vector or any(s in lanes for s in u.src):
            lanes.add(u)
    wide: set[UOp] = set()
    for u in reversed(program):  # every use of a value comes after it
        if u.dtype != dtypes.int32 or u in lanes or not (u.op is Ops.RANGE or u.op in GroupOp.ALU):
            continue
        uses = users.get(u, [])
        if uses and all(
            v in wide
            or (v.op is Ops.INDEX and v.src[1] is u and v.src[0] is not u)
            or (u.op is Ops.RANGE and _orders(v, u))
            for v in uses
        ):
            wide.add(u)
    return wide


def _orders(use: UOp, loop: UOp) -> bool:
    """Whether ``use`` names ``loop`` only for where it goes: the loop's END, or the read of
    an accumulator inside it (rendered as the accumulator's element, the loop unused)."""
    if use.op is Ops.END:
        return True
    read = use.src[0] if use.op is Ops.LOAD and use.src else None
    if read is None or read is loop:
        return False
    return read.op is Ops.DEFINE_REG or (read.op is Ops.INDEX and read.src[0].op is Ops.DEFINE_REG)


#: how one op of the linear program is rendered: ``(context, op, its sources' names)``. A value
#: gets a name in ``context.names`` (a constant or an index is its expression), a statement
#: emits lines. The spelling of each piece is the renderer's (``context.renderer.render_*``).
OpRenderer = Callable[[RenderContext, UOp, list[str]], None]


def _param(ctx: RenderContext, u: UOp, src: list[str]) -> None:  # a buffer argument
    ctx.params.append(u)
    ctx.names[u] = f"data{u.arg[0]}"


def _special(ctx: RenderContext, u: UOp, src: list[str]) -> None:  # a grid index
    ctx.names[u] = u.arg[0]
    ctx.emit(*ctx.renderer.render_grid_index(u, src[0] if src else None))


def _range(ctx: RenderContext, u: UOp, src: list[str]) -> None:  # a loop, named by its kind
    name = ctx.names[u] = ctx.renderer.loop_name(u)
    ctx.open(*ctx.renderer.render_loop(u, name, src[0], ctx.value_type(u)))


def _group_op(ctx: RenderContext, u: UOp, src: list[str]) -> None:  # shared array or barrier
    ctx.names[u] = f"shared{u.arg[0]}" if u.op is Ops.DEFINE_LOCAL else ""
    ctx.emit(ctx.renderer.render_group_op(u, ctx.names[u]))


def _register(ctx: RenderContext, u: UOp, src: list[str]) -> None:  # accumulator(s)
    ctx.names[u] = f"acc{u.arg[0]}"
    size = f"[{u.arg[1]}]" if u.arg[1] > 1 else ""
    ctx.emit(f"{ctx.renderer.type_name(u.dtype)} {ctx.names[u]}{size};")


def _load(ctx: RenderContext, u: UOp, src: list[str]) -> None:
    """An accumulator is read where it is used; a buffer read (gated: ``gate?x:alt``) is a value."""
    if u.src[0].op is Ops.DEFINE_REG:
        ctx.names[u] = src[0]
    else:
        ctx.temp(u, "val", f"({src[1]}?{src[0]}:{src[2]})" if len(src) == 3 else src[0])


def _name(expr: Callable[[RenderContext, UOp, list[str]], str]) -> OpRenderer:
    """An op that is an expression where it is used, declaring nothing."""

    def render(ctx: RenderContext, u: UOp, src: list[str]) -> None:
        ctx.names[u] = expr(ctx, u, src)

    return render


def _value(prefix: str, expr: Callable[[CStyleRenderer, UOp, list[str]], str]) -> OpRenderer:
    """An op whose value is declared as a variable ``{prefix}{n}``."""

    def render(ctx: RenderContext, u: UOp, src: list[str]) -> None:
        ctx.temp(u, prefix, expr(ctx.renderer, u, src))

    return render


#: how the C-family renderers render each op; a backend's renderer may replace entries in its
#: own ``op_renderers``. An op missing from the table cannot be rendered.
OP_RENDERERS: dict[Ops, OpRenderer] = {
    **{op: _value("alu", lambda r, u, src: r.render_alu(u, src)) for op in GroupOp.ALU},
    Ops.PARAM: _param,
    Ops.CONST: _name(lambda ctx, u, src: ctx.renderer.render_const(u.arg, u.dtype)),
    Ops.DEFINE_VAR: _name(lambda ctx, u, src: u.arg[0]),
    Ops.SPECIAL: _special,
    Ops.RANGE: _range,
    Ops.END: lambda ctx, u, src: ctx.close(),
    Ops.IF: lambda ctx, u, src: ctx.open(f"if ({src[0]}) {{"),
    Ops.ENDIF: lambda ctx, u, src: ctx.close(),
    Ops.DEFINE_LOCAL: _group_op,
    Ops.BARRIER: _group_op,
    Ops.DEFINE_REG: _register,
    Ops.INDEX: _name(lambda ctx, u, src: f"{src[0]}[{src[1]}]"),
    Ops.LOAD: _load,
    Ops.STORE: lambda ctx, u, src: ctx.emit(f"{src[0]} = {src[1]};"),
    Ops.CAST: _value("cast", lambda r, u, src: r.render_cast(src[0], u.dtype)),
    Ops.BITCAST: _value(
        "cast", lambda r, u, src: r.render_bitcast(src[0], u.src[0].dtype, u.dtype)
    ),
}


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
    #: index in its group. ``{d}`` is the dimension's number, ``{x}`` its letter, ``{wide}`` a
    #: cast to the 64-bit index type where the kernel indexes with one (else nothing).
    special_spellings: dict[str, str] = {}
    #: the qualifier of an array shared by a group's threads (``__local `` in OpenCL C)
    local_qualifier = ""
    #: the statement that waits for every thread of the group, with shared memory in sync
    barrier = ""
    #: how each op is rendered (see ``OP_RENDERERS``)
    op_renderers: dict[Ops, OpRenderer] = OP_RENDERERS
    #: the line before a loop, by its kind and hint (``LoopArg``, chosen by codegen); ``{trips}``
    #: is the loop's trip count. None in the base: GPU kernels have few loops, and no pragmas
    loop_pragmas: dict[tuple[AxisKind, LoopHint], str] = {}

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
        wide = f"({self.type_name(u.dtype)})" if u.dtype.itemsize == 8 else ""
        return self.special_spellings[kind].format(d=dim, x="xyz"[dim], wide=wide)

    def render_grid_index(self, u: UOp, bound: str | None = None) -> list[str]:
        """The lines that define grid index ``u`` (a SPECIAL ``(name, size)``), guarded if needed.

        Only a flat index (``gidx``) is guarded: a grouped kernel's launch is exact, and its
        threads must not return before the barrier. ``bound`` is the rendered real size of a
        variable one (the SPECIAL's source): the launch covers the largest, and the threads past
        this launch's size must store nothing, so that guard is always there.
        """
        name, size = u.arg
        lines = [f"{self.type_name(u.dtype)} {name} = {self.render_special(u)};"]
        if bound is not None:
            lines.append(f"if ({name} >= {bound}) return;")
        elif self.guard_grid and grid_index_kind(name) == "gidx":  # no barrier follows it
            lines.append(f"if ({name} >= {size}) return;")
        return lines

    def render_group_op(self, u: UOp, name: str) -> str:
        """A shared array (``DEFINE_LOCAL``, arg ``(id, count)``) or a ``BARRIER``."""
        if u.op is Ops.BARRIER:
            return self.barrier
        return f"{self.local_qualifier}{self.type_name(u.dtype)} {name}[{u.arg[1]}];"

    def render_loop(self, u: UOp, name: str, size: str, kind: str | None = None) -> list[str]:
        """The line(s) that open the loop of a RANGE: its pragma (``loop_pragmas``), the ``for``
        over a counter of C type ``kind`` (by default its dtype's)."""
        kind = kind or self.type_name(u.dtype)
        loop = f"for ({kind} {name} = 0; {name} < {size}; {name}++) {{"
        if (pragma := self.loop_pragmas.get((u.arg.kind, u.arg.hint))) is None:
            return [loop]
        return [pragma.format(trips=u.src[0].arg), loop]

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
        """The element type of a buffer argument. A bool buffer is passed as bytes (0 or 1),
        read into ``bool`` values: gcc vectorises no loop that reads ``_Bool`` memory (an
        attention mask's softmax ran 11x slower), and OpenCL may not pass ``bool*``."""
        return self.type_name(dtypes.uint8 if dtype == dtypes.bool else dtype)

    def render_param(self, u: UOp) -> str:
        """One buffer argument of the kernel, ``float* restrict data1``."""
        restrict = f" {self.restrict}" if self.restrict else ""
        return f"{self.buffer_qualifier}{self.param_type(u.dtype)}*{restrict} data{u.arg[0]}"

    def render_variable(self, u: UOp, position: int) -> str:
        """One integer argument of the kernel, the ``position``-th: a variable's value (``int
        seq``)."""
        return f"{self.type_name(dtypes.int32)} {u.arg[0]}"

    def extra_params(self, program: list[UOp]) -> list[str]:
        """Arguments after the buffers (Metal's thread position)."""
        return []

    def kernel_signature(
        self, name: str, params: list[UOp], program: list[UOp] | None = None
    ) -> str:
        """``void name(float* restrict data0, ...)``: the prefix, the buffers, any extra
        arguments."""
        args = [self.render_param(p) for p in fill_param_gaps(params)]
        args += [
            self.render_variable(v, len(args) + i)
            for i, v in enumerate(variables_of(program or []))
        ]
        args += self.extra_params(program or [])
        return f"{self.kernel_prefix} {name}({', '.join(args)})"

    # ---- the walk ------------------------------------------------------------------------------

    def render(self, name: str, program: list[UOp]) -> str:
        """The kernel's source: each op of ``program`` rendered by its entry in ``op_renderers``."""
        return self._walk(name, program)[0]

    def line_owners(self, name: str, program: list[UOp]) -> dict[int, UOp]:
        source, lines, owners = self._walk(name, program)
        return body_line_owners(source, lines, owners)

    def _walk(self, name: str, program: list[UOp]) -> tuple[str, list[str], list[UOp]]:
        """The source, its body's lines, and the op of ``program`` that wrote each line."""
        ctx, owners = RenderContext(self), []
        if self.wide_addresses:
            ctx.wide = address_values(program)
        for u in program:
            if (render_op := self.op_renderers.get(u.op)) is None:
                raise NotImplementedError(f"{type(self).__name__} cannot render {u.op}")
            before = len(ctx.lines)
            render_op(ctx, u, [ctx.names.get(s, "") for s in u.src])
            owners.extend([u] * (len(ctx.lines) - before))
        body = "\n".join(ctx.lines)
        signature = self.kernel_signature(name, ctx.params, program)
        return f"{self.prelude(program)}{signature} {{\n{body}\n}}\n", ctx.lines, owners

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
