"""WGSL for WebGPU: one compute entry point per kernel, one storage buffer per PARAM.

WGSL is not C: no implicit conversions (shift amounts are ``u32``), ``select`` for ``?:``, no
8/16-bit integers (core packs them into 32-bit words and computes in 32 bits, because
``min_storage_bits`` is 32 and they are missing from ``supported_dtypes``), no 64-bit types, f16
only with the ``shader-f16`` feature, and no literal for infinity or NaN. So this renderer walks
the linear program itself, on the ``Renderer`` base, rather than subclassing the C family.

The grid: the kernel is launched over ``SPECIAL("gidx0", n)`` threads in workgroups of
``local_size``. More than ``global_max`` groups are folded into a second and third dimension, and
the flat index is rebuilt from the three: ``x + y*X + z*X*Y`` (then threads past ``n`` return).
The dispatch size is written in the source's first line, where the runtime and the exported page
read it. A grouped reduction (core's codegen/grid.py) is one workgroup per output: ``group0`` is
``workgroup_id.x``, ``lidx0`` is ``local_invocation_id.x``, its shared array a module-scope
``var<workgroup>``, and its barrier ``workgroupBarrier()``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from fusegrad.dtype import DType, dtypes
from fusegrad.errors import UnsupportedOp
from fusegrad.renderer import Renderer, body_line_owners
from fusegrad.uop.loops import AxisKind
from fusegrad.uop.ops import GroupOp, Ops, UOp, variables_of

#: The limits WebGPU guarantees on every adapter: what an exported page may count on.
DEFAULT_LIMITS: dict[str, int] = {
    "max-compute-workgroup-size-x": 256,
    "max-compute-invocations-per-workgroup": 256,
    "max-compute-workgroups-per-dimension": 65535,
    "max-storage-buffers-per-shader-stage": 8,
    "max-storage-buffer-binding-size": 134217728,
    "max-buffer-size": 268435456,
    "max-compute-workgroup-storage-size": 16384,
}
#: Mesa's llvmpipe (lavapipe, and its OpenGL driver) ends a thread's loops after 65535 trips in
#: all, nested ones counted together: on it, loops are unrolled to stay under that.
LLVMPIPE_LOOP_TRIPS = 65535
#: Unrolling a loop more than this many times is refused rather than done.
MAX_UNROLL = 64
#: a tiled matmul's outputs per thread on an adapter that runs on the processor (llvmpipe: each
#: thread's reads are gathers across the SIMD lanes, so the more multiply-adds per read the
#: better; measured at 1024^2: 8 x 8 0.20 s, 16 x 16 0.13 s, 32 x 16 0.106 s; on an Emerald
#: Rapids, kernel time alone: 32 x 16 in 4 x 8 threads 15 GFLOP/s, 32 x 32 in 4 x 4 18.5-18.8,
#: at 512^2 15 and 19)
CPU_TILE = (32, 32)
#: Threads per workgroup, when the adapter allows that many.
WORKGROUP_SIZE = 64
TYPE_NAMES = {
    dtypes.bool: "bool",
    dtypes.int32: "i32",
    dtypes.uint32: "u32",
    dtypes.float32: "f32",
    dtypes.float16: "f16",
    dtypes.int64: "i64",
    dtypes.uint64: "u64",
    dtypes.float64: "f64",
}
_SUFFIX = {
    dtypes.int32: "i",
    dtypes.uint32: "u",
    dtypes.float32: "f",
    dtypes.float16: "h",
    dtypes.int64: "li",
    dtypes.uint64: "lu",
    dtypes.float64: "lf",
}
#: The adapter features (wgpu-native's, beyond the WebGPU standard) that bring each extra dtype.
#: Not shader-f64: llvmpipe's float64 exp2, log2 and sin return garbage.
FEATURE_DTYPES = {
    "shader-f16": (dtypes.float16,),
    "shader-int64": (dtypes.int64, dtypes.uint64),
}
_BINARY = {
    Ops.ADD: "+",
    Ops.MUL: "*",
    Ops.IDIV: "/",
    Ops.MOD: "%",
    Ops.CMPLT: "<",
    Ops.CMPNE: "!=",
    Ops.AND: "&",
    Ops.OR: "|",
    Ops.XOR: "^",
}
#: bool has no arithmetic in WGSL: the same truth tables with logic ops
_BOOL_BINARY = {
    Ops.ADD: "|",
    Ops.MAX: "|",
    Ops.OR: "|",
    Ops.MUL: "&",
    Ops.AND: "&",
    Ops.XOR: "!=",
    Ops.CMPNE: "!=",
}
_MATH = {Ops.SQRT: "sqrt", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin"}
#: Infinities and NaN have no WGSL literal, and a constant expression may not produce them; so
#: they are read from private variables, which the compiler does not fold.
SPECIAL_FLOATS = {"inf": "0x7f800000u", "ninf": "0xff800000u", "nan": "0x7fc00000u"}
#: the entry point's argument for each grid index: (builtin, argument name)
BUILTINS = {
    "gidx0": ("global_invocation_id", "gid"),
    "group0": ("workgroup_id", "wid"),
    "lidx0": ("local_invocation_id", "lid"),
}


def dispatch_size(threads: int, local: int, max_per_dim: int) -> tuple[int, int, int]:
    """Workgroups per dimension covering ``threads`` threads: folded into y and z past the limit."""
    groups = max(1, -(-threads // local))
    x = min(groups, max_per_dim)
    rest = -(-groups // x)
    y = min(rest, max_per_dim)
    z = -(-rest // y)
    if z > max_per_dim:
        raise UnsupportedOp(f"a grid of {threads} threads exceeds {max_per_dim}**3 workgroups")
    return x, y, z


def _is_nan(x: str, dtype: DType) -> str:
    """WGSL's test for NaN: ``x != x`` may be folded to false (WGSL lets the compiler assume there
    is no NaN), so a float32's bits are tested instead."""
    if dtype == dtypes.float32:
        return f"((bitcast<u32>({x}) & 0x7fffffffu) > 0x7f800000u)"
    return f"({x} != {x})"


