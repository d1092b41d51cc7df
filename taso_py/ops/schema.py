"""What an operator entry holds: the single source of truth every other module reads.

An `OpDef` keeps next to each other the operator's tensor inputs, its typed attributes
(a frozen dataclass with defaults), its shape rule, its numpy reference semantics, its
fusion class and its ONNX mapping. The generator, the verifier, onnx_io, the matcher and
codegen look operators up here and never switch on operator names.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from taso_py.errors import AttrError, ShapeError
from taso_py.ops.onnx_map import OnnxMapping
from taso_py.ops.symbolic import SymShapeFn, SymValueFn
from taso_py.types import TensorType


class Fusion(enum.Enum):
    """TVM's fusion ladder: how an operator may be fused with its neighbours."""

    INJECTIVE = "injective"
    REDUCTION = "reduction"
    COMPLEX_OUT_FUSABLE = "complex-out-fusable"
    OPAQUE = "opaque"


ShapeFn = Callable[[Sequence[TensorType], Any], tuple[TensorType, ...]]
RefFn = Callable[[Sequence[np.ndarray], Any], tuple[np.ndarray, ...]]
NormalizeFn = Callable[[Any, Sequence[TensorType]], Any]
FlopsFn = Callable[[Sequence[TensorType], Sequence[TensorType], Any], int]  # (inputs, outputs, attrs)


@dataclass(frozen=True)
class NoAttrs:
    """Attributes of an operator that has none."""


@dataclass(frozen=True)
class OpDef:
    """One operator of the algebra (or a structural node kind: input, weight, opaque)."""

    name: str
    inputs: tuple[str, ...]
    shape: ShapeFn
    ref: RefFn
    fusion: Fusion
    attrs: type = NoAttrs
    optional: int = 0  # how many trailing inputs may be left out
    variadic: bool = False  # the last input may repeat (concat)
    commutative: bool = False  # the inputs may be swapped (canonical hashing sorts them)
    normalize: NormalizeFn | None = None  # canonical attributes for given input types
    onnx: OnnxMapping | None = None
    sym_shape: SymShapeFn | None = None  # the verifier's shape model (see ops.symbolic)
    sym_value: SymValueFn | None = None  # semantics over a scalar domain (see ops.symbolic)
    algebra: bool = True  # False for the structural kinds that the generator must not use
    # its inputs are weights, never run-time data: a rewrite does not create it on data (enlarge
    # pads kernels; on a fed kernel it would be a Pad before a Conv's weight, which ORT's PadFusion breaks)
    weights_only: bool = False
    flops: FlopsFn | None = None  # arithmetic of one application; None: one per output element
    # an element-wise unary op a convolution may apply to its result (conv2d's `act` names it)
    activation: bool = False
    # its definition by other operators, as a term over its inputs (silu: "mul(x, sigmoid(x))"): the axiom
    # `<name>-def` states it, and import makes each occurrence of the term (x * Sigmoid(x)) into this operator
    defined_as: str | None = None
    doc: str = ""

    def __hash__(self) -> int:
        """An entry is known by its name (codegen registers computes against entries)."""
        return hash(self.name)

    def make_attrs(self, **values: Any) -> Any:
        """Typed attributes from keyword values; unknown names are an error naming the op."""
        names = {f.name for f in dataclasses.fields(self.attrs)}
        unknown = sorted(set(values) - names)
        if unknown:
            known = ", ".join(sorted(names)) or "none"
            raise AttrError(f"{self.name}: unknown attribute {unknown[0]!r} (has: {known})")
        try:
            return self.attrs(**values)
        except AttrError as e:
            raise AttrError(f"{self.name}: {e}") from None
        except TypeError as e:  # a required attribute left out
            raise AttrError(f"{self.name}: {e}") from None

    def check_arity(self, count: int) -> None:
        low = len(self.inputs) - self.optional
        high = None if self.variadic else len(self.inputs)
        if count < low or (high is not None and count > high):
            want = f"{low}+" if high is None else (str(low) if low == high else f"{low}-{high}")
            raise ShapeError(f"{self.name}: takes {want} inputs ({', '.join(self.inputs)}), got {count}")

    def infer(self, in_types: Sequence[TensorType], attrs: Any) -> tuple[TensorType, ...]:
        """Output types of this op applied to `in_types`; a ShapeError names the op."""
        self.check_arity(len(in_types))
        if self.algebra:
            for i, t in enumerate(in_types):
                if not t.is_known:
                    raise ShapeError(f"{self.name}: input {i} has an unknown shape or type")
        try:
            return self.shape(in_types, attrs)
        except ShapeError as e:
            raise ShapeError(f"{self.name}: {e} (inputs {', '.join(map(str, in_types))})") from None

    def canonical(self, attrs: Any, in_types: Sequence[TensorType]) -> Any:
        """Attributes in canonical form (e.g. negative axes made positive)."""
        return self.normalize(attrs, in_types) if self.normalize else attrs

    def evaluate(self, arrays: Sequence[np.ndarray], attrs: Any) -> tuple[np.ndarray, ...]:
        return self.ref(arrays, attrs)

    def count_flops(self, in_types: Sequence[TensorType], out_types: Sequence[TensorType], attrs: Any) -> int:
        """For the analytical cost model: multiply-adds count two."""
        if self.flops is not None:
            return self.flops(in_types, out_types, attrs)
        return sum(t.size for t in out_types)

    @property
    def verifiable(self) -> bool:
        """Whether the verifier models this operator (it may appear in proved rules)."""
        return self.sym_shape is not None and self.sym_value is not None


@dataclass(frozen=True)
class Axiom:
    """A law of the algebra in the rule text syntax, e.g. `add(a, b) == add(b, a)`.

    The verifier proves rules from these; `taso axioms validate` checks each against the
    operators' semantics on every small shape. A `where` clause states when it holds.
    """

    name: str
    text: str
    doc: str = ""


# ---- shared attribute validation helpers -------------------------------------------

def int_tuple(value: Any, n: int, what: str, *, low: int | None = None) -> tuple[int, ...]:
    """`value` as an n-tuple of ints: an int is repeated, a (h, w) pair is doubled for 4 pads."""
    if isinstance(value, (int, np.integer)):
        items: tuple[int, ...] = (int(value),) * n
    else:
        items = tuple(int(v) for v in value)
        if n == 4 and len(items) == 2:
            items = items * 2
    if len(items) != n:
        raise AttrError(f"{what} needs {n} values, got {len(items)}")
    if low is not None and any(v < low for v in items):
        raise AttrError(f"{what} must be >= {low}, got {items}")
    return items


def set_attr(obj: Any, name: str, value: Any) -> None:
    """Assign in a frozen dataclass's __post_init__ (normalizing a field)."""
    object.__setattr__(obj, name, value)


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    """A possibly negative axis as a positive one; a ShapeError when out of range (a scalar has
    no axis at all: ONNX's range for rank r is [-r, r-1])."""
    if not -rank <= axis < rank:
        raise ShapeError(f"{what} {axis} out of range for rank {rank}")
    return axis % rank


def same_dtype(in_types: Sequence[TensorType]) -> None:
    dtypes = {t.dtype for t in in_types}
    if len(dtypes) > 1:
        raise ShapeError(f"element types differ: {', '.join(sorted(d.value for d in dtypes if d))}")


def float_only(t: TensorType, also: Sequence[str] = ()) -> None:
    """For operators ONNX defines on floating-point tensors only (and on the types in `also`)."""
    if not t.dtype.is_float and t.dtype.value not in also:
        raise ShapeError(f"needs a floating-point input, got {t.dtype.value}")
