"""Rule terms as Z3 terms over one uninterpreted sort of tensors, with their shapes.

Every tensor is a value of the sort `T`. Each operator, at a given arity (and length of its
list attributes, and output index) is an uninterpreted function from its attribute parameters
and tensor arguments to `T`. Shapes live in three functions: `rank(t)`, `dim(t, k)` (left
aligned, as `x.shape[k]`) and `ok(t)`, whether the term is defined at all.

The intended model is strict: an ill-shaped application is an error value ⊥ and ⊥ propagates,
so `ok` is false exactly on ⊥. The shape axiom of each function symbol is generated from the
operator's `sym_shape` (one case per combination of input ranks 1..4), so the verifier and the
matcher read the same shape rule.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from types import SimpleNamespace
from typing import Any

import z3

from taso_py import ops
from taso_py.errors import InputError
from taso_py.library.syntax import format_cond
from taso_py.library.terms import (
    Apply,
    AttrVar,
    BinOp,
    Call,
    Cond,
    Dim,
    Expr,
    Lit,
    Pick,
    Rank,
    Rule,
    Seq,
    Term,
    Var,
    walk,
    walk_expr,
)
from taso_py.ops.schema import OpDef

MAX_RANK = 4  # the verifier's model covers tensors of rank 1..4

T = z3.DeclareSort("T")
RANK = z3.Function("rank", T, z3.IntSort())
DIM = z3.Function("dim", T, z3.IntSort(), z3.IntSort())
OK = z3.Function("ok", T, z3.BoolSort())


class Z3Arith:
    """ops.symbolic.Arith over Z3 integers (plain ints stay plain where both sides are)."""

    def ite(self, c: Any, a: Any, b: Any) -> Any:
        if isinstance(c, bool):
            return a if c else b
        return z3.If(c, a, b)

    def all(self, *cs: Any) -> Any:
        return z3.And(*cs) if cs else True

    def any(self, *cs: Any) -> Any:
        return z3.Or(*cs) if cs else False

    def not_(self, c: Any) -> Any:
        return (not c) if isinstance(c, bool) else z3.Not(c)

    def div(self, a: Any, b: Any) -> Any:
        return a // b if isinstance(a, int) and isinstance(b, int) else a / b

    def mod(self, a: Any, b: Any) -> Any:
        return a % b


Z3A = Z3Arith()


# ---- attribute parameters -----------------------------------------------------------------

@dataclass(frozen=True)
class Field:
    """How one attribute becomes Z3 parameters: `count` values of `kind` (int/real/bool/str)."""

    name: str
    kind: str
    count: int | None  # None: a list of any length (perm, sizes, shape, pads)


_KINDS = {"int": "int", "float": "real", "bool": "bool", "str": "str"}


def fields(op: OpDef) -> tuple[Field, ...]:
    out = []
    for f in dataclasses.fields(op.attrs):
        t = str(f.type).replace(" ", "")
        if t in _KINDS:
            out.append(Field(f.name, _KINDS[t], 1))
        elif t == "tuple[int,...]":
            out.append(Field(f.name, "int", None))
        elif t.startswith("tuple[int,") and set(t[6:-1].split(",")) == {"int"}:
            out.append(Field(f.name, "int", len(t[6:-1].split(","))))
        else:
            raise InputError(f"{op.name}: attribute {f.name} of type {t} is outside the verifier's model")
    return tuple(out)


def sort_of(kind: str) -> z3.SortRef:
    return {"int": z3.IntSort(), "real": z3.RealSort(), "bool": z3.BoolSort(), "str": z3.StringSort()}[kind]


def literal(kind: str, value: Any) -> z3.ExprRef:
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(f"expected an integer, got {value!r}")
        return z3.IntVal(value)
    if kind == "real":
        if isinstance(value, (bool, str)):
            raise InputError(f"expected a number, got {value!r}")
        q = Fraction(value)
        return z3.RealVal(q.numerator) / q.denominator if q.denominator != 1 else z3.RealVal(q.numerator)
    if kind == "bool":
        if not isinstance(value, bool):
            raise InputError(f"expected true or false, got {value!r}")
        return z3.BoolVal(value)
    if not isinstance(value, str):
        raise InputError(f"expected a name, got {value!r}")
    return z3.StringVal(value)


@dataclass(frozen=True)
class Symbol:
    """One Z3 function: an operator at a tensor arity, list-attribute lengths and output index."""

    op: str
    arity: int
    lengths: tuple[int, ...]  # of the variable-length list attributes, in field order
    output: int | None  # None: the operator's only output

    @property
    def opdef(self) -> OpDef:
        return ops.get(self.op)

    def layout(self) -> list[tuple[Field, int]]:
        """(field, length) per attribute, lengths of list attributes filled in."""
        lengths = iter(self.lengths)
        return [(f, f.count if f.count is not None else next(lengths)) for f in fields(self.opdef)]

    def param_sorts(self) -> list[z3.SortRef]:
        return [sort_of(f.kind) for f, n in self.layout() for _ in range(n)]

    def function(self) -> z3.FuncDeclRef:
        lens = "".join(f"_{n}" for n in self.lengths)
        out = "" if self.output is None else f"#{self.output}"
        return z3.Function(f"{self.op}/{self.arity}{lens}{out}", *self.param_sorts(), *([T] * self.arity), T)

    def attrs(self, params: Sequence[Any]) -> Any:
        """The flat parameter list as an attribute object for `sym_shape` (lists as tuples)."""
        it = iter(params)
        values = {}
        for f, n in self.layout():
            items = tuple(next(it) for _ in range(n))
            values[f.name] = items if (f.count is None or f.count > 1) else items[0]
        return SimpleNamespace(**values)


def shape_fact(sym: Symbol, params: Sequence[Any], args: Sequence[z3.ExprRef], term: z3.ExprRef) -> z3.BoolRef:
    """What `sym_shape` says about `term = f(params, args)`: when it is defined, its rank and dims."""
    opdef = sym.opdef
    attrs = sym.attrs(params)
    cases, facts = [], []
    for ranks in itertools.product(range(1, MAX_RANK + 1), repeat=len(args)):
        shapes = [tuple(DIM(a, k) for k in range(r)) for a, r in zip(args, ranks)]
        result = opdef.sym_shape(shapes, attrs, Z3A)
        if result is None:
            continue
        outs, conds = result
        if sym.output is None and len(outs) != 1:
            raise InputError(f"{sym.op} has {len(outs)} outputs: pick one with [i]")
        if sym.output is not None and not 0 <= sym.output < len(outs):
            raise InputError(f"{sym.op} has no output {sym.output}")
        out = outs[sym.output or 0]
        case = z3.And(*(RANK(a) == r for a, r in zip(args, ranks)))
        cases.append(case)
        if len(out) > MAX_RANK:
            facts.append(z3.Implies(case, z3.Not(OK(term))))
            continue
        defined = z3.And(*(OK(a) for a in args), *conds, *(d >= 1 for d in out))
        facts.append(z3.Implies(case, OK(term) == defined))
        facts.append(z3.Implies(z3.And(case, OK(term)),
                                z3.And(RANK(term) == len(out), *(DIM(term, k) == d for k, d in enumerate(out)))))
    facts.append(z3.Implies(z3.Not(z3.Or(*cases)) if cases else z3.BoolVal(True), z3.Not(OK(term))))
    return z3.And(*facts)


@functools.cache
def shape_axiom(sym: Symbol) -> z3.BoolRef:
    """`shape_fact` for every application of `sym`, as a quantified formula."""
    params = [z3.Const(f"p{i}", s) for i, s in enumerate(sym.param_sorts())]
    args = [z3.Const(f"t{i}", T) for i in range(sym.arity)]
    term = sym.function()(*params, *args)
    return z3.ForAll([*params, *args], shape_fact(sym, params, args, term), patterns=[term])


def tensor_facts(x: z3.ExprRef) -> z3.BoolRef:
    """A tensor variable is defined, of rank 1..4, with positive dims."""
    return z3.And(OK(x), RANK(x) >= 1, RANK(x) <= MAX_RANK,
                  *(z3.Implies(k < RANK(x), DIM(x, k) >= 1) for k in range(MAX_RANK)))


# ---- terms ---------------------------------------------------------------------------------

@dataclass
class Env:
    """Z3 values of a rule's tensor variables and attribute variables."""

    tensors: dict[str, z3.ExprRef]
    attrs: dict[str, z3.ExprRef]


