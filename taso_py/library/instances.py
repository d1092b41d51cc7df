"""Rule terms on concrete shapes: the values of attribute expressions and attribute objects.

The verifier's refuter and axiom validation, the generator's second test and the optimizer's
matcher all evaluate `dim(b, 1)`, `?s` and friends on concrete shapes; this is the one place
that does it.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from taso_py import ops
from taso_py.errors import AttrError, InputError, ShapeError
from taso_py.library.terms import Apply, AttrVar, BinOp, Call, Cond, Dim, Expr, Lit, Rank, Seq
from taso_py.types import DType, TensorType

_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv, "%": operator.mod}


class Undefined(Exception):
    """A term is not defined on these shapes (⊥ in the strict model)."""


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


_COMPARE = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
            ">=": operator.ge}


def holds(c: Cond, inst: Instance) -> bool:
    """Whether a `where` condition holds on an instance."""
    return bool(_COMPARE[c.op](value(c.left, inst), value(c.right, inst)))
