"""Lowering schedules to the loop IR, its simplifier and its printer."""

from codegen.lower.intrin import GemmIntrin
from codegen.lower.ir import (
    Allocate,
    Buffer,
    For,
    IfThenElse,
    Intrinsic,
    LetStmt,
    PrimFunc,
    Region,
    Seq,
    Stmt,
    Store,
    walk_stmts,
)
from codegen.lower.lower import lower
from codegen.lower.simplify import simplify

__all__ = [
    "Allocate", "Buffer", "For", "GemmIntrin", "IfThenElse", "Intrinsic", "LetStmt", "PrimFunc", "Region",
    "Seq", "Stmt", "Store", "lower", "simplify", "walk_stmts",
]
