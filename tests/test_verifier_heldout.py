"""`verify-rule` judged as issue 17 judges it, on a held-out-style set (tests/verifier_heldout_cases.py).

The bar: at least 95% of the true identities PROVED (each within the timeout), no wrong rule
PROVED (nor called VACUOUS: each has shapes where it fails) and every vacuous rule VACUOUS. Each
test lists every case that misses, with what the prover said.
"""

from __future__ import annotations

from taso_py.generator.candidates import canonical
from taso_py.library import parse_rule
from taso_py.verifier.prover import prove
from tests.verifier_cases import HARD_TRUE_RULES, TRUE_RULES, WRONG_RULES, Case
from tests.verifier_heldout_cases import TRUE, VACUOUS, WRONG

TIMEOUT = 10.0
MIN_PROVED = 0.95


def _misses(cases: list[Case], wanted: set[str]) -> list[str]:
    out = []
    for case in cases:
        result = prove(parse_rule(case.text), timeout=TIMEOUT)
        if result.status not in wanted or result.seconds > TIMEOUT:
            detail = getattr(result, "reason", "") or f"{result.seconds:.1f} s"
            out.append(f"{result.status}: {case.text} [{case.why}]: {detail}")
    return out


def test_the_set_is_large_and_apart_from_the_other_cases() -> None:
    assert len(TRUE) >= 40 and len(WRONG) >= 40 and len(VACUOUS) >= 10
    mine = [canonical(parse_rule(c.text))[1] for c in (*TRUE, *WRONG, *VACUOUS)]
    assert len(set(mine)) == len(mine), "a rule is listed twice"
    others = {canonical(parse_rule(c.text))[1] for c in (*TRUE_RULES, *HARD_TRUE_RULES, *WRONG_RULES)}
    assert not others & set(mine)


def test_true_identities_are_proved() -> None:
    misses = _misses(TRUE, {"PROVED"})
    assert 1 - len(misses) / len(TRUE) >= MIN_PROVED, "\n".join(misses)


def test_no_wrong_rule_is_proved() -> None:
    assert not _misses(WRONG, {"REFUTED", "UNKNOWN"})


def test_every_vacuous_rule_is_vacuous() -> None:
    assert not _misses(VACUOUS, {"VACUOUS"})
