"""VACUOUS: rules that can never apply are their own outcome (issue 17), never PROVED.

Before, a rule with no shapes on which both sides are defined with equal shapes came back PROVED
(Z3 proves anything from contradictory hypotheses) with "axioms used: none (both sides are the
same term)". Also here: explanations that name only what a proof used, `taso rules verify` and the
generator on vacuous rules.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import taso_py.verifier.prover as prover
from taso_py.cli import main
from taso_py.generator import pipeline
from taso_py.generator.executor import LocalExecutor
from taso_py.library import parse_rule
from taso_py.library.proof import ProofRecord, Status
from taso_py.library.store import Entry, Library
from taso_py.verifier.encoding import encode_rule
from taso_py.verifier.prover import prove
from taso_py.verifier.vacuity import decide, show

TRANSPOSE_CONCAT = ("transpose(concat(x, y, axis=0), perm=[1, 0]) == "
                    "concat(transpose(x, perm=[1, 0]), transpose(y, perm=[1, 0]), axis=0)")
CONV_PADS = ("conv2d(x, w, stride=[1, 1], pad=[1, 1, 1, 1], act=relu) == "
             "relu(conv2d(x, w, stride=[1, 1], pad=[0, 0, 0, 0]))")


def test_transposed_concat_on_the_wrong_axis_is_vacuous_with_its_shapes() -> None:
    result = prove(parse_rule(TRANSPOSE_CONCAT))
    assert result.status == "VACUOUS", result.to_json()
    case = next(c for c in result.cases if c.ranks == {"x": 2, "y": 2})
    assert case.left == ("[dim(x, 1), dim(x, 0) + dim(y, 0)]",)
    assert case.right == ("[dim(x, 1) + dim(y, 1), dim(x, 0)]",)
    assert case.conflict == ("equal shapes: dim 0: dim(x, 1) == dim(x, 1) + dim(y, 1)",)
    assert "equal output shapes" in result.reason


def test_padded_and_unpadded_convolutions_are_vacuous() -> None:
    result = prove(parse_rule(CONV_PADS))
    assert result.status == "VACUOUS", result.to_json()
    (case,) = result.cases
    assert case.left[0].endswith("dim(x, 2) - dim(w, 2) + 3, dim(x, 3) - dim(w, 3) + 3]")
    assert case.right[0].endswith("dim(x, 2) - dim(w, 2) + 1, dim(x, 3) - dim(w, 3) + 1]")
    assert len(case.conflict) == 1 and case.conflict[0].startswith("equal shapes: dim ")


def test_vacuous_json() -> None:
    doc = prove(parse_rule(TRANSPOSE_CONCAT)).to_json()
    assert doc["status"] == "VACUOUS" and doc["reason"] and doc["seconds"] >= 0
    assert {"ranks", "left", "right", "conflict"} <= set(doc["cases"][0])
    json.dumps(doc)


@pytest.mark.parametrize("text", [TRANSPOSE_CONCAT, CONV_PADS])
def test_cli_says_vacuous_with_both_shapes_and_exits_1(text: str) -> None:
    out = CliRunner().invoke(main, ["verify-rule", text], catch_exceptions=False)
    assert out.exit_code == 1
    assert out.output.startswith("VACUOUS") and "same term" not in out.output
    assert "left shape:" in out.output and "right shape:" in out.output and "equal shapes: dim" in out.output
    doc = json.loads(CliRunner().invoke(main, ["verify-rule", "--json", text]).output)
    assert doc["status"] == "VACUOUS"


def test_a_where_clause_alone_can_make_a_rule_vacuous() -> None:
    text = "transpose(x, perm=[1, 0]) == x"
    assert prove(parse_rule(text)).status == "REFUTED"  # square matrices are instances
    result = prove(parse_rule(text + " where dim(x, 0) != dim(x, 1)"))
    assert result.status == "VACUOUS"
    assert "where clause" in result.reason
    assert all("where dim(x, 0) != dim(x, 1)" in c.conflict for c in result.cases)


def test_a_side_never_defined_under_the_where_clause_is_named() -> None:
    result = prove(parse_rule("matmul(a, b) == relu(a) where rank(a) == 1"))
    assert result.status == "VACUOUS"
    assert result.reason.startswith("the left side is never defined where the where clause holds")


def test_vacuity_is_decided_over_every_rank() -> None:
    """Shapes exist only at rank 4 with unit height and width; at no rank when ranks must differ."""
    assert decide(encode_rule(parse_rule("global_avgpool(x) == x"))) is False
    assert decide(encode_rule(parse_rule("relu(x) == flatten(x, axis=1) where rank(x) != 2"))) is True
    assert decide(encode_rule(parse_rule("split(x, axis=0, sizes=[2, 2])[0] == x"))) is True


def test_a_rule_whose_vacuity_is_undecided_is_never_proved(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prover, "search", lambda *a, **k: (None, 0))
    monkeypatch.setattr(prover, "decide", lambda encoded: None)
    result = prove(parse_rule("add(a, b) == add(b, a)"))
    assert result.status == "UNKNOWN" and "vacuous" in result.reason


def test_explanations_name_only_what_the_proof_used() -> None:
    same = prove(parse_rule("conv2d(x, w) == conv2d(x, w, stride=[1, 1])"))
    assert same.status == "PROVED" and same.same_term and same.explanation() == "none (both sides are the same term)"
    congruent = prove(parse_rule("softmax(x, axis=?k) == softmax(x, axis=?j) where ?k == ?j"))  # no softmax axioms
    assert congruent.status == "PROVED" and not congruent.same_term and not congruent.axioms
    assert "same term" not in congruent.explanation() and "congruence" in congruent.explanation()
    assert congruent.preconditions == ("?k == ?j",)
    commuted = prove(parse_rule("add(a, b) == add(b, a)"))
    assert commuted.explanation() == "add-comm" and not commuted.same_term
    assert commuted.to_json()["same_term"] is False


def test_shapes_read_like_the_rule_syntax() -> None:
    import z3

    from taso_py.verifier.encoding import DIM

    x = z3.Const("x", encode_rule(parse_rule("relu(x) == relu(x)")).env.tensors["x"].sort())
    e = z3.simplify(DIM(x, 2) + 2 - DIM(x, 3) * 3 - 1)
    assert show(e) == "dim(x, 2) - 3 * dim(x, 3) + 1"
    assert show((DIM(x, 1) + 2) / 2 >= 1) == "(dim(x, 1) + 2) // 2 >= 1"


def test_rules_verify_flags_a_vacuous_rule(tmp_path: Path) -> None:
    good = Entry(parse_rule("add(a, b) == add(b, a)"), ProofRecord(Status.PROVED), "hand-written")
    bad = Entry(parse_rule(TRANSPOSE_CONCAT), ProofRecord(Status.PROVED), "hand-written")
    path = tmp_path / "lib.json"
    Library([good, bad]).save(path)
    args = ["rules", "verify", "--library", str(path), "--workers", "1"]
    out = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False)
    assert out.exit_code == 1
    doc = json.loads(out.output)
    assert doc["proved"] == 1 and doc["vacuous"] == 1 and [f["id"] for f in doc["failed"]] == [bad.id]
    assert doc["failed"][0]["status"] == "VACUOUS"
    text = CliRunner().invoke(main, args, catch_exceptions=False)
    assert text.exit_code == 1 and f"{bad.id} (VACUOUS)" in text.output


def test_the_generator_never_keeps_a_vacuous_rule(tmp_path: Path) -> None:
    vacuous, true = TRANSPOSE_CONCAT, "add(a, b) == add(b, a)"
    kept = {t: ("matrix", {"x": [4, 4], "y": [4, 4], "a": [4, 4], "b": [4, 4]}, 4) for t in (vacuous, true)}
    rules: dict = {}
    statuses: dict[str, str] = {}
    checkpoint = pipeline.Checkpoint(tmp_path / "c.jsonl", resume=False)
    try:
        pipeline._prove(LocalExecutor(1), checkpoint, pipeline.Settings(), [vacuous, true], kept, rules, statuses,
                        lambda _n: None)
    finally:
        checkpoint.close()
    assert statuses == {vacuous: "VACUOUS", true: "PROVED"}
    assert list(rules) == [true]


def test_a_rule_that_needs_rank_five_is_unknown_not_vacuous() -> None:
    """The verifier's shapes go up to rank 4: a rule only rank-5 tensors fit is beyond it, which
    says nothing about whether it can apply."""
    result = prover.prove(parse_rule("transpose(transpose(x, perm=[1, 0, 2, 3, 4]), perm=[1, 0, 2, 3, 4]) == x"))
    assert result.status == "UNKNOWN" and "rank above 4" in result.reason
