"""TASO's constant tensors: they let rules turn pooling or identity into convolutions and matmuls."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import onnx.numpy_helper

from taso_py.errors import AttrError
from taso_py.ops.onnx_map import ExportContext, ExportNode, OnnxMapping
from taso_py.ops.schema import Fusion, OpDef, int_tuple, set_attr
from taso_py.ops.symbolic import Arith, IntArith, ScalarDomain, SymShape, as_objects
from taso_py.types import DType, TensorType


@dataclass(frozen=True)
class KernelAttrs:
    """A depthwise [channels, 1, kh, kw] kernel."""

    channels: int
    kernel: tuple[int, int] = (3, 3)
    dtype: str = "float32"

    def __post_init__(self) -> None:
        set_attr(self, "kernel", int_tuple(self.kernel, 2, "kernel", low=1))
        if self.channels < 1:
            raise AttrError(f"channels must be >= 1, got {self.channels}")
        DType.of(self.dtype)


@dataclass(frozen=True)
class GroupedKernelAttrs(KernelAttrs):
    """A [channels, channels // groups, kh, kw] kernel."""

    groups: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.groups < 1 or self.channels % self.groups:
            raise AttrError(f"channels={self.channels} must be a positive multiple of groups={self.groups}")


@dataclass(frozen=True)
class MatrixAttrs:
    n: int
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.n < 1:
            raise AttrError(f"n must be >= 1, got {self.n}")
        DType.of(self.dtype)


@dataclass(frozen=True)
class FillAttrs:
    shape: tuple[int, ...]
    dtype: str = "float32"

    def __post_init__(self) -> None:
        set_attr(self, "shape", tuple(int(d) for d in self.shape))
        if any(d < 0 for d in self.shape):
            raise AttrError(f"shape must be non-negative, got {self.shape}")
        DType.of(self.dtype)


def _identity_kernel(a: GroupedKernelAttrs) -> np.ndarray:
    """Convolving with it (pad = kernel // 2, same groups) returns the input."""
    per_group = a.channels // a.groups
    w = np.zeros((a.channels, per_group, *a.kernel), a.dtype)
    for c in range(a.channels):
        w[c, c % per_group, a.kernel[0] // 2, a.kernel[1] // 2] = 1
    return w


def _averaging_kernel(a: KernelAttrs) -> np.ndarray:
    """A depthwise kernel (groups = channels) that averages each window, as avgpool with pads counted."""
    return np.full((a.channels, 1, *a.kernel), 1.0 / (a.kernel[0] * a.kernel[1]), a.dtype)


def constant(name: str, attrs: type, make: Callable[[object], np.ndarray],
             sym_shape: Callable[[Any, Arith], tuple], doc: str, exact: Callable[[Any], Any] | None = None) -> OpDef:
    """A zero-input operator whose value depends only on its attributes.

    `sym_shape(attrs, A)` gives its shape and conditions; `exact(attrs)` its value as exact
    numbers where the float value is rounded (the averaging kernel's 1/k)."""

    def sym_value(_xs: Sequence[np.ndarray], a: Any, D: ScalarDomain) -> tuple[np.ndarray, ...]:
        return (as_objects(exact(a) if exact else make(a).astype(np.int64), D),)

    def shape(_in: Sequence[TensorType], a: Any) -> tuple[TensorType, ...]:
        # from the shape rule, not the value: the search prices candidates of any size, and a
        # damaged model's huge dim must not become an n x n array just to be measured
        out, _ = sym_shape(a, IntArith())
        return (TensorType(tuple(out), DType.of(a.dtype)),)

    def export(ctx: ExportContext, node: ExportNode) -> None:
        ctx.emit("Constant", [], node.outputs, value=onnx.numpy_helper.from_array(make(node.attrs)))

    def model(_s: Sequence[tuple], a: Any, A: Arith) -> SymShape:
        out, conds = sym_shape(a, A)
        return (out,), conds

    return OpDef(name, (), shape=shape, ref=lambda _xs, a: (make(a),), attrs=attrs, fusion=Fusion.INJECTIVE,
                 onnx=OnnxMapping({}, export), sym_shape=model, sym_value=sym_value, doc=doc)


const_iconv = constant(
    "const_iconv", GroupedKernelAttrs, _identity_kernel,
    lambda a, A: ((a.channels, A.div(a.channels, a.groups), *a.kernel),
                  (a.groups >= 1, A.mod(a.channels, a.groups) == 0)),
    "identity convolution kernel")
const_pool = constant(
    "const_pool", KernelAttrs, _averaging_kernel, lambda a, A: ((a.channels, 1, *a.kernel), ()),
    "averaging depthwise kernel",
    exact=lambda a: np.full((a.channels, 1, *a.kernel), Fraction(1, a.kernel[0] * a.kernel[1]), dtype=object))
const_imm = constant("const_imm", MatrixAttrs, lambda a: np.eye(a.n, dtype=a.dtype), lambda a, A: ((a.n, a.n), ()),
                     "identity matrix")
const_one = constant("const_one", FillAttrs, lambda a: np.ones(a.shape, a.dtype), lambda a, A: (tuple(a.shape), ()),
                     "all-ones tensor")

OPS = (const_iconv, const_pool, const_imm, const_one)