def attr_var_kinds(terms: Sequence[Term], conds: Sequence[Cond] = ()) -> dict[str, str]:
    """The Z3 kind of each attribute variable, from the attribute it stands for (int otherwise)."""
    kinds: dict[str, str] = {}
    for t in terms:
        for sub in walk(t):
            if isinstance(sub, Apply):
                by_name = {f.name: f for f in fields(ops.get(sub.op))}
                for name, value in sub.attrs:
                    f = by_name.get(name)
                    items = value.items if isinstance(value, Seq) else (value,)
                    for item in items:
                        if isinstance(item, AttrVar) and f is not None:
                            kinds.setdefault(item.name, f.kind)
    for expr in _exprs(terms, conds):
        for v in attr_vars(expr):
            kinds.setdefault(v, "int")
    return kinds


def _exprs(terms: Sequence[Term], conds: Sequence[Cond]) -> Iterator[Expr]:
    for t in terms:
        for sub in walk(t):
            if isinstance(sub, Apply):
                yield from (v for _, v in sub.attrs)
    for c in conds:
        yield c.left
        yield c.right


def attr_vars(e: Expr) -> Iterator[str]:
    return (sub.name for sub in walk_expr(e) if isinstance(sub, AttrVar))


def expr(e: Expr, env: Env, kind: str = "int") -> Any:
    """A Z3 value of an attribute expression; `kind` types the literals."""
    if isinstance(e, Lit):
        return literal(kind, float(e.value) if kind == "real" and isinstance(e.value, int) else e.value)
    if isinstance(e, AttrVar):
        return env.attrs[e.name]
    if isinstance(e, Rank):
        return RANK(_tensor(e.var, env))
    if isinstance(e, Dim):
        x = _tensor(e.var, env)
        axis = expr(e.axis, env)
        if isinstance(e.axis, Lit) and isinstance(e.axis.value, int) and e.axis.value < 0:
            axis = RANK(x) + e.axis.value
        return DIM(x, axis)
    if isinstance(e, BinOp):
        a, b = expr(e.left, env, kind), expr(e.right, env, kind)
        return {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
                "//": lambda: a / b, "%": lambda: a % b}[e.op]()
    if isinstance(e, Call):
        values = [expr(a, env, kind) for a in e.args]
        out = values[0]
        for v in values[1:]:
            out = z3.If(v > out, v, out) if e.fn == "max" else z3.If(v < out, v, out)
        return out
    raise InputError(f"a list is not allowed here: {e}")


