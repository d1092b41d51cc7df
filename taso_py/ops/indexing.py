"""Data movement with constant indices: slice, gather, expand, where with a constant condition, cast."""

from __future__ import annotations

from taso_py.ops.schema import Axiom, OpDef

OPS: tuple[OpDef, ...] = ()
AXIOMS: tuple[Axiom, ...] = ()
