"""Lowered IR -> C with SIMD, parallel loops on the module's thread pool.

`CEmitter` holds the C spelling of every construct; the CUDA backend subclasses it and
overrides only what differs (qualifiers, thread indices, math names), as tinygrad's
renderers do. A parallel loop's body becomes a function of (context, begin, end) that
`taso_parallel_for` (see `pool`) runs in chunks. Vectorized loops become GCC vector-extension
code when every access is contiguous or loop-invariant (under a guard or selects linear in
the lane: vector code where they hold for every lane, a guarded loop elsewhere), and an
`omp simd` loop otherwise; a local buffer touched only by such vector code is declared as an
array of vectors, so a register-blocked accumulator stays in registers.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from taso_py.codegen import isa
from taso_py.codegen.backends.c.pool import POOL_C
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.lower.ir import (
    Allocate,
    Buffer,
    For,
    IfThenElse,
    Intrinsic,
    LetStmt,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    seq,
    walk_stmts,
)
from taso_py.codegen.lower.simplify import Ranges, bounds, linear, simplify
from taso_py.codegen.schedule.schedule import LoopKind
from taso_py.codegen.te.expr import (
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    Load,
    Not,
    Select,
    Var,
    all_of,
    rebuild,
    substitute,
    walk,
)
from taso_py.codegen.te.intrinsics import SCALAR_INTRINSICS, ScalarIntrinsic, c_prelude
from taso_py.codegen.te.names import Names

C_TYPES = {"float32": "float", "float64": "double", "int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t",
           "int32": "int32_t", "int64": "int64_t", "bool": "bool"}

PRELUDE_HEAD = r"""#include <math.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
""" + POOL_C + r"""
static inline int32_t fdiv_i32(int32_t a, int32_t b) {
  int32_t q = a / b; return q - ((a % b != 0) & ((a < 0) != (b < 0))); }
static inline int32_t fmod_i32(int32_t a, int32_t b) {
  int32_t r = a % b; return r + ((r != 0) & ((r < 0) != (b < 0))) * b; }
