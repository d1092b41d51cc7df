"""Statistics of a rule library: what `taso rules stats` prints."""

from __future__ import annotations

from collections import Counter
from typing import Any

from taso_py.library.store import Library


def stats(library: Library) -> dict[str, Any]:
    per_op: Counter[str] = Counter(op for e in library for op in e.ops)
    per_size: Counter[int] = Counter(e.size for e in library)
    per_status: Counter[str] = Counter(e.proof.status.value for e in library)
    axioms: Counter[str] = Counter(a for e in library for a in e.proof.axioms)
    gen = library.generator
    return {
        "rules": len(library),
        "multi_output": sum(len(e.rule.src) > 1 for e in library),
        "parametric": sum(bool(e.rule.attr_variables()) for e in library),
        "proof_status": dict(per_status),
        "stages": gen.get("counts", {}),
        "stage_seconds": gen.get("seconds", {}),
        "per_operator": dict(sorted(per_op.items(), key=lambda kv: (-kv[1], kv[0]))),
        "per_size": {str(k): v for k, v in sorted(per_size.items())},
        "axioms_used": dict(sorted(axioms.items(), key=lambda kv: (-kv[1], kv[0]))),
        "generator": {k: gen[k] for k in ("max_ops", "seed", "ops", "total_seconds", "wall_seconds") if k in gen},
    }
