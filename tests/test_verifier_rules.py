"""The verifier against hand-written rules (tests/verifier_cases.py).

Soundness: no wrong rule may be PROVED (each is checked on its own). Completeness: at least 95%
of the true rules come back PROVED, each within the timeout; one test over the whole list, which
names every true rule that was not proved. True rules beyond the current axioms must at least
never be REFUTED.
"""

from __future__ import annotations

import pytest

from taso_py.library import parse_rule
from taso_py.verifier.prover import prove
from tests.verifier_cases import HARD_TRUE_RULES, TRUE_RULES, WRONG_RULES, Case

TIMEOUT = 10.0
MIN_PROVED = 0.95


def test_case_lists_are_large_and_distinct() -> None:
    assert len(TRUE_RULES) >= 45 and len(WRONG_RULES) >= 45
    texts = [c.text for c in (*TRUE_RULES, *HARD_TRUE_RULES, *WRONG_RULES)]
    assert len(set(texts)) == len(texts), "a rule is listed twice"


@pytest.mark.parametrize("case", WRONG_RULES, ids=lambda c: c.why)
def test_wrong_rule_is_never_proved(case: Case) -> None:
    result = prove(parse_rule(case.text), timeout=TIMEOUT)
    assert result.status in ("REFUTED", "UNKNOWN"), f"{case.text} ({case.why}) was {result.to_json()}"


@pytest.mark.parametrize("case", HARD_TRUE_RULES, ids=lambda c: c.why)
def test_hard_true_rule_is_never_refuted(case: Case) -> None:
    result = prove(parse_rule(case.text), timeout=TIMEOUT)
    assert result.status in ("PROVED", "UNKNOWN"), f"{case.text} ({case.why}) was {result.to_json()}"


def test_true_rules_are_proved() -> None:
    failures = []
    for case in TRUE_RULES:
        result = prove(parse_rule(case.text), timeout=TIMEOUT)
        if result.status != "PROVED":
            detail = getattr(result, "reason", None) or result.status
            failures.append(f"{case.text} [{case.why}]: {result.status}: {detail}")
        elif result.seconds > TIMEOUT:
            failures.append(f"{case.text} [{case.why}]: proved in {result.seconds:.1f} s > {TIMEOUT} s")
    proved = 1 - len(failures) / len(TRUE_RULES)
    assert proved >= MIN_PROVED, (f"{proved:.0%} of {len(TRUE_RULES)} true rules proved; not proved:\n"
                                  + "\n".join(failures))