/* glibc's vector math (libmvec): `omp simd` loops call e.g. _ZGVeN16v_expf, 16 lanes at a time */
"""
# the C types `(a) + (b)` can have for the operands this backend emits (narrower integers promote to
# int, the last: the default)
_MINMAX_TYPES = (("f", "float"), ("d", "double"), ("l", "long"), ("ul", "unsigned long"), ("ll", "long long"),
                 ("u", "unsigned"), ("i", "int"))
# MIN and MAX are functions chosen by the operands' common type (what `a < b ? a : b` converts them
# to), not macros: a macro repeats its operands, so a bilinear resize's clamped coordinates,
# MIN(MAX(x, 0), 5) inside MIN(... + 1, 5), grew into nested conditionals gcc would not if-convert
# ("control flow in loop"), and the loop stayed scalar.
PRELUDE_TAIL = "".join(
    f"static inline {t} taso_{op}_{k}({t} a, {t} b) {{ return a {cmp} b ? a : b; }}\n"
    for op, cmp in (("min", "<"), ("max", ">")) for k, t in _MINMAX_TYPES) + "".join(
    f"#define {op.upper()}(a, b) _Generic((a) + (b), "
    + ", ".join(f"{t}: taso_{op}_{k}" for k, t in _MINMAX_TYPES[:-1]) + f", default: taso_{op}_i)(a, b)\n"
    for op in ("min", "max"))

SMALL_LOCAL = 64 * 1024  # bytes: local buffers up to this size live on the stack


class _ScalarAccess(Exception):
    """A buffer declared as vectors is accessed by scalar code."""

    def __init__(self, buffer: Buffer) -> None:
        self.buffer = buffer


@dataclass(frozen=True)
class VecType:
    lanes: int
    dtype: str

    @property
    def name(self) -> str:
        return f"v{self.lanes}_{self.dtype}"

    @property
    def unaligned(self) -> str:
        return f"{self.name}_u"


class CEmitter:
    """One C translation unit for a list of kernels."""

    restrict = "restrict"
    func_prefix = ""

    def __init__(self) -> None:
        self.vec_types: set[VecType] = set()
        self.intrinsics: set[str] = set()

    # ---- entry points ---------------------------------------------------------------------

    def module(self, funcs: list[PrimFunc]) -> str:
        return self.module_source([self.function(f) for f in funcs])

    def module_source(self, bodies: list[str]) -> str:
        """The translation unit around function texts made by `function` (typedefs and helpers they use)."""
        types = "".join(self.vec_typedef(v) for v in sorted(self.vec_types, key=lambda v: (v.dtype, v.lanes)))
        from taso_py.codegen.backends.c.micro import intrinsic_source
        helpers = "".join(intrinsic_source(n) for n in sorted(self.intrinsics))
        return PRELUDE_HEAD + c_prelude() + PRELUDE_TAIL + types + helpers + "\n" + "\n".join(bodies)

    def function(self, f: PrimFunc) -> str:
        demoted: set[Buffer] = set()
        while True:  # a buffer met in scalar code (a vector loop that fell back) is demoted; emit again
            self.names = Names(sanitize=True)
            self.ranges: Ranges = {}
            self.func_name = f.name
            self.outlined: list[str] = []  # the parallel loops' bodies, as functions of their own
            self.vector_bufs = {b: v for b, v in _vector_buffers(f.body).items() if b not in demoted}
            params = ", ".join(f"{C_TYPES[b.dtype]}* {self.restrict} {self.names(b)}" for b in f.params)
            lines = [f"{self.func_prefix}void {f.name}({params}) {{"]
            try:
                lines += list(self.stmt(f.body, 1, in_parallel=False))
            except _ScalarAccess as e:
                demoted.add(e.buffer)
                continue
            lines.append("}")
            return "".join(self.outlined) + "\n".join(lines) + "\n"

    # ---- statements ------------------------------------------------------------------------

    def stmt(self, s: Stmt, depth: int, in_parallel: bool) -> Iterator[str]:
        pad = "  " * depth
        if isinstance(s, Seq):
            for x in s.stmts:
                yield from self.stmt(x, depth, in_parallel)
        elif isinstance(s, For):
            yield from self.loop(s, depth, in_parallel)
        elif isinstance(s, Allocate):
            yield from self.allocate(s, depth, in_parallel)
        elif isinstance(s, Store):
            if s.buffer in self.vector_bufs:
                raise _ScalarAccess(s.buffer)
            yield f"{pad}{self.names(s.buffer)}[{self.expr(s.index)}] = {self.expr(s.value)};"
        elif isinstance(s, IfThenElse):
            yield f"{pad}if ({self.expr(s.cond)}) {{"
            yield from self.stmt(s.then, depth + 1, in_parallel)
            if s.otherwise is not None:
                yield f"{pad}}} else {{"
                yield from self.stmt(s.otherwise, depth + 1, in_parallel)
            yield f"{pad}}}"
        elif isinstance(s, LetStmt):
            yield f"{pad}{{ const {C_TYPES[s.var.dtype]} {self.names(s.var)} = {self.expr(s.value)};"
            yield from self.stmt(s.body, depth + 1, in_parallel)
            yield f"{pad}}}"
        elif isinstance(s, Intrinsic):
            yield from self.intrinsic(s, depth)
        else:
            raise CodegenError(f"the C backend cannot emit {type(s).__name__}")

    def loop(self, s: For, depth: int, in_parallel: bool) -> Iterator[str]:
        pad = "  " * depth
        v = self.names(s.var)
        self.ranges[s.var] = (0, s.extent - 1)
        header = f"{pad}for (int32_t {v} = 0; {v} < {s.extent}; ++{v}) {{"
        if s.kind is LoopKind.VECTORIZED:
            vec = self.vector_loop(s, depth)
            if vec is not None:
                yield from vec
                return
            guarded = self.guarded_vector_loop(s, depth)
            if guarded is not None:
                yield from guarded
                return
            yield f"{pad}#pragma omp simd"
            in_parallel = True  # no `omp parallel` may nest inside a simd loop: inner ones run serially
        elif s.kind is LoopKind.PARALLEL and not in_parallel:
            yield from self.parallel_loop(s, depth)
            return
        elif s.kind is LoopKind.UNROLLED:
            yield f"{pad}#pragma GCC unroll {min(s.extent, 64)}"
        elif s.kind is LoopKind.THREAD:
            raise CodegenError(f"loop {s.var.name!r} is bound to {s.thread_tag}: use the cuda target")
        yield header
        yield from self.stmt(s.body, depth + 1, in_parallel)
        yield f"{pad}}}"

    def parallel_loop(self, s: For, depth: int) -> Iterator[str]:
        """The loop's body outlined into a function of (context, begin, end) that the module's thread
        pool runs in chunks (see `pool`); the context struct carries the variables and buffers the
        body reads from outside the loop."""
        pad = "  " * depth
        name = f"{self.func_name}_par{len(self.outlined)}"
        self.outlined.append("")  # reserve the number: a parallel loop inside runs serially, no nesting
        captured = _free(s)
        fields = []
        for x in captured:
            c = self.names(x)
            if isinstance(x, Buffer):
                vt = self.vector_bufs.get(x)
                fields.append((f"{vt.name if vt else C_TYPES[x.dtype]}* {self.restrict}", c))
            else:
                fields.append((f"{C_TYPES[x.dtype]}", c))
        v = self.names(s.var)
        body = list(self.stmt(s.body, 2, in_parallel=True))
        lines = [f"struct {name}_ctx {{ {' '.join(f'{t} {c};' for t, c in fields) or 'char unused;'} }};",
                 f"static void {name}(void* ctx_, int32_t begin_, int32_t end_) {{",
                 f"  const struct {name}_ctx* ctx = (const struct {name}_ctx*)ctx_; (void)ctx;",
                 *(f"  {t} {c} = ctx->{c};" for t, c in fields),
                 f"  for (int32_t {v} = begin_; {v} < end_; ++{v}) {{", *body, "  }", "}"]
        self.outlined[-1] = "\n".join(lines) + "\n"
        init = ", ".join(c for _, c in fields) or "0"
        yield f"{pad}{{ const struct {name}_ctx ctx_ = {{{init}}};"
        yield f"{pad}  taso_parallel_for({s.extent}, {name}, (void*)&ctx_, {s.threads}); }}"

    def allocate(self, s: Allocate, depth: int, in_parallel: bool) -> Iterator[str]:
        pad = "  " * depth
        b = s.buffer
        name = self.names(b)
        ctype = C_TYPES[b.dtype]
        nbytes = b.size * np.dtype(b.dtype).itemsize
        vt = self.vector_bufs.get(b)
        if vt is not None:
            self.vec_types.add(vt)
            yield f"{pad}{vt.name} {name}[{b.size // vt.lanes}];"
            yield from self.stmt(s.body, depth, in_parallel)
        elif b.scope != "global" and nbytes <= SMALL_LOCAL:
            yield f"{pad}{ctype} {name}[{b.size}] __attribute__((aligned(64)));"
            yield from self.stmt(s.body, depth, in_parallel)
        else:
            size = -(-nbytes // 64) * 64
            yield f"{pad}{ctype}* {self.restrict} {name} = ({ctype}*)aligned_alloc(64, {size});"
            yield f"{pad}{{"
            yield from self.stmt(s.body, depth + 1, in_parallel)
            yield f"{pad}}}"
            yield f"{pad}free({name});"

    def intrinsic(self, s: Intrinsic, depth: int) -> Iterator[str]:
        from taso_py.codegen.backends.c.micro import intrinsic_call
        self.intrinsics.add(intrinsic_call(s)[0])
        yield "  " * depth + intrinsic_call(s, self.names, self.expr)[1]

    # ---- vector code -------------------------------------------------------------------------

    def vector_loop(self, s: For, depth: int) -> list[str] | None:
        """The loop as vector-extension statements, or None when an access is not contiguous."""
        stores = [x for x in (s.body.stmts if isinstance(s.body, Seq) else (s.body,))]
        if not _vector_lanes(s.extent) or not all(isinstance(x, Store) for x in stores):
            return None
        vt = None
        lanes = register_lanes(s.extent)
        for st in stores:
            assert isinstance(st, Store)
            if _stride(st.index, s.var) != 1 or st.buffer.dtype not in ("float32", "int32"):
                return None
            vt = VecType(lanes, st.buffer.dtype)
        if vt is None or any(x.dtype != vt.dtype for st in stores for x in walk(st.value)  # type: ignore[attr-defined]
                             if not _is_index(x)):
            return None
        out = []
        pad = "  " * depth
        for chunk in range(0, s.extent, lanes):  # one statement per register-wide piece of the loop
            shift = {s.var: s.var + chunk} if chunk else {}
            for st in stores:
                assert isinstance(st, Store)
                value = self.vexpr(substitute(st.value, shift), s.var, vt)
                if value is None:
                    return None
                out.append(f"{pad}{self.vstore(st.buffer, substitute(st.index, shift), s.var, vt)} = {value};")
        self.vec_types.add(vt)
        return out

    def guarded_vector_loop(self, s: For, depth: int) -> list[str] | None:
        """A vector loop under conditions linear in its variable (a split's tail guard, a padding's
        select): each holds for every lane when it holds for the first and the last, so that case
        runs as vector code (selects taking their first branch) and only the other falls back to
        a guarded `omp simd` loop. A body that calls a math function (no vector-extension form)
        runs that case as an unguarded `omp simd` loop: under a condition gcc calls the scalar
        function lane by lane (libmvec's variants are declared `notinbranch`), 17 expf a
        softmax row of ViT's instead of one 16-lane call and one scalar."""
        body, guard = s.body, None
        if isinstance(body, IfThenElse) and body.otherwise is None:
            guard, body = body.cond, body.then
        stores = list(body.stmts) if isinstance(body, Seq) else [body]
        if not all(isinstance(x, Store) for x in stores):
            return None
        conds = [] if guard is None else [guard]
        for st in stores:
            conds += [x.cond for x in walk(st.value) if isinstance(x, Select)  # type: ignore[union-attr]
                      and s.var in {v for v in walk(x.cond) if isinstance(v, Var)}]
        if not conds or not all(isinstance(c, Binary) and c.op in ("<", "<=") and _stride(c.a - c.b, s.var) is not None
                                for cond in conds for c in _conjuncts(cond)):
            return None

        def taken(e: Expr) -> Expr:
            if isinstance(e, Select) and s.var in {v for v in walk(e.cond) if isinstance(v, Var)}:
                return taken(e.t)
            return rebuild(e, taken)

        inside = [Store(st.buffer, st.index, taken(st.value)) for st in stores]  # type: ignore[union-attr]
        vec = self.vector_loop(For(s.var, s.extent, s.kind, seq(inside)), depth + 1)
        if vec is None:
            if not any(isinstance(x, Call) for st in inside for x in walk(st.value)):
                return None
            vec = [f"{'  ' * (depth + 1)}#pragma omp simd",
                   *self.loop(For(s.var, s.extent, LoopKind.SERIAL, seq(inside)), depth + 1, True)]
        ends = [simplify(substitute(all_of(*conds), {s.var: Const(v)}), self.ranges) for v in (0, s.extent - 1)]
        pad = "  " * depth
        fallback = list(self.loop(For(s.var, s.extent, LoopKind.SERIAL, s.body), depth + 1, True))
        return [f"{pad}if ({self.expr(ends[0])} && {self.expr(ends[1])}) {{", *vec, f"{pad}}} else {{",
                f"{pad}  #pragma omp simd", *fallback, f"{pad}}}"]

    def vptr(self, buf: Buffer, index: Expr, var: Var, vt: VecType) -> str:
        base = simplify(substitute(index, {var: Const(0)}), self.ranges)
        vb = self.vector_bufs.get(buf)
        if vb is not None:
            return f"{self.names(buf)}[{self.expr(simplify(base // vb.lanes, self.ranges))}]"
        return f"*({vt.unaligned}*)(&{self.names(buf)}[{self.expr(base)}])"

    vstore = vptr

    def vexpr(self, e: Expr, var: Var, vt: VecType) -> str | None:
        if var not in {x for x in walk(e) if isinstance(x, Var)}:
            # a broadcast: x - 0 is x for every float (even -0), so gcc folds it away; {} + x it cannot
            return f"(({self.expr(e)}) - ({vt.name}){{}})" if not _is_index(e) else None
        if isinstance(e, Load):
            return self.vptr(e.buffer, e.index, var, vt) if _stride(e.index, var) == 1 else None
        if isinstance(e, Binary) and e.op in ("+", "-", "*", "/"):
            a, b = self.vexpr(e.a, var, vt), self.vexpr(e.b, var, vt)
            return None if a is None or b is None else f"({a} {e.op} {b})"
        if isinstance(e, Binary) and e.op in ("min", "max"):
            a, b = self.vexpr(e.a, var, vt), self.vexpr(e.b, var, vt)
            if a is None or b is None:
                return None
            return f"v{e.op}_{vt.name}({a}, {b})"
        if isinstance(e, Select) and var not in {x for x in walk(e.cond) if isinstance(x, Var)}:
            a, b = self.vexpr(e.t, var, vt), self.vexpr(e.f, var, vt)  # one condition for every lane
            return None if a is None or b is None else f"({self.expr(e.cond)} ? {a} : {b})"
        return None

    def vec_typedef(self, v: VecType) -> str:
        c = C_TYPES[v.dtype]
        n = v.lanes * np.dtype(v.dtype).itemsize
        mask = f"v{v.lanes}_mask_{v.dtype}"
        itype = "int32_t" if np.dtype(v.dtype).itemsize == 4 else "int64_t"
        return (f"typedef {c} {v.name} __attribute__((vector_size({n})));\n"
                f"typedef {c} {v.unaligned} __attribute__((vector_size({n}), aligned({np.dtype(v.dtype).itemsize})));\n"
                f"typedef {itype} {mask} __attribute__((vector_size({n})));\n"
                + "".join(_vminmax(v, op, cmp, mask, n) for op, cmp in (("max", ">"), ("min", "<"))))

    # ---- expressions ---------------------------------------------------------------------------

    def expr(self, e: Expr) -> str:
        if isinstance(e, Const):
            return self.const(e)
        if isinstance(e, Var):
            return self.names(e)
        if isinstance(e, Load):
            if e.buffer in self.vector_bufs:
                raise _ScalarAccess(e.buffer)
            return f"{self.names(e.buffer)}[{self.expr(e.index)}]"
        if isinstance(e, Binary):
            a, b = self.expr(e.a), self.expr(e.b)
            if e.op in ("min", "max"):
                return f"{e.op.upper()}({a}, {b})"
            if e.op in ("//", "%"):
                if e.a.dtype in ("float32", "float64"):
                    return f"floorf({a} / {b})" if e.op == "//" else f"fmodf({a}, {b})"
                lo_a, _ = bounds(e.a, self.ranges)
                lo_b, _ = bounds(e.b, self.ranges)
                if lo_a >= 0 and lo_b > 0:
                    return f"({a} {'/' if e.op == '//' else '%'} {b})"
                return f"{'fdiv_i32' if e.op == '//' else 'fmod_i32'}({a}, {b})"
            return f"({a} {e.op} {b})"
        if isinstance(e, Not):
            return f"(!{self.expr(e.a)})"
        if isinstance(e, Select):
            return f"({self.expr(e.cond)} ? {self.expr(e.t)} : {self.expr(e.f)})"
        if isinstance(e, Cast):
            return f"(({C_TYPES[e.dtype]})({self.expr(e.value)}))"
        if isinstance(e, Call):
            return self.call(e)
        raise CodegenError(f"the C backend cannot emit expression {type(e).__name__}")

    def const(self, e: Const) -> str:
        if e.dtype == "bool":
            return "true" if e.value else "false"
        if e.dtype in ("float32", "float64"):
            v = float(e.value)
            suffix = "f" if e.dtype == "float32" else ""
            if math.isinf(v):
                return f"({'-' if v < 0 else ''}INFINITY)"
            return f"{v!r}{suffix}"
        if e.dtype == "int64":
            return f"{int(e.value)}LL"
        return str(int(e.value))

    def call(self, e: Call) -> str:
        return self.spelling(SCALAR_INTRINSICS[e.name], e.dtype).format(", ".join(self.expr(a) for a in e.args))

    def spelling(self, f: ScalarIntrinsic, dtype: str) -> str:
        """How this backend writes intrinsic `f` on `dtype` (see te.intrinsics)."""
        return f.c_float if dtype == "float32" else f.c_double


def _free(s: Stmt) -> list[Var | Buffer]:
    """The variables and buffers `s` uses that are bound outside it, in order of first use."""
    bound: set[object] = set()
    used: dict[object, None] = {}

    def exprs(e: Expr) -> None:
        for x in walk(e):
            if isinstance(x, Var):
                used.setdefault(x)
            elif isinstance(x, Load):
                used.setdefault(x.buffer)

    for x in walk_stmts(s):
        if isinstance(x, For):
            bound.add(x.var)
        elif isinstance(x, LetStmt):
            bound.add(x.var)
            exprs(x.value)
        elif isinstance(x, Allocate):
            bound.add(x.buffer)
        elif isinstance(x, Store):
            used.setdefault(x.buffer)
            exprs(x.index)
            exprs(x.value)
        elif isinstance(x, IfThenElse):
            exprs(x.cond)
        elif isinstance(x, Intrinsic):
            for r in x.regions:
                used.setdefault(r.buffer)
                exprs(r.offset)
    return [x for x in used if x not in bound]  # type: ignore[misc]


def _conjuncts(e: Expr) -> list[Expr]:
    if isinstance(e, Binary) and e.op == "&&":
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def _is_index(e: Expr) -> bool:
    return e.dtype in ("int32", "int64", "bool") and not isinstance(e, Load)


def _stride(index: Expr, var: Var) -> int | None:
    """The coefficient of `var` in a linear index, None when it is not linear in it."""
    lin = linear(simplify(index))
    for atom in lin.terms:
        if atom is not var and var in {x for x in walk(atom) if isinstance(x, Var)}:
            return None
    return lin.terms.get(var, 0)


def _vector_buffers(body: Stmt) -> dict[Buffer, VecType]:
    """Local buffers whose every access is a whole, aligned vector of one vectorized loop."""
    tiles = {r.buffer for s in walk_stmts(body) if isinstance(s, Intrinsic) for r in s.regions}  # passed as float*
    local = {s.buffer for s in walk_stmts(body) if isinstance(s, Allocate) and s.buffer.scope == "local"
             and s.buffer.size * np.dtype(s.buffer.dtype).itemsize <= SMALL_LOCAL and s.buffer not in tiles}
    lanes: dict[Buffer, set[int]] = {b: set() for b in local}
    ok = dict.fromkeys(local, True)

    def visit(s: Stmt, vloop: For | None) -> None:
        if isinstance(s, For):
            inner = s if s.kind is LoopKind.VECTORIZED else None
            if vloop is not None:
                inner = None
            visit(s.body, inner or vloop)
            return
        if isinstance(s, (Store, IfThenElse)):
            exprs = [s.index, s.value] if isinstance(s, Store) else [s.cond]
            accesses = [(s.buffer, s.index)] if isinstance(s, Store) else []
            for e in exprs:
                accesses += [(x.buffer, x.index) for x in walk(e) if isinstance(x, Load)]
            for buf, idx in accesses:
                if buf not in ok:
                    continue
                if vloop is None or isinstance(s, IfThenElse) or _stride(idx, vloop.var) != 1 \
                        or not _aligned(idx, vloop):
                    ok[buf] = False
                else:
                    lanes[buf].add(register_lanes(vloop.extent))
        for child in (s.stmts if isinstance(s, Seq) else
                      (s.body,) if isinstance(s, (Allocate, LetStmt)) else
                      (s.then,) + ((s.otherwise,) if s.otherwise else ()) if isinstance(s, IfThenElse) else ()):
            visit(child, vloop)

    visit(body, None)
    return {b: VecType(next(iter(lanes[b])), b.dtype) for b in local
            if ok[b] and len(lanes[b]) == 1 and _vector_lanes(next(iter(lanes[b])))
            and b.size % next(iter(lanes[b])) == 0 and b.dtype == "float32"}


def _vminmax(v: VecType, op: str, cmp: str, mask: str, size: int) -> str:
    """`vmax_T(a, b)` = a > b ? a : b per lane (and vmin), which is what x86's maxps/minps compute.
    The generic form (a compare mask) is right everywhere, but for a vector wider than the CPU's
    (16 floats without AVX-512) gcc lowers the mask piece by piece to scalar compares and branches
    (SqueezeNet's max pools ran at 0.3 GFLOP/s on an AVX2 core); there float32 vectors use maxps
    on as many registers as the vector needs."""
    generic = f"{mask} m = a {cmp} b; return ({v.name})((m & ({mask})a) | (~m & ({mask})b));"
    if v.dtype != "float32" or size < 32 or size % 16:
        return f"static inline {v.name} v{op}_{v.name}({v.name} a, {v.name} b) {{ {generic} }}\n"
    forms = [("__AVX__", 32, f"__builtin_ia32_{op}ps256"), ("__SSE__", 16, f"__builtin_ia32_{op}ps")]
    body = "".join(
        f"\n#elif defined({guard})\n  typedef float h{width}_t __attribute__((vector_size({width}))); "
        f"h{width}_t x[{size // width}], y[{size // width}];\n"
        f"  __builtin_memcpy(x, &a, {size}); __builtin_memcpy(y, &b, {size});\n"
        f"  for (int i = 0; i < {size // width}; ++i) x[i] = {call}(x[i], y[i]);\n"
        f"  __builtin_memcpy(&a, x, {size}); return a;"
        for guard, width, call in forms if size % width == 0)
    return (f"static inline {v.name} v{op}_{v.name}({v.name} a, {v.name} b) {{\n"
            f"#if defined(__AVX512F__) || !defined(__x86_64__)\n  {generic}{body}\n#else\n  {generic}\n#endif\n}}\n")


def register_lanes(extent: int) -> int:
    """Lanes of the vectors a vectorized loop of `extent` is written with: the whole loop, or the
    host's register width when the loop is a multiple of it. GCC splits a vector type wider than
    the CPU's registers, but not well: a 16-float store of a constant became 16 scalar stores on
    an AVX2 core, a max went through the stack."""
    native = isa.host().lanes
    return native if extent > native and extent % native == 0 else extent


def _vector_lanes(n: int) -> bool:
    """GCC vector types need a power-of-two number of lanes; other widths are left to `omp simd`."""
    return n >= 2 and n & (n - 1) == 0


def _aligned(index: Expr, vloop: For) -> bool:
    lin = linear(simplify(index))
    return lin.constant % vloop.extent == 0 and all(
        c % vloop.extent == 0 for a, c in lin.terms.items() if a is not vloop.var)
