"""Graph IR: nodes over inputs and weights, with validation, hashing, evaluation and folding."""

from taso_py.graph.evaluate import evaluate
from taso_py.graph.fold import fold_constants
from taso_py.graph.hashing import canonical_hash
from taso_py.graph.ir import Graph, Node, Ref
from taso_py.graph.validate import validate
from taso_py.graph.views import dump, to_networkx

__all__ = ["Graph", "Node", "Ref", "canonical_hash", "dump", "evaluate", "fold_constants", "to_networkx",
           "validate"]