def condition(c: Cond, env: Env) -> z3.BoolRef:
    a, b = expr(c.left, env), expr(c.right, env)
    return {"==": a == b, "!=": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[c.op]


def _tensor(name: str, env: Env) -> z3.ExprRef:
    try:
        return env.tensors[name]
    except KeyError:
        raise InputError(f"unknown tensor variable {name!r}") from None


@dataclass
class Encoded:
    """A term as Z3: the application, its symbol, parameters and arguments (for shape facts)."""

    term: z3.ExprRef
    symbol: Symbol | None  # None for a tensor variable
    params: list[Any]
    args: list[z3.ExprRef]


class Encoder:
    """Builds Z3 terms for rule terms and remembers every function symbol it used."""

    def __init__(self) -> None:
        self.symbols: set[Symbol] = set()
        self.applications: list[Encoded] = []

    def term(self, t: Term, env: Env) -> z3.ExprRef:
        if isinstance(t, Var):
            return _tensor(t.name, env)
        if isinstance(t, Pick):
            if not isinstance(t.term, Apply):
                raise InputError("[i] picks an output of an operator application")
            return self._apply(t.term, env, t.index)
        return self._apply(t, env, None)

    def _apply(self, t: Apply, env: Env, output: int | None) -> z3.ExprRef:
        opdef = ops.get(t.op)
        if not opdef.algebra or not opdef.verifiable:
            raise InputError(f"operator {t.op} is outside the verifier's model")
        args = [self.term(a, env) for a in t.args]
        if opdef.variadic and len(args) > 2:  # a variadic join nests: concat(a, b, c) = concat(concat(a, b), c)
            inner = Apply(t.op, t.args[:-1], t.attrs)
            args = [self._apply(inner, env, output), args[-1]]
        opdef.check_arity(len(args))
        params, lengths = self._params(t, opdef, env, args)
        sym = Symbol(t.op, len(args), tuple(lengths), output)
        self.symbols.add(sym)
        term = sym.function()(*params, *args)
        self.applications.append(Encoded(term, sym, params, args))
        return term

    def _params(self, t: Apply, opdef: OpDef, env: Env, args: list) -> tuple[list, list[int]]:
        given = dict(t.attrs)
        _check_literal_attrs(opdef, given)
        defaults = {f.name: f.default for f in dataclasses.fields(opdef.attrs)}
        params, lengths = [], []
        for f in fields(opdef):
            if f.name in given:
                value = given[f.name]
                items = list(value.items) if isinstance(value, Seq) else [value]
                if f.count is not None and f.count > 1 and len(items) == 1:
                    items = items * f.count  # stride=2 means (2, 2), as in the operator table
                encoded = [expr(i, env, f.kind) for i in items]
            elif defaults[f.name] is not dataclasses.MISSING:
                d = defaults[f.name]
                encoded = [literal(f.kind, v) for v in (d if isinstance(d, tuple) else (d,))]
            else:
                raise InputError(f"{t.op} needs the attribute {f.name}")
            if f.count is None:
                lengths.append(len(encoded))
            elif len(encoded) != f.count:
                raise InputError(f"{t.op}: {f.name} needs {f.count} values, got {len(encoded)}")
            if f.name == "axis":  # a negative axis counts from the back of the first input
                encoded = [_positive_axis(v, given.get("axis"), args) for v in encoded]
            params.extend(encoded)
        return params, lengths


def _check_literal_attrs(opdef: OpDef, given: dict[str, Expr]) -> None:
    """Attributes written as plain values must be ones the operator accepts (act=relu, not act=foo)."""
    def plain(e: Expr) -> bool:
        return isinstance(e, Lit) or (isinstance(e, Seq) and all(isinstance(i, Lit) for i in e.items))

    if all(plain(e) for e in given.values()) and all(
            f.name in given or f.default is not dataclasses.MISSING for f in dataclasses.fields(opdef.attrs)):
        opdef.make_attrs(**{name: e.value if isinstance(e, Lit) else tuple(i.value for i in e.items)
                            for name, e in given.items()})


def _positive_axis(value: Any, written: Expr | None, args: list) -> Any:
    if isinstance(written, Lit) and isinstance(written.value, int) and written.value < 0 and args:
        return RANK(args[0]) + written.value
    return value


@dataclass
class EncodedRule:
    """A rule as Z3 terms with the hypotheses under which its two sides must be equal."""

    env: Env
    encoder: Encoder
    src: list[z3.ExprRef]
    dst: list[z3.ExprRef]
    hypotheses: list[z3.BoolRef]  # variables are tensors; both sides defined, with equal shapes
    preconditions: list[tuple[str, z3.BoolRef]]  # the rule's `where` clause, by text

    def shape_solver(self, *extra: z3.BoolRef) -> z3.Solver:
        """A solver over the shape constraints alone: its models are shapes the rule speaks about."""
        solver = z3.Solver()
        solver.set("timeout", 5000)
        solver.add(*self.hypotheses, *self.ground_shape_facts(), *(f for _, f in self.preconditions), *extra)
        return solver

    def ground_shape_facts(self) -> list[z3.BoolRef]:
        """The shape facts of every application in the rule (quantifier-free)."""
        seen, facts = set(), []
        for app in self.encoder.applications:
            if app.term.get_id() not in seen:
                seen.add(app.term.get_id())
                facts.append(shape_fact(app.symbol, app.params, app.args, app.term))
        return facts


def encode_rule(rule: Rule, *, equal_shapes: bool = True) -> EncodedRule:
    """`equal_shapes=False` drops the hypothesis that the sides' shapes agree (validation checks it)."""
    kinds = attr_var_kinds((*rule.src, *rule.dst), rule.where)
    env = Env({v: z3.Const(v, T) for v in rule.variables()},
              {v: z3.Const(f"?{v}", sort_of(k)) for v, k in kinds.items()})
    enc = Encoder()
    src = [enc.term(t, env) for t in rule.src]
    dst = [enc.term(t, env) for t in rule.dst]
    hyps = [tensor_facts(x) for x in env.tensors.values()]
    for s, d in zip(src, dst):
        hyps += [OK(s), OK(d)]
        if equal_shapes:
            hyps += [RANK(s) == RANK(d), *(z3.Implies(k < RANK(s), DIM(s, k) == DIM(d, k)) for k in range(MAX_RANK))]
    pre = [(format_cond(c), condition(c, env)) for c in rule.where]
    return EncodedRule(env, enc, src, dst, hyps, pre)