def _widen_by_bits(x: str, dtype: DType) -> str:
    """An integer of 32 bits or fewer as an int64, built from its bits: llvmpipe compares a
    sign-extended value with a constant wrongly (``i64(x) < 5`` was false for x = 1) and
    sign-extended a uint32 (3000000000 became -1294967296)."""
    if dtype.is_unsigned:
        return f"bitcast<i64>(u64(u32({x})))"
    x = x if dtype == dtypes.int32 else f"i32({x})"
    return f"(bitcast<i64>(u64(bitcast<u32>({x}))) - select(0li, 4294967296li, {x} < 0i))"


def _atomic_buffers(program: list[UOp]) -> set[UOp]:
    """The buffers the program changes with atomic ops (packed stores): atomic words."""
    return {u.src[0].src[0] for u in program if u.op in (Ops.ATOMIC_AND, Ops.ATOMIC_OR)}


def _written_buffers(program: list[UOp]) -> set[UOp]:
    """The buffers the program stores to."""
    return {u.src[0].src[0] for u in program if u.op is Ops.STORE and u.src[0].op is Ops.INDEX}


class WGSLRenderer(Renderer):
    """Renders a linear program as a WGSL compute shader for one adapter's features and limits."""

    grid_dims = 3
    min_storage_bits = 32
    ieee_specials = False  # WGSL lets a compiler treat nan and infinities as indeterminate
    has_local = True
    #: a tiled matmul's outputs per thread on a GPU (see ``CPU_TILE`` for a software adapter)
    tile_upcast = (8, 8)
    native_ops = GroupOp.ALU - {Ops.MULACC}

    def __init__(
        self,
        device: str = "WEBGPU",
        features: frozenset[str] = frozenset(),
        limits: Mapping[str, int] | None = None,
        adapter: str = "a WebGPU adapter",
        on_cpu: bool = False,
    ):
        super().__init__(device)
        if on_cpu:
            self.tile_upcast = CPU_TILE
        limits = {**DEFAULT_LIMITS, **(limits or {})}
        self.features, self.adapter = frozenset(features), adapter
        extra = {d for feature in self.features for d in FEATURE_DTYPES.get(feature, ())}
        self.supported_dtypes = frozenset(
            {dtypes.bool, dtypes.int32, dtypes.uint32, dtypes.float32} | extra
        )
        self.local_size = min(
            WORKGROUP_SIZE,
            limits["max-compute-workgroup-size-x"],
            limits["max-compute-invocations-per-workgroup"],
        )
        self.max_group_size = min(
            limits["max-compute-workgroup-size-x"], limits["max-compute-invocations-per-workgroup"]
        )
        self.local_memory_bytes = limits["max-compute-workgroup-storage-size"]
        self.global_max = (limits["max-compute-workgroups-per-dimension"],) * 3
        self.max_buffers = limits["max-storage-buffers-per-shader-stage"]
        #: trips a thread's loops may make in all (nested trips multiply); None: no limit
        self.max_loop_trips = LLVMPIPE_LOOP_TRIPS if "llvmpipe" in adapter else None
        #: GLSL leaves ``%`` of negative operands undefined and the OpenGL adapter's translation
        #: keeps WGSL's ``%`` as it is (-7 % 2 gave 1); there a signed remainder is a - (a / b) * b
        self.remainder_by_division = "opengl" in adapter.lower()
        #: llvmpipe miscompiles a comparison of a sign-extended int64 with a constant
        self.widen_by_bits = "llvmpipe" in adapter

    def dtype_advice(self, dtype: DType) -> str:
        feature = next((f for f, ds in FEATURE_DTYPES.items() if dtype in ds), None)
        if feature is None:
            return (
                f"WGSL has no {dtype.name}; cast to a 32-bit type (.float(), .int()) "
                "or use another device"
            )
        return (
            f"the adapter ({self.adapter}) lacks the {feature} feature; cast to a 32-bit type "
            "(.float(), .int()), or use another adapter or device"
        )

    # ---- values --------------------------------------------------------------------------------

    def type_name(self, dtype: DType) -> str:
        return TYPE_NAMES[dtype]

    def render_const(self, value: bool | int | float, dtype: DType) -> str:
        if dtype == dtypes.bool:
            return "true" if value else "false"
        if dtype.is_float:
            with np.errstate(over="ignore"):
                value = float(np.array(value, dtype=dtype.np))  # as the dtype holds it: may be inf
            if math.isinf(value) or math.isnan(value):
                which = "nan" if math.isnan(value) else "inf" if value > 0 else "ninf"
                text = f"bitcast<f32>(fg_{which})"
                return text if dtype == dtypes.float32 else f"{self.type_name(dtype)}({text})"
            text = f"{value!r}{_SUFFIX[dtype]}"
        else:
            text = f"{int(value)}{_SUFFIX[dtype]}"
        if dtype.kind == "i" and value == dtype.min:  # 2147483648i does not exist
            text = f"({value + 1}{_SUFFIX[dtype]} - 1{_SUFFIX[dtype]})"
        return f"({text})" if text.startswith("-") else text

    def render_alu(self, u: UOp, src: list[str]) -> str:
        op, operand = u.op, u.src[0].dtype
        if op in _MATH:
            return f"{_MATH[op]}({src[0]})"
        if op is Ops.NEG:
            return (
                f"(!{src[0]})"
                if operand == dtypes.bool
                else f"(0u - {src[0]})"
                if operand.is_unsigned
                else f"(-{src[0]})"
            )
        if op is Ops.RECIP:
            return f"({self.render_const(1.0, u.dtype)} / {src[0]})"
        if op is Ops.CMPNE and u.src[0] is u.src[1] and operand.is_float:
            return _is_nan(src[0], operand)
        if op is Ops.WHERE:
            return f"select({src[2]}, {src[1]}, {src[0]})"
        if operand == dtypes.bool and op in _BOOL_BINARY:
            return f"({src[0]} {_BOOL_BINARY[op]} {src[1]})"
        if operand == dtypes.bool and op is Ops.CMPLT:
            return f"((!{src[0]}) & {src[1]})"
        if op in (Ops.SHL, Ops.SHR):
            return f"({src[0]} {'<<' if op is Ops.SHL else '>>'} u32({src[1]}))"
        if op is Ops.MAX and operand.is_float:  # WGSL's max() may drop a NaN: keep either side's
            either = f"select(max({src[0]}, {src[1]}), {src[1]}, {_is_nan(src[1], operand)})"
            return f"select({either}, {src[0]}, {_is_nan(src[0], operand)})"
        if op is Ops.MAX:
            return f"max({src[0]}, {src[1]})"
        if op is Ops.MOD and self.remainder_by_division and operand.is_int:
            return f"({src[0]} - ({src[0]} / {src[1]}) * {src[1]})"
        return f"({src[0]} {_BINARY[op]} {src[1]})"

    # ---- the kernel ----------------------------------------------------------------------------

    def render(self, name: str, program: list[UOp]) -> str:
        return self._render(name, program)[0]

    def line_owners(self, name: str, program: list[UOp]) -> dict[int, UOp]:
        """The op that wrote each line of the kernel's body (VIZ links lines to UOps)."""
        source, walk = self._render(name, program)
        return body_line_owners(source, walk.lines, walk.owners)

    def _render(self, name: str, program: list[UOp]) -> tuple[str, _Walk]:
        """The kernel's source, and the walk that wrote its body."""
        params = [u for u in program if u.op is Ops.PARAM]
        if len(params) > self.max_buffers:
            raise UnsupportedOp(
                f"kernel {name} needs {len(params)} storage buffers, but the adapter "
                f"({self.adapter}) "
                f"allows {self.max_buffers} per shader stage; compute the result in parts "
                "(e.g. .realize() some inputs of the expression first)"
            )
        specials = {u.arg[0]: u.arg[1] for u in program if u.op is Ops.SPECIAL}
        if specials.keys() - {"gidx0", "group0", "lidx0"}:
            raise UnsupportedOp(
                f"the WGSL renderer launches one grid dimension, kernel {name} uses "
                f"{sorted(specials)}"
            )
        local = specials.get("lidx0", self.local_size if specials else 1)
        threads = specials.get("gidx0", specials.get("group0", 1) * local)
        dispatch = dispatch_size(threads, local, self.global_max[0])
        walk = _Walk(self, program, dispatch, local)
        walk.run(program)
        body = "\n".join(walk.lines)
        header = [f"// dispatch {dispatch[0]} {dispatch[1]} {dispatch[2]}"]
        if any(u.dtype == dtypes.float16 for u in program):
            header.append("enable f16;")
        header += self.render_bindings(program)
        header += walk.shared
        header += [
            f"var<private> fg_{k}: u32 = {v};"
            for k, v in SPECIAL_FLOATS.items()
            if f"fg_{k}" in body
        ]
        builtins = ", ".join(
            f"@builtin({builtin}) {arg}: vec3<u32>"
            for kind, (builtin, arg) in BUILTINS.items()
            if kind in specials or (kind == "gidx0" and "lidx0" not in specials)
        )
        entry = f"@compute @workgroup_size({local})\nfn {name}({builtins}) {{\n{body}\n}}\n"
        return "\n".join(header) + "\n\n" + entry, walk

    def render_bindings(self, program: list[UOp]) -> list[str]:
        """One storage buffer per PARAM: atomic words for packed stores, read-only for inputs."""
        atomic, written = _atomic_buffers(program), _written_buffers(program)
        lines = []
        for p in (u for u in program if u.op is Ops.PARAM):
            element = (
                f"atomic<{self.type_name(p.dtype)}>" if p in atomic else self.type_name(p.dtype)
            )
            access = "read_write" if p in atomic or p in written else "read"
            lines.append(
                f"@group(0) @binding({p.arg[0]}) var<storage, {access}> "
                f"data{p.arg[0]}: array<{element}>;"
            )
        if variables := variables_of(program):  # their values: one uniform after the buffers
            fields = ", ".join(f"{v.arg[0]}: i32" for v in variables)
            after = max((p.arg[0] for p in program if p.op is Ops.PARAM), default=-1) + 1
            lines += [
                f"struct Vals {{ {fields} }}",
                f"@group(0) @binding({after}) var<uniform> vals: Vals;",
            ]
        return lines

    def render_bitcast(self, x: str, src: DType, dtype: DType) -> str:
        """Reinterpret bits; between f16 and a 32-bit integer, the low 16 bits (core's narrow-type
        rewrite holds 16-bit integers in 32)."""
        if src == dtypes.float16 and dtype.itemsize == 4:  # naga cannot bitcast vec2<f16>
            return f"{self.type_name(dtype)}(pack2x16float(vec2<f32>(f32({x}), 0.0f)))"
        if dtype == dtypes.float16 and src.itemsize == 4:
            return f"f16(unpack2x16float(u32({x})).x)"
        return f"bitcast<{self.type_name(dtype)}>({x})"

    def render_grid_index(
        self, u: UOp, dispatch: tuple[int, int, int], local: int, bound: str | None = None
    ) -> list[str]:
        """The flat thread index from up to three grid dimensions, and the guard past its end;
        or a grouped kernel's group (one dimension, launched exactly) or thread in its group.
        ``bound`` is the rendered real size of a variable one (the SPECIAL's source): the launch
        covers the largest, and the threads past this launch's size must store nothing."""
        name, size = u.arg
        if name in ("group0", "lidx0"):
            return [f"let {name}: i32 = i32({BUILTINS[name][1]}.x);"]
        x_threads = dispatch[0] * local
        flat = "gid.x"
        if dispatch[1] > 1 or dispatch[2] > 1:
            flat += f" + gid.y * {x_threads}u"
        if dispatch[2] > 1:
            flat += f" + gid.z * {x_threads * dispatch[1]}u"
        lines = [f"let {name}: i32 = i32({flat});"]
        if bound is not None:  # no barrier follows a flat index: returning is safe
            lines.append(f"if ({name} >= {bound}) {{ return; }}")
        elif x_threads * dispatch[1] * dispatch[2] > size:
            lines.append(f"if ({name} >= {size}i) {{ return; }}")
        return lines


