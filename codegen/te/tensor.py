"""Tensors and the operations that define them: *what* each element is, never how to loop.

`placeholder` declares an input by shape and dtype; `compute(shape, f)` defines every
element by an index function; a reduction (`sum`, `max_reduce`, `min_reduce`) over
`reduce_axis` ranges may be the top of a compute body. Shapes are static integers: every
model taso-py compiles has them, and static extents let lowering prove bounds exactly.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from taso_py.codegen.te.expr import Expr, ExprLike, Var, const, lift, max_, max_value, min_, min_value, walk


@dataclass(frozen=True, eq=False)
class IterVar:
    """An axis: a loop variable ranging over [0, extent). `reduce` axes are summed over."""

    var: Var
    extent: int
    reduce: bool = False

    @property
    def name(self) -> str:
        return self.var.name

    def __repr__(self) -> str:
        return f"{'reduce ' if self.reduce else ''}{self.name}:{self.extent}"

    # an axis computes as its variable: `h + rh`, `k * 2`
    def __add__(self, o: Any) -> Expr: return self.var + o
    def __radd__(self, o: Any) -> Expr: return o + self.var
    def __sub__(self, o: Any) -> Expr: return self.var - o
    def __rsub__(self, o: Any) -> Expr: return o - self.var
    def __mul__(self, o: Any) -> Expr: return self.var * o
    def __rmul__(self, o: Any) -> Expr: return o * self.var


def reduce_axis(extent: int, name: str = "k") -> IterVar:
    if extent < 1:
        raise ValueError(f"reduce axis {name!r} needs an extent >= 1, got {extent}")
    return IterVar(Var(name), int(extent), reduce=True)


class Operation:
    """What produces a tensor."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def inputs(self) -> list[Tensor]:
        return []

    def output(self) -> Tensor:
        return Tensor(self)


@dataclass(eq=False)
class PlaceholderOp(Operation):
    name: str
    shape: tuple[int, ...]
    dtype: str
    constant: bool = False  # its value is known when compiling (a weight): schedules may repack it for free


@dataclass(eq=False)
class ComputeOp(Operation):
    """`out[axes] = body`, where `body` may read other tensors and be one Reduce."""

    name: str
    axes: tuple[IterVar, ...]
    body: Expr
    tag: str = ""  # the pattern a default schedule keys on ("injective", "matmul", "conv2d", ...)
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:  # type: ignore[override]
        return tuple(a.extent for a in self.axes)

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.body.dtype

    @property
    def reduce_axes(self) -> tuple[IterVar, ...]:
        return self.body.axes if isinstance(self.body, Reduce) else ()

    def inputs(self) -> list[Tensor]:
        seen: dict[Operation, Tensor] = {}
        for e in walk(self.body):
            if isinstance(e, TensorRead):
                seen.setdefault(e.tensor.op, e.tensor)
        return list(seen.values())


class Tensor:
    """The output of an operation; `t[i, j]` reads an element inside a compute body."""

    def __init__(self, op: Operation) -> None:
        self.op = op

    @property
    def shape(self) -> tuple[int, ...]:
        return self.op.shape

    @property
    def dtype(self) -> str:
        return self.op.dtype

    @property
    def name(self) -> str:
        return self.op.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, idx: Any) -> Expr:
        items = idx if isinstance(idx, tuple) else (idx,)
        if len(items) != self.ndim:
            raise IndexError(f"tensor {self.name!r} has {self.ndim} dimensions, indexed with {len(items)}")
        return TensorRead(self, tuple(lift(i.var if isinstance(i, IterVar) else i) for i in items))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tensor) and other.op is self.op

    def __hash__(self) -> int:
        return hash(self.op)

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {self.shape}, {self.dtype})"


@dataclass(frozen=True, eq=False, repr=False)
class TensorRead(Expr):
    tensor: Tensor
    indices: tuple[Expr, ...]

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.tensor.dtype

    def sub_exprs(self) -> Iterator[Expr]:
        return iter(self.indices)

    def with_children(self, f: Callable[[Expr], Expr]) -> Expr:
        idx = tuple(f(i) for i in self.indices)
        return self if all(a is b for a, b in zip(idx, self.indices)) else TensorRead(self.tensor, idx)


@dataclass(frozen=True, eq=False, repr=False)
class Reduce(Expr):
    """`combiner` (sum, max, min) of `source` over `axes`; only at the top of a compute body."""

    combiner: str
    source: Expr
    axes: tuple[IterVar, ...]

    @property
    def dtype(self) -> str:  # type: ignore[override]
        return self.source.dtype

    def identity(self) -> Expr:
        if self.combiner == "sum":
            return const(0, self.dtype)
        return min_value(self.dtype) if self.combiner == "max" else max_value(self.dtype)

    def combine(self, acc: Expr, value: Expr) -> Expr:
        if self.combiner == "sum":
            return acc + value
        return max_(acc, value) if self.combiner == "max" else min_(acc, value)

    def sub_exprs(self) -> Iterator[Expr]:
        yield self.source

    def with_children(self, f: Callable[[Expr], Expr]) -> Expr:
        s = f(self.source)
        return self if s is self.source else Reduce(self.combiner, s, self.axes)


def _reducer(combiner: str) -> Callable[[ExprLike, Sequence[IterVar] | IterVar], Expr]:
    def reduce(source: ExprLike, axis: Sequence[IterVar] | IterVar) -> Expr:
        axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
        if not axes or not all(a.reduce for a in axes):
            raise ValueError(f"{combiner}: needs reduce axes (te.reduce_axis)")
        return Reduce(combiner, lift(source), axes)
    reduce.__name__ = combiner
    return reduce


sum = _reducer("sum")
max_reduce = _reducer("max")
min_reduce = _reducer("min")


def placeholder(shape: Sequence[int], dtype: str = "float32", name: str = "placeholder",
                constant: bool = False) -> Tensor:
    return PlaceholderOp(name, tuple(int(s) for s in shape), dtype, constant).output()


_AXIS_NAMES = "ijlmnopqrstuvwxyz"


def compute(shape: Sequence[int], fcompute: Callable[..., ExprLike], name: str = "compute",
            tag: str = "", attrs: dict[str, Any] | None = None) -> Tensor:
    """A tensor of `shape` whose element at (i, j, ...) is `fcompute(i, j, ...)`."""
    shape = tuple(int(s) for s in shape)
    if any(s < 1 for s in shape):
        raise ValueError(f"compute {name!r}: every extent must be >= 1, got {shape}")
    params = list(inspect.signature(fcompute).parameters)
    varargs = any(inspect.signature(fcompute).parameters[p].kind == inspect.Parameter.VAR_POSITIONAL
                  for p in params)
    names = [f"{_AXIS_NAMES[k % len(_AXIS_NAMES)]}{k // len(_AXIS_NAMES) or ''}" for k in range(len(shape))] \
        if varargs or len(params) != len(shape) else params
    if not varargs and len(params) != len(shape):
        raise ValueError(f"compute {name!r}: shape has {len(shape)} dims but the function takes {len(params)}")
    axes = tuple(IterVar(Var(n), s) for n, s in zip(names, shape))
    body = lift(fcompute(*[a.var for a in axes]))
    for e in walk(body):
        if isinstance(e, Reduce) and e is not body:
            raise ValueError(f"compute {name!r}: a reduction must be the whole body")
    return ComputeOp(name, axes, body, tag, dict(attrs or {})).output()
