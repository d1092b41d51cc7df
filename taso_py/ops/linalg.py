"""Matrix multiplication (2-D and batched, NumPy semantics) and ONNX Gemm's lowering onto it."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from taso_py.errors import ShapeError
from taso_py.ops.elementwise import broadcast_shapes
from taso_py.ops.onnx_map import ImportContext, OnnxMapping, direct_export, direct_import
from taso_py.ops.schema import Axiom, Fusion, OpDef, same_dtype
from taso_py.ops.symbolic import Arith, SymShape, broadcast
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


def _sym_matmul(s: Sequence[tuple], _a: object, A: Arith) -> SymShape | None:
    """The verifier models batched matmul of rank >= 2 operands only (1-D ones are reshapes)."""
    a, b = s
    if len(a) < 2 or len(b) < 2:
        return None
    batch, conds = broadcast(A, a[:-2], b[:-2])
    return ((*batch, a[-2], b[-1]),), (*conds, a[-1] == b[-2])


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


def _matmul_flops(ins: Sequence[TensorType], outs: Sequence[TensorType], _a: object) -> int:
    return 2 * outs[0].size * ins[0].known_shape[-1]


matmul = OpDef(
    "matmul", ("a", "b"), shape=_matmul_shape, flops=_matmul_flops, ref=lambda xs, _a: (np.matmul(xs[0], xs[1]),),
    fusion=Fusion.COMPLEX_OUT_FUSABLE,
    onnx=OnnxMapping({"MatMul": direct_import("matmul"), "Gemm": _import_gemm}, direct_export("MatMul")),
    sym_shape=_sym_matmul, sym_value=lambda xs, _a, _D: (np.matmul(xs[0], xs[1]),),
    doc="a @ b with NumPy semantics: 1-D operands, batched and broadcast leading dims",
)

OPS = (matmul,)

AXIOMS = (
    Axiom("matmul-assoc", "matmul(matmul(a, b), c) == matmul(a, matmul(b, c))"),
    Axiom("matmul-add-left", "matmul(add(a, b), c) == add(matmul(a, c), matmul(b, c))",
          "linearity in the left operand (where both sides are defined, add can only broadcast over "
          "dims that matmul does not contract)"),
    Axiom("matmul-add-right", "matmul(a, add(b, c)) == add(matmul(a, b), matmul(a, c))",
          "linearity in the right operand"),
    Axiom("matmul-scalar-left", "matmul(scalar_mul(a, scale=?s), b) == scalar_mul(matmul(a, b), scale=?s)"),
    Axiom("matmul-scalar-right", "matmul(a, scalar_mul(b, scale=?s)) == scalar_mul(matmul(a, b), scale=?s)"),
    Axiom("matmul-concat-cols", "matmul(a, concat(b, c, axis=?k)) == concat(matmul(a, b), matmul(a, c), axis=-1) "
          "where ?k == rank(b) - 1",
          "columns of the right operand are independent"),
    Axiom("matmul-concat-rows", "matmul(concat(a, b, axis=?k), c) == concat(matmul(a, c), matmul(b, c), axis=-2) "
          "where ?k == rank(a) - 2, rank(a) == rank(c)",
          "rows of the left operand are independent (same rank: no broadcasting over the concat)"),
    Axiom("matmul-concat-batch-right",
          "matmul(a, concat(b, c, axis=?k)) == concat(matmul(a, b), matmul(a, c), axis=?k) "
          "where ?k < rank(b) - 2, ?k < rank(b) - rank(a)",
          "batches of the right operand are independent where the left one has no such dim"),
    Axiom("matmul-concat-batch-right-1", "matmul(a, concat(b, c, axis=?k)) == concat(matmul(a, b), matmul(a, c), "
          "axis=?k) where ?k < rank(b) - 2, rank(a) <= rank(b), ?k + rank(a) - rank(b) >= 0, "
          "dim(a, ?k + rank(a) - rank(b)) == 1",
          "... or broadcasts it from size 1"),
    Axiom("matmul-concat-batch-left",
          "matmul(concat(a, b, axis=?k), c) == concat(matmul(a, c), matmul(b, c), axis=?k) "
          "where ?k < rank(a) - 2, ?k < rank(a) - rank(c)", "batches of the left operand are independent"),
    Axiom("matmul-concat-batch-left-1", "matmul(concat(a, b, axis=?k), c) == concat(matmul(a, c), matmul(b, c), "
          "axis=?k) where ?k < rank(a) - 2, rank(c) <= rank(a), ?k + rank(c) - rank(a) >= 0, "
          "dim(c, ?k + rank(c) - rank(a)) == 1"),
    Axiom("matmul-concat-inner",
          "matmul(concat(a, b, axis=?k), concat(c, d, axis=?j)) == add(matmul(a, c), matmul(b, d)) "
          "where ?k == rank(a) - 1, ?j == rank(c) - 2, dim(a, -1) == dim(c, -2)",
          "a block inner product splits into a sum"),
    Axiom("matmul-transpose",
          "transpose(matmul(a, b), perm=[1, 0]) == matmul(transpose(b, perm=[1, 0]), transpose(a, perm=[1, 0]))",
          "(AB)^T = B^T A^T for matrices"),
    Axiom("matmul-identity", "matmul(a, const_imm(n=?n)) == a where ?n == dim(a, -1)"),
)
