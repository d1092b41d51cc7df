"""Rule terms on concrete shapes: attribute values, model-defined shapes, values.

The refuter evaluates both sides of a rule with the numpy reference semantics; axiom validation
evaluates them with `sym_value` over Z3 reals. Both first ask the operator's shape model
(`sym_shape`) whether a term is defined, and cross-check it against the real shape rule: where
the model accepts, the real operator must accept and agree on the shape.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from taso_py import ops
from taso_py.errors import InputError, ShapeError
from taso_py.library.instances import Instance, Undefined, attributes
from taso_py.library.terms import Apply, Pick, Term, Var
from taso_py.ops.symbolic import ScalarDomain, concrete_shapes
from taso_py.types import DType, TensorType

__all__ = ["Instance", "ModelMismatch", "Undefined", "evaluate", "numeric", "shape_of", "symbolic"]


class ModelMismatch(Exception):
    """The shape model accepts what the real shape rule rejects, or disagrees on a shape: a bug."""


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
