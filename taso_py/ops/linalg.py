"""Matrix multiplication (2-D and batched, NumPy semantics) and ONNX Gemm's lowering onto it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso_py.errors import ShapeError
from taso_py.ops.elementwise import broadcast_shapes
from taso_py.ops.onnx_map import ImportContext, OnnxMapping, direct_export, direct_import
from taso_py.ops.schema import Fusion, OpDef, same_dtype
from taso_py.types import TensorType


def _matmul_shape(in_types: Sequence[TensorType], _attrs: object) -> tuple[TensorType, ...]:
    same_dtype(in_types)
    a, b = in_types[0].known_shape, in_types[1].known_shape
    if not a or not b:
        raise ShapeError("operands must have rank >= 1")
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ShapeError(f"inner dimensions differ: {a2[-1]} vs {b2[-2]}")
    out = (*broadcast_shapes(a2[:-2], b2[:-2]), a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return (TensorType(out, in_types[0].dtype),)


def _import_gemm(ctx: ImportContext) -> tuple:
    """Gemm = alpha * op(A) @ op(B) + beta * C, written with matmul, transpose, scalar_mul, add."""
    a, b = ctx.input(0), ctx.input(1)
    if ctx.attr("transA", 0):
        (a,) = ctx.add("transpose", [a], perm=(1, 0))
    if ctx.attr("transB", 0):
        (b,) = ctx.add("transpose", [b], perm=(1, 0))
    (y,) = ctx.add("matmul", [a, b])
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    if alpha != 1.0:
        (y,) = ctx.add("scalar_mul", [y], scale=alpha)
    c = ctx.input(2) if ctx.n_inputs > 2 else None
    if c is not None and beta != 0.0:
        if beta != 1.0:
            (c,) = ctx.add("scalar_mul", [c], scale=beta)
        (y,) = ctx.add("add", [y, c])
    return (y,)


matmul = OpDef(
    "matmul", ("a", "b"), shape=_matmul_shape, ref=lambda xs, _a: (np.matmul(xs[0], xs[1]),),
    fusion=Fusion.COMPLEX_OUT_FUSABLE,
    onnx=OnnxMapping({"MatMul": direct_import("matmul"), "Gemm": _import_gemm}, direct_export("MatMul")),
    doc="a @ b with NumPy semantics: 1-D operands, batched and broadcast leading dims",
)

OPS = (matmul,)
