"""The operator table: one `OpDef` per operator, collected from the family modules.

Adding an operator is one entry in the family module it belongs to (see schema.OpDef);
everything else in taso-py reads this table.
"""

from __future__ import annotations

from taso_py.errors import InputError
from taso_py.ops import constants, conv, elementwise, indexing, layout, linalg, norm, reduce, resize, structural
from taso_py.ops.schema import Axiom, Fusion, NoAttrs, OpDef

OPS: dict[str, OpDef] = {
    op.name: op
    for family in (elementwise, linalg, conv, layout, norm, reduce, indexing, resize, constants, structural)
    for op in family.OPS
}

AXIOMS: dict[str, Axiom] = {
    **{axiom.name: axiom for family in (elementwise, linalg, conv, layout, norm, reduce, indexing, resize)
       for axiom in family.AXIOMS},
    # an entry's definition by other operators is an axiom too
    **{f"{op.name}-def": Axiom(f"{op.name}-def", f"{op.name}({', '.join(op.inputs)}) == {op.defined_as}",
                               f"the definition of {op.name}") for op in OPS.values() if op.defined_as},
}


def get(name: str) -> OpDef:
    """The entry for `name`; the error lists the operators that exist."""
    try:
        return OPS[name]
    except KeyError:
        raise InputError(f"unknown operator {name!r} (known: {', '.join(algebra_names())})") from None


def algebra_names() -> list[str]:
    """Names of the operators of the algebra (not the structural node kinds)."""
    return [name for name, op in OPS.items() if op.algebra]


def onnx_importers() -> dict[str, object]:
    """ONNX op type -> import function, from every entry's mapping."""
    table: dict[str, object] = {}
    for op in OPS.values():
        for op_type, fn in (op.onnx.imports.items() if op.onnx else ()):
            if op_type in table:
                raise RuntimeError(f"ONNX op {op_type} is imported by two entries")
            table[op_type] = fn
    return table


__all__ = ["AXIOMS", "OPS", "Axiom", "Fusion", "NoAttrs", "OpDef", "algebra_names", "get", "onnx_importers"]
