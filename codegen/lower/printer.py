"""Readable text of expressions and lowered kernels (what `taso compile --print-ir` shows)."""

from __future__ import annotations

from taso_py.codegen.lower.ir import Allocate, Buffer, For, IfThenElse, Intrinsic, LetStmt, PrimFunc, Seq, Stmt, Store
from taso_py.codegen.schedule.schedule import LoopKind
from taso_py.codegen.te.expr import Binary, Call, Cast, Const, Expr, Load, Not, Select, Var


class Names:
    """Unique printable names for variables and buffers (stages may reuse axis names like `i`)."""

    def __init__(self, sanitize: bool = False) -> None:
        self.sanitize = sanitize
        self.table: dict[int, str] = {}
        self.used: set[str] = set()

    def __call__(self, obj: Var | Buffer) -> str:
        key = id(obj)
        if key not in self.table:
            base = obj.name
            if self.sanitize:
                base = "".join(ch if ch.isalnum() else "_" for ch in base)
                base = base if base and not base[0].isdigit() else f"v_{base}"
            name, k = base, 1
            while name in self.used:
                name, k = f"{base}_{k}", k + 1
            self.used.add(name)
            self.table[key] = name
        return self.table[key]


_PREC = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 4, "<=": 4, "+": 5, "-": 5, "*": 6, "/": 6, "//": 6, "%": 6}


def expr_str(e: Expr, outer: int = 0, names: Names | None = None) -> str:
    names = names or Names()

    def sub(x: Expr, o: int = 0) -> str:
        return expr_str(x, o, names)

    if isinstance(e, Const):
        return repr(e.value) if not isinstance(e.value, bool) else str(e.value).lower()
    if isinstance(e, Var):
        return names(e)
    if isinstance(e, Binary):
        if e.op in ("min", "max"):
            return f"{e.op}({sub(e.a)}, {sub(e.b)})"
        p = _PREC[e.op]
        text = f"{sub(e.a, p)} {e.op} {sub(e.b, p + 1)}"
        return f"({text})" if p < outer else text
    if isinstance(e, Not):
        return f"!{sub(e.a, 9)}"
    if isinstance(e, Select):
        return f"select({sub(e.cond)}, {sub(e.t)}, {sub(e.f)})"
    if isinstance(e, Cast):
        return f"{e.dtype}({sub(e.value)})"
    if isinstance(e, Call):
        return f"{e.name}({', '.join(sub(a) for a in e.args)})"
    if isinstance(e, Load):
        return f"{names(e.buffer)}[{sub(e.index)}]"
    indices = getattr(e, "indices", None)
    if indices is not None:  # a tensor read
        return f"{e.tensor.name}[{', '.join(sub(i) for i in indices)}]"  # type: ignore[attr-defined]
    if hasattr(e, "combiner"):
        axes = ", ".join(a.name for a in e.axes)  # type: ignore[attr-defined]
        return f"{e.combiner}({sub(e.source)}, axis=[{axes}])"  # type: ignore[attr-defined]
    return type(e).__name__


def stmt_str(s: Stmt, indent: int = 0, names: Names | None = None) -> str:
    names = names or Names()

    def ex(e: Expr) -> str:
        return expr_str(e, 0, names)

    pad = "  " * indent
    if isinstance(s, For):
        kind = "" if s.kind is LoopKind.SERIAL else f" {s.kind.value}" + (f"({s.threads})" if s.threads else "")
        tag = f" ({s.thread_tag})" if s.thread_tag else ""
        return f"{pad}for{kind} {names(s.var)} in 0..{s.extent}{tag}:\n{stmt_str(s.body, indent + 1, names)}"
    if isinstance(s, Allocate):
        b = s.buffer
        return (f"{pad}allocate {names(b)}[{' x '.join(map(str, b.shape))}] {b.dtype} in {b.scope}\n"
                f"{stmt_str(s.body, indent, names)}")
    if isinstance(s, Store):
        return f"{pad}{names(s.buffer)}[{ex(s.index)}] = {ex(s.value)}"
    if isinstance(s, IfThenElse):
        text = f"{pad}if {ex(s.cond)}:\n{stmt_str(s.then, indent + 1, names)}"
        return text + (f"\n{pad}else:\n{stmt_str(s.otherwise, indent + 1, names)}" if s.otherwise else "")
    if isinstance(s, Seq):
        return "\n".join(stmt_str(x, indent, names) for x in s.stmts)
    if isinstance(s, LetStmt):
        return f"{pad}let {names(s.var)} = {ex(s.value)}\n{stmt_str(s.body, indent, names)}"
    if isinstance(s, Intrinsic):
        regs = ", ".join(f"{names(r.buffer)}[{ex(r.offset)}, steps={r.loop_strides}]"
                         for r in s.regions)
        params = "".join(f", {k}={v}" for k, v in s.params.items())
        return f"{pad}{s.name}({regs}{params})"
    return f"{pad}{type(s).__name__}"


def func_str(f: PrimFunc) -> str:
    names = Names()
    params = ", ".join(f"{names(b)}: {b.dtype}[{', '.join(map(str, b.shape))}]" for b in f.params)
    return f"def {f.name}({params}):\n{stmt_str(f.body, 1, names)}"
