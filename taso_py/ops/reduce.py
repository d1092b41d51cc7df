"""Reductions over axes: reduce_mean, reduce_sum, reduce_max (ReduceMean/Sum/Max, axes as attribute or input)."""

from __future__ import annotations

from taso_py.ops.schema import Axiom, OpDef

OPS: tuple[OpDef, ...] = ()
AXIOMS: tuple[Axiom, ...] = ()
