"""The shipped library rewrites each substitution block (`benchmarks/models/blocks.py`).

Whether a rewrite pays is the cost model's call and differs by machine (on this CPU, enlarging
a 1x1 kernel to 3x3 costs more arithmetic than the launch it saves), so coverage is tested with
a cost model that only counts operators: any merge the library can express is then found. The
measured cost model's choices on the same blocks are in `python -m benchmarks.optimize_suite --blocks`.
"""

from __future__ import annotations

from collections import Counter

import pytest

from benchmarks.models.blocks import BLOCKS
from taso_py.library.store import load
from taso_py.onnx_io import load_model, to_onnx
from taso_py.optimizer import optimize
from taso_py.runtime import compare_models, random_feeds
from taso_py.search.backtracking import Settings
from taso_py.search.settings import EqsatSettings
from tests.op_count import OpCount

LIBRARY = load()


# block -> the operator the library must merge, and how many of it are left at most
MERGED = {
    "parallel_matmuls": ("matmul", 1),
    "qkv_projections": ("matmul", 1),
    "sibling_1x1_convs": ("conv2d", 1),
    "sibling_1x1_3x3_convs": ("conv2d", 1),
    "lstm_gates": ("matmul", 2),
}


def test_every_block_names_its_merge():
    assert MERGED.keys() == BLOCKS.keys()


@pytest.mark.parametrize(("name", "search"), [(n, s) for n in BLOCKS for s in ("backtrack", "eqsat")])
def test_the_shipped_library_merges_each_block(name: str, search: str):
    """Both searches find the block's merge (equality saturation through its exact extraction)."""
    source = BLOCKS[name]()
    imported = load_model(source)
    settings = Settings(budget=200, timeout=60) if search == "backtrack" else EqsatSettings()
    result = optimize(imported, LIBRARY, OpCount(), settings)
    op, most = MERGED[name]
    before = Counter(n.op.name for n in imported.graph.nodes.values())[op]
    after = Counter(n.op.name for n in result.model.graph.nodes.values())[op]
    assert result.applied(), f"{name}: no rule applied"
    assert after <= most < before, f"{name}: {before} {op} became {after}"
    comparison = compare_models(source, to_onnx(result.model), random_feeds(imported.graph))
    assert comparison.ok, comparison
