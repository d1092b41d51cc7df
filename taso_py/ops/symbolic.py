"""The two hooks that let the verifier and the generator reason about an operator.

* `sym_shape(shapes, attrs, A)` is the operator's shape rule written once over any integer
  arithmetic `A`: plain ints (the matcher checks a rule's shape conditions with it) or Z3 terms
  (the verifier's shape axioms are generated from it). Ranks are concrete Python ints; dims and
  attributes may be symbolic. It returns the output shapes and the conditions under which the
  operator is defined, or None when the input ranks do not fit at all. It is the verifier's
  *model* of the operator: it may accept less than the real shape rule (e.g. no 1-D matmul),
  never more, and where it accepts, the shapes agree (checked by `taso axioms validate`).
* `sym_value(arrays, attrs, D)` is the operator's semantics over object arrays whose elements
  come from a scalar domain `D`: Z3 reals (axiom validation), exact rationals, floats (tested
  against the numpy reference) or integers modulo a prime (fingerprints). Only the non-linear
  scalar functions go through `D`; sums and products use Python operators.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any, Protocol

import numpy as np

Dim = Any  # an int or a symbolic integer term
Cond = Any  # a bool or a symbolic boolean term
SymShape = tuple[tuple[tuple[Dim, ...], ...], tuple[Cond, ...]]
SymShapeFn = Callable[[Sequence[tuple[Dim, ...]], Any, "Arith"], "SymShape | None"]
SymValueFn = Callable[[Sequence[np.ndarray], Any, "ScalarDomain"], tuple[np.ndarray, ...]]


class Arith(Protocol):
    """Integer arithmetic for shape rules: `==`, `+`, `*`, `<` come from the values themselves."""

    def ite(self, c: Cond, a: Dim, b: Dim) -> Dim: ...
    def all(self, *cs: Cond) -> Cond: ...
    def any(self, *cs: Cond) -> Cond: ...
    def not_(self, c: Cond) -> Cond: ...
    def div(self, a: Dim, b: Dim) -> Dim: ...  # floor division by a positive divisor
    def mod(self, a: Dim, b: Dim) -> Dim: ...


class IntArith:
    """Arith over Python ints: shape rules evaluated on concrete shapes."""

    def ite(self, c: Cond, a: Dim, b: Dim) -> Dim:
        return a if c else b

    def all(self, *cs: Cond) -> Cond:
        return all(cs)

    def any(self, *cs: Cond) -> Cond:
        return any(cs)

    def not_(self, c: Cond) -> Cond:
        return not c

    def div(self, a: Dim, b: Dim) -> Dim:
        return a // b

    def mod(self, a: Dim, b: Dim) -> Dim:
        return a % b


INT = IntArith()


def concrete_shapes(fn: SymShapeFn, shapes: Sequence[tuple[int, ...]], attrs: Any
                    ) -> tuple[tuple[int, ...], ...] | None:
    """Output shapes where the model defines the operator on these concrete shapes, else None."""
    result = fn(shapes, attrs, INT)
    if result is None:
        return None
    outs, conds = result
    if not all(conds) or any(d < 1 for out in outs for d in out):
        return None
    return tuple(tuple(int(d) for d in out) for out in outs)


# ---- shape helpers shared by the operator families -----------------------------------------

def select(A: Arith, dims: Sequence[Dim], index: Dim) -> Dim:
    """dims[index] for a possibly symbolic index (assumed in range)."""
    out = dims[-1]
    for k in range(len(dims) - 2, -1, -1):
        out = A.ite(index == k, dims[k], out)
    return out


def broadcast(A: Arith, a: Sequence[Dim], b: Sequence[Dim]) -> tuple[tuple[Dim, ...], tuple[Cond, ...]]:
    """NumPy broadcasting of two shapes: the result and the conditions for it to exist."""
    r = max(len(a), len(b))
    a = (1,) * (r - len(a)) + tuple(a)
    b = (1,) * (r - len(b)) + tuple(b)
    out = tuple(A.ite(x == 1, y, x) for x, y in zip(a, b))
    return out, tuple(A.any(x == y, x == 1, y == 1) for x, y in zip(a, b))


def window(A: Arith, size: Dim, kernel: Dim, stride: Dim, pad0: Dim, pad1: Dim, dilation: Dim = 1
           ) -> tuple[Dim, tuple[Cond, ...]]:
    """Number of sliding windows (floor mode) and the condition that one fits."""
    room = size + pad0 + pad1 - dilation * (kernel - 1) - 1
    return A.div(room, stride) + 1, (room >= 0,)


def axis_in_range(axis: Dim, rank: int) -> tuple[Cond, ...]:
    return (axis >= 0, axis < rank)


def same_shape(s: Sequence[tuple[Dim, ...]], _a: Any, _A: Arith) -> SymShape:
    return (tuple(s[0]),), ()


# ---- scalar domains --------------------------------------------------------------------------

class ScalarDomain(Protocol):
    """The scalar operations an operator's semantics needs beyond +, - and *."""

    def const(self, v: float | Fraction) -> Any: ...
    def div(self, a: Any, b: Any) -> Any: ...
    def relu(self, x: Any) -> Any: ...
    def max(self, a: Any, b: Any) -> Any: ...
    def apply(self, name: str, impl: Callable[[float], float], x: Any) -> Any:
        """A non-polynomial function: `impl` is its float meaning, `name` identifies it symbolically."""


class FloatDomain:
    """Floats: checks `sym_value` against the numpy reference."""

    def const(self, v: float | Fraction) -> float:
        return float(v)

    def div(self, a: Any, b: Any) -> float:
        return a / b

    def relu(self, x: Any) -> Any:
        return x if x > 0 else 0.0 * x

    def max(self, a: Any, b: Any) -> Any:
        return a if a >= b else b

    def apply(self, name: str, impl: Callable[[float], float], x: Any) -> float:
        return impl(float(x))


FLOAT = FloatDomain()


def elementwise(fn: Callable[[Any], Any], x: np.ndarray) -> np.ndarray:
    """Apply a scalar function to every element of an object array."""
    out = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(x.shape):
        out[idx] = fn(x[idx])
    return out


def as_objects(x: np.ndarray, D: ScalarDomain) -> np.ndarray:
    """A numeric array as domain constants (exact for the integer and rational values used)."""
    return elementwise(lambda v: D.const(Fraction(v) if isinstance(v, (int, np.integer)) else v),
                       np.asarray(x, dtype=object))