class _Walk:
    """One walk over a linear program, writing the body of the kernel."""

    def __init__(
        self, renderer: WGSLRenderer, program: list[UOp], dispatch: tuple[int, int, int], local: int
    ):
        self.r, self.dispatch, self.local = renderer, dispatch, local
        self.names: dict[UOp, str] = {}
        self.lines: list[str] = []
        #: the op being rendered, and for each line the op that wrote it (``line_owners``)
        self.current: UOp | None = None
        self.owners: list[UOp | None] = []
        #: the values declared so far by their text (``let`` values never change): (name, depth)
        self.known: dict[str, tuple[str, int]] = {}
        self._depth = 1
        self.trips: dict[UOp, int] = {}  # the open loops and the trips each makes
        self.atomic = _atomic_buffers(program)
        #: the buffers the kernel changes: two reads of one may differ
        self.changed = _written_buffers(program) | self.atomic
        #: module-scope declarations of the kernel's shared arrays
        self.shared: list[str] = []

    @property
    def depth(self) -> int:
        """How deep the open blocks nest; leaving a block forgets the reads made inside it."""
        return self._depth

    @depth.setter
    def depth(self, value: int) -> None:
        if value < self._depth:
            self.known = {k: v for k, v in self.known.items() if v[1] <= value}
        self._depth = value

    def emit(self, line: str) -> None:
        self.lines.append("  " * self.depth + line)
        self.owners.append(self.current)

    def let(self, u: UOp, prefix: str, expr: str, reuse: bool = True) -> None:
        """Declare ``u``'s value, or name an equal one declared before in an open block (with
        ``reuse``). An unrolled register tile repeats its index arithmetic and its reads in
        every copy, and WGSL compilers may not merge two reads of a storage buffer. A value
        computed from a single accumulator (a ``var``, named where it is used) is never reused:
        the accumulator changes."""
        reuse = reuse and not any(s.op is Ops.LOAD and s.src[0].op is Ops.DEFINE_REG for s in u.src)
        text = f"{self.r.type_name(u.dtype)} = {expr}"
        if reuse and text in self.known:
            self.names[u] = self.known[text][0]
            return
        self.names[u] = f"{prefix}{len(self.lines)}"
        self.emit(f"let {self.names[u]}: {text};")
        if reuse:
            self.known[text] = (self.names[u], self.depth)

    def run(self, items: list[UOp]) -> None:
        pc = 0
        while pc < len(items):
            u = self.current = items[pc]
            if u.op is Ops.RANGE and (times := self.unroll_factor(u)) > 1:
                end = next(
                    i
                    for i in range(pc, len(items))
                    if items[i].op is Ops.END and items[i].src[0] is u
                )
                self.unrolled(u, items[pc + 1 : end], times)
                pc = end + 1
            else:
                self.op(u)
                pc += 1

    def unroll_factor(self, u: UOp) -> int:
        """How many times to unroll loop ``u``: a register tile's loop (UPCAST, whatever its
        hint) whole, since an accumulator array indexed by a loop counter anywhere stays in
        memory everywhere (llvmpipe keeps it there: a 1024^2 matmul ran 2.5x slower with its
        accumulators' first and last loops rolled); another loop so that the thread's loops
        stay under the limit."""
        if u.arg.kind is AxisKind.UPCAST and u.src[0].op is Ops.CONST:
            if u.src[0].arg <= MAX_UNROLL:
                return u.src[0].arg
        limit = self.r.max_loop_trips
        if limit is None or u.src[0].op is not Ops.CONST:
            return 1
        outside = 1
        for trips in self.trips.values():
            outside *= trips
        trips = u.src[0].arg
        if outside * trips <= limit:
            return 1
        times = -(-trips // max(1, limit // outside))
        if times > MAX_UNROLL or outside > limit:
            raise UnsupportedOp(
                f"the adapter ({self.r.adapter}) ends a thread's loops after {limit} trips, and "
                f"this kernel's loops make {outside * trips}; use smaller reductions, or "
                "another adapter (a hardware GPU) or device"
            )
        return times

    def unrolled(self, u: UOp, body: list[UOp], times: int) -> None:
        """Loop ``u`` as ``ceil(trips / times)`` trips of ``times`` copies of its body."""
        trips, name = u.src[0].arg, self.r.loop_name(u)
        outer = -(-trips // times)
        if outer > 1:
            self.emit(f"for (var {name}: i32 = 0; {name} < {outer}i; {name}++) {{")
            self.depth += 1
            self.trips[u] = outer
        for copy in range(times):
            if outer > 1:
                self.names[u] = f"{name}_{copy}"
                self.emit(f"let {name}_{copy}: i32 = {name} * {times}i + {copy}i;")
            else:  # unrolled whole: the counter is a constant in each copy
                self.names[u] = f"{copy}i"
            guarded = trips % times != 0 and copy >= trips % times
            if guarded:  # the last trip has fewer copies to run
                self.emit(f"if ({self.names[u]} < {trips}i) {{")
                self.depth += 1
            self.run(body)
            self.current = u  # the loop's own closing lines
            if guarded:
                self.depth -= 1
                self.emit("}")
        if outer > 1:
            del self.trips[u]
            self.depth -= 1
            self.emit("}")

    def op(self, u: UOp) -> None:
        """Render one op of the program."""
        r, names, op = self.r, self.names, u.op
        src = [names.get(s, "") for s in u.src]
        if op is Ops.PARAM:
            names[u] = f"data{u.arg[0]}"
        elif op is Ops.DEFINE_VAR:
            names[u] = f"vals.{u.arg[0]}"
        elif op is Ops.CONST:
            names[u] = r.render_const(u.arg, u.dtype)
        elif op is Ops.SPECIAL:
            names[u] = u.arg[0]
            bound = src[0] if src else None
            for line in r.render_grid_index(u, self.dispatch, self.local, bound):
                self.emit(line)
        elif op is Ops.RANGE:
            names[u] = r.loop_name(u)
            self.trips[u] = u.src[0].arg if u.src[0].op is Ops.CONST else 1
            self.emit(f"for (var {names[u]}: i32 = 0; {names[u]} < {src[0]}; {names[u]}++) {{")
            self.depth += 1
        elif op is Ops.END:
            self.trips.pop(u.src[0], None)
            self.depth -= 1
            self.emit("}")
        elif op is Ops.IF:
            self.emit(f"if ({src[0]}) {{")
            self.depth += 1
        elif op is Ops.ENDIF:
            self.depth -= 1
            self.emit("}")
        elif op is Ops.DEFINE_LOCAL:  # WGSL declares workgroup memory at module scope
            names[u] = f"shared{u.arg[0]}"
            array = f"array<{r.type_name(u.dtype)}, {u.arg[1]}>"
            self.shared.append(f"var<workgroup> {names[u]}: {array};")
        elif op is Ops.BARRIER:
            self.emit("workgroupBarrier();")
        elif op is Ops.DEFINE_REG:
            names[u] = f"acc{u.arg[0]}"
            kind = r.type_name(u.dtype)
            self.emit(f"var {names[u]}: {kind if u.arg[1] == 1 else f'array<{kind}, {u.arg[1]}>'};")
        elif op is Ops.INDEX:
            names[u] = f"{src[0]}[{src[1]}]"
        elif op is Ops.LOAD and u.src[0].op is Ops.DEFINE_REG:
            names[u] = src[0]
        elif op is Ops.LOAD:
            self.load(u, src)
        elif op is Ops.STORE:
            self.emit(f"{src[0]} = {src[1]};")
        elif op in (Ops.ATOMIC_AND, Ops.ATOMIC_OR):
            call = "atomicAnd" if op is Ops.ATOMIC_AND else "atomicOr"
            self.emit(f"{call}(&{src[0]}, {src[1]});")
        elif (
            op is Ops.CAST
            and r.widen_by_bits
            and u.dtype == dtypes.int64
            and u.src[0].dtype.is_int
            and u.src[0].dtype.itemsize <= 4
        ):
            self.let(u, "cast", _widen_by_bits(src[0], u.src[0].dtype))
        elif op is Ops.CAST:
            self.let(u, "cast", f"{r.type_name(u.dtype)}({src[0]})")
        elif op is Ops.BITCAST:
            self.let(u, "cast", r.render_bitcast(src[0], u.src[0].dtype, u.dtype))
        elif op in GroupOp.ALU:
            self.let(u, "alu", r.render_alu(u, src))
        else:
            raise UnsupportedOp(f"the WGSL renderer cannot render {op.name}")

    def load(self, u: UOp, src: list[str]) -> None:
        """A read of a buffer; a gated one reads nothing where its gate is false."""
        read = f"atomicLoad(&{src[0]})" if u.src[0].src[0] in self.atomic else src[0]
        if len(src) != 3:  # a buffer the kernel writes may change between two reads
            buffer = u.src[0].src[0]
            self.let(u, "val", read, reuse=buffer not in self.changed)
            return
        self.names[u] = f"val{len(self.lines)}"
        self.emit(f"var {self.names[u]}: {self.r.type_name(u.dtype)} = {src[2]};")
        self.emit(f"if ({src[1]}) {{ {self.names[u]} = {read}; }}")
