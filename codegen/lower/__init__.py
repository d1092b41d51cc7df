"""Lowering schedules to the loop IR (which prints itself), and its simplifier."""

from taso_py.codegen.lower.intrin import GemmIntrin
from taso_py.codegen.lower.ir import (
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
from taso_py.codegen.lower.lower import lower
from taso_py.codegen.lower.simplify import simplify

__all__ = [
    "Allocate", "Buffer", "For", "GemmIntrin", "IfThenElse", "Intrinsic", "LetStmt", "PrimFunc", "Region",
    "Seq", "Stmt", "Store", "lower", "simplify", "walk_stmts",
]
