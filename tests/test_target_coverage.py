"""Every operator of the algebra has a kernel on every target: a compute, a schedule for the
pattern it produces, and source the target's emitter writes -- or the target declares the operator
unsupported (`Target.unsupported`; it then runs in ONNX Runtime, see test_codegen_fallback).

The instances are test_ops.py's cases, which cover every operator of the table (a test there says
so), so a new operator without kernels fails here, named.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_ops import CASES

from taso_py import ops
from taso_py.codegen import te, topi
from taso_py.codegen.graph.fallback import held_in_arena
from taso_py.codegen.lower import lower
from taso_py.codegen.schedule.schedule import create_schedule
from taso_py.codegen.target import TARGETS, Target
from taso_py.codegen.te.tensor import Tensor
from taso_py.types import DType, TensorType


def instances(op: str) -> list[tuple[list[tuple[int, ...]], dict[str, Any], str]]:
    """(input shapes, attributes, dtype) of each of test_ops.py's cases of `op` that a kernel is for: empty
    tensors and types C lacks run in ONNX Runtime on every target (`fallback.held_in_arena`)."""
    entry, found = ops.get(op), []
    for name, shapes, attrs, _opset, dtype in (p.values for p in CASES):
        if name != op:
            continue
        in_types = [TensorType(tuple(s), DType(dtype)) for s in shapes]
        out_types = entry.infer(in_types, entry.make_attrs(**(attrs if entry.inputs else {**attrs, "dtype": dtype})))
        if all(held_in_arena(t) for t in [*in_types, *out_types]):
            found.append((shapes, attrs, dtype))
    return found


def computed(op: str, shapes: list[tuple[int, ...]], attrs: dict[str, Any], dtype: str
             ) -> tuple[list[Tensor], tuple[Tensor, ...]]:
    """Placeholders of `shapes` and the te outputs of `op` on them (canonical attributes, as a graph holds them)."""
    entry = ops.get(op)
    raw = entry.make_attrs(**(attrs if entry.inputs else {**attrs, "dtype": dtype}))
    in_types = [TensorType(tuple(s), DType(dtype)) for s in shapes]
    inputs = [te.placeholder(t.shape, dtype, f"in{k}") for k, t in enumerate(in_types)]
    return inputs, topi.compute(entry, inputs, entry.canonical(raw, in_types), entry.infer(in_types, raw))


def patterns(outputs: tuple[Tensor, ...]) -> set[str]:
    """The schedule patterns a fused group of these outputs asks for (its anchors' tags, or injective)."""
    tags = {st.op.tag for st in create_schedule(list(outputs)).stages} - {"injective", ""}
    return tags or {"injective"}


ALGEBRA = sorted(ops.algebra_names())


def test_every_operator_has_a_compute() -> None:
    missing = [op for op in ALGEBRA if ops.get(op) not in topi.COMPUTE]
    assert not missing, f"operators without a compute (register one in codegen/topi): {missing}"


@pytest.mark.parametrize("target", list(TARGETS.values()), ids=list(TARGETS))
def test_every_operator_has_a_schedule_and_source_on_each_target(target: Target) -> None:
    missing = []
    for op in ALGEBRA:
        if op in target.unsupported:
            continue
        cases = instances(op)
        assert cases, f"{op} has no case in tests/test_ops.py"
        for shapes, attrs, dtype in cases:
            inputs, outputs = computed(op, shapes, attrs, dtype)
            absent = sorted(p for p in patterns(outputs) if (target.schedules, p) not in topi.SCHEDULE)
            if absent:
                missing.append(f"{op} ({', '.join(absent)})")
                break
            func = lower(topi.schedule_group(outputs, target=target), [*inputs, *outputs], op)
            assert target.emitter().module([func]), op
    assert not missing, f"no {target.name} schedule for: {'; '.join(missing)} -- add one, or list the operator " \
                        f"in the target's `unsupported`"


def test_unknown_operators_are_named() -> None:
    from taso_py.codegen.errors import CodegenError
    with pytest.raises(CodegenError, match="no code generator for operator 'opaque'"):
        topi.compute(ops.get("opaque"), [], None, [])
