"""Rule terms on concrete shapes: attribute values, model-defined shapes, values.

The refuter evaluates both sides of a rule with the numpy reference semantics; axiom validation
evaluates them with `sym_value` over Z3 reals. Both first ask the operator's shape model
(`sym_shape`) whether a term is defined, and cross-check it against the real shape rule: where
the model accepts, the real operator must accept and agree on the shape.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from taso_py import ops
from taso_py.errors import AttrError, InputError, ShapeError
from taso_py.library.terms import Apply, AttrVar, BinOp, Call, Dim, Expr, Lit, Pick, Rank, Seq, Term, Var
from taso_py.ops.symbolic import ScalarDomain, concrete_shapes
from taso_py.types import DType, TensorType

_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv, "%": operator.mod}


class Undefined(Exception):
    """A term is not defined on these shapes (⊥ in the strict model)."""


class ModelMismatch(Exception):
    """The shape model accepts what the real shape rule rejects, or disagrees on a shape: a bug."""


@dataclass
class Instance:
    """Concrete shapes of a rule's tensor variables and values of its attribute variables."""

    shapes: Mapping[str, tuple[int, ...]]
    attrs: Mapping[str, Any]

    def describe(self) -> str:
        parts = [f"{v}: {list(s)}" for v, s in self.shapes.items()]
        parts += [f"?{v} = {a!r}" for v, a in self.attrs.items()]
        return ", ".join(parts)


def value(e: Expr, inst: Instance) -> Any:
    """An attribute expression's value on an instance; Undefined for an axis out of range."""
    if isinstance(e, Lit):
        return e.value
    if isinstance(e, AttrVar):
        return inst.attrs[e.name]
    if isinstance(e, Rank):
        return len(inst.shapes[e.var])
    if isinstance(e, Dim):
        shape, axis = inst.shapes[e.var], value(e.axis, inst)
        if not -len(shape) <= axis < len(shape):
            raise Undefined(f"dim({e.var}, {axis}) of a rank-{len(shape)} tensor")
        return shape[axis]
    if isinstance(e, BinOp):
        a, b = value(e.left, inst), value(e.right, inst)
        if e.op in ("//", "%") and b == 0:
            raise Undefined("division by zero in an attribute")
        return _ARITH[e.op](a, b)
    if isinstance(e, Call):
        values = [value(a, inst) for a in e.args]
        return max(values) if e.fn == "max" else min(values)
    if isinstance(e, Seq):
        return tuple(value(i, inst) for i in e.items)
    raise InputError(f"cannot evaluate {e}")


def attributes(t: Apply, inst: Instance, in_shapes: Sequence[tuple[int, ...]]) -> Any:
    """The operator's attribute object, canonical for these input shapes; Undefined if invalid."""
    op = ops.get(t.op)
    try:
        attrs = op.make_attrs(**{name: value(e, inst) for name, e in t.attrs})
        return op.canonical(attrs, [TensorType(s, DType.FLOAT64) for s in in_shapes])
    except (AttrError, ShapeError) as e:
        raise Undefined(str(e)) from None


def shape_of(op_name: str, in_shapes: Sequence[tuple[int, ...]], attrs: Any) -> tuple[tuple[int, ...], ...]:
    """Output shapes by the model, checked against the real shape rule."""
    op = ops.get(op_name)
    outs = concrete_shapes(op.sym_shape, in_shapes, attrs) if op.sym_shape else None
    if outs is None:
        raise Undefined(f"{op_name} is not defined on {[list(s) for s in in_shapes]}")
    try:
        real = op.infer([TensorType(s, DType.FLOAT64) for s in in_shapes], attrs)
    except ShapeError as e:
        raise ModelMismatch(f"{op_name}: the model accepts {in_shapes} but the operator says: {e}") from None
    if tuple(t.known_shape for t in real) != outs:
        raise ModelMismatch(f"{op_name}: the model gives {outs}, the operator {[t.known_shape for t in real]}")
    return outs


Apply_fn = Callable[[str, Sequence[Any], Any], tuple[Any, ...]]


def evaluate(t: Term, inst: Instance, inputs: Mapping[str, Any], run: Apply_fn, memo: dict | None = None) -> Any:
    """The value of `t`: `run(op, values, attrs)` computes one operator; Undefined where ⊥."""
    memo = {} if memo is None else memo  # terms are values: equal subterms are computed once
    if t in memo:
        return memo[t]
    if isinstance(t, Var):
        out = inputs[t.name]
    elif isinstance(t, Pick):
        out = _apply(t.term, inst, inputs, run, memo)[t.index]  # type: ignore[arg-type]
    else:
        outs = _apply(t, inst, inputs, run, memo)
        if len(outs) != 1:
            raise InputError(f"{t.op} has {len(outs)} outputs: pick one with [i]")
        out = outs[0]
    memo[t] = out
    return out


def _apply(t: Apply, inst: Instance, inputs: Mapping[str, Any], run: Apply_fn, memo: dict) -> tuple:
    """All outputs of one application, computed once however many of them are picked."""
    key = ("outputs", t)
    if key not in memo:
        args = [evaluate(a, inst, inputs, run, memo) for a in t.args]
        shapes = [tuple(np.shape(a)) for a in args]
        attrs = attributes(t, inst, shapes)
        shape_of(t.op, shapes, attrs)
        memo[key] = run(t.op, args, attrs)
    return memo[key]


def numeric(op: str, args: Sequence[np.ndarray], attrs: Any) -> tuple[np.ndarray, ...]:
    """One operator with its numpy reference (the real semantics)."""
    return ops.get(op).evaluate(args, attrs)


def symbolic(domain: ScalarDomain) -> Apply_fn:
    """One operator with its semantics over object arrays of `domain` scalars."""
    return lambda op, args, attrs: ops.get(op).sym_value(args, attrs, domain)
