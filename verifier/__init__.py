"""The verifier: proves rewrite rules from validated operator axioms with Z3, or refutes them.

`prove(rule)` returns `Proved`, `Refuted`, `Vacuous` or `Unknown` (see `verifier.prover`);
`validate(axiom)` checks an axiom against the operators' semantics (see `verifier.validation`).
"""

from taso_py.verifier.prover import prove
from taso_py.verifier.results import Counterexample, Proved, Refuted, Result, Unknown, Vacuous
from taso_py.verifier.validation import validate

__all__ = ["Counterexample", "Proved", "Refuted", "Result", "Unknown", "Vacuous", "prove", "validate"]
