"""Tensor expressions: what to compute, as TVM's `te` (placeholders, compute, reductions)."""

from codegen.te.expr import (
    Binary, Call, Cast, Const, Expr, Load, Not, Select, Var, all_of, call, cast, const, equal, erf, exp,
    free_vars, if_then_else, lift, log, max_, max_value, min_, min_value, not_equal, sigmoid, sqrt,
    substitute, tanh, walk,
)
from codegen.te.tensor import (
    ComputeOp, IterVar, Operation, PlaceholderOp, Reduce, Tensor, TensorRead, compute, max_reduce,
    min_reduce, placeholder, reduce_axis, sum,
)

__all__ = [
    "Binary", "Call", "Cast", "ComputeOp", "Const", "Expr", "IterVar", "Load", "Not", "Operation",
    "PlaceholderOp", "Reduce", "Select", "Tensor", "TensorRead", "Var", "all_of", "call", "cast", "compute",
    "const", "equal", "erf", "exp", "free_vars", "if_then_else", "lift", "log", "max_", "max_reduce",
    "max_value", "min_", "min_reduce", "min_value", "not_equal", "placeholder", "reduce_axis", "sigmoid",
    "sqrt", "substitute", "sum", "tanh", "walk",
]
