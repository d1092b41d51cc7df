"""The verifier's parts: shape models and symbolic semantics against the real operators,
axiom validation (and that it catches a wrong axiom), the prover's outcomes, and the CLI."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from click.testing import CliRunner

from taso_py import ops
from taso_py.cli import main
from taso_py.library import parse_rule
from taso_py.ops.schema import Axiom
from taso_py.ops.symbolic import FLOAT, as_objects
from taso_py.verifier.concrete import Instance, evaluate, numeric, symbolic
from taso_py.verifier.encoding import encode_rule
from taso_py.verifier.prover import prove
from taso_py.verifier.refuter import instances
from taso_py.verifier.validation import validate

# One term per verifiable operator, so its model and semantics can be checked on many shapes.
OP_TERMS = {
    "relu": "relu(x)", "sigmoid": "sigmoid(x)", "tanh": "tanh(x)", "erf": "erf(x)", "silu": "silu(x)",
    "hardswish": "hardswish(x)",
    "gelu": "gelu(x, approximate=tanh)", "add": "add(x, y)", "mul": "mul(x, y)", "sub": "sub(x, y)",
    "div": "div(x, y)", "scalar_mul": "scalar_mul(x, scale=?s)", "matmul": "matmul(x, y)",
    "conv2d": "conv2d(x, y, z, stride=[?a, ?b], pad=[?c, 0, 1, ?d], dilation=[1, ?e], groups=?g, act=relu)",
    "conv_transpose2d": "conv_transpose2d(x, y, z, stride=[?a, ?b], pad=[?c, 0, 1, ?d], output_padding=[?e, 0], "
                        "dilation=[1, ?f], groups=?g)",
    "maxpool2d": "maxpool2d(x, kernel=[?a, 2], stride=[?b, 1], pad=[?c, 0, 0, 1])",
    "avgpool2d": "avgpool2d(x, kernel=[?a, 2], stride=[?b, 1], pad=[?c, 0, 0, 1], count_include_pad=?f)",
    "global_avgpool": "global_avgpool(x)", "enlarge": "enlarge(x, kernel=[?a, ?b])",
    "concat": "concat(x, y, z, axis=?k)", "split": "split(x, axis=?k, sizes=[?a, ?b, ?c])[1]",
    "transpose": "transpose(x, perm=[2, 0, 1])", "reshape": "reshape(x, shape=[?a, ?b])",
    "flatten": "flatten(x, axis=?k)", "pad": "pad(x, pads=[?a, -1, ?b, 2], value=?s)",
    "batchnorm": "batchnorm(x, y, z, u, v, epsilon=0.5)", "softmax": "softmax(x, axis=?k)",
    "const_iconv": "const_iconv(channels=?a, kernel=[?b, 3], groups=?c)",
    "const_pool": "const_pool(channels=?a, kernel=[?b, 2])", "const_imm": "const_imm(n=?a)",
    "const_one": "const_one(shape=[?a, 2, ?b])",
    # -- unary and element-wise operators (issue 20) --
    "clip": "clip(x, min=?s, max=1.5)", "hardsigmoid": "hardsigmoid(x, alpha=?s, beta=0.25)",
    "leaky_relu": "leaky_relu(x, alpha=?s)", "prelu": "prelu(x, y)", "softplus": "softplus(x)", "exp": "exp(x)",
    "log": "log(x)", "sqrt": "sqrt(x)", "reciprocal": "reciprocal(x)", "neg": "neg(x)", "abs": "abs(x)",
    "pow": "pow(x, exponent=?s)",
    # -- reductions (issue 20) --
    "reduce_sum": "reduce_sum(x, axes=[?a], keepdims=true)",
    "reduce_mean": "reduce_mean(x, axes=[?a, ?b], keepdims=true)", "reduce_max": "reduce_max(x, keepdims=true)",
    # -- indexing: slice, gather, expand, select, cast (issue 20) --
    "slice": "slice(x, starts=[?a, -1], ends=[?c, -100], axes=[?k, ?j], steps=[?s, -1])",
    "gather": "gather(x, indices=[?i, -1], shape=[2], axis=?k)", "expand": "expand(x, shape=[?a, ?b, ?c])",
    # -- resize --
    "resize": "resize(x, sizes=[?a, 3], mode=linear, coordinate_transformation_mode=align_corners)",
}


def test_every_verifiable_operator_has_a_term() -> None:
    verifiable = {n for n, op in ops.OPS.items() if op.algebra and op.verifiable}
    assert verifiable == set(OP_TERMS)


def _instances(term: str, count: int, seed: int) -> tuple:
    rule = parse_rule(f"{term} == {term}")
    return rule, instances(rule, encode_rule(rule), count, random.Random(seed), max_dim=4)


@pytest.mark.parametrize("op", sorted(OP_TERMS))
def test_shape_model_and_symbolic_semantics_match_the_operator(op: str) -> None:
    """Where the model defines the op, the real shape rule agrees (evaluate cross-checks it), and
    sym_value over floats equals the numpy reference."""
    rule, found = _instances(OP_TERMS[op], 12, seed=1)
    assert len(found) >= 3, f"too few instances of {op}"
    rng = np.random.default_rng(0)
    for inst in found:
        values = {v: rng.uniform(0.5, 2.0, size=s) for v, s in inst.shapes.items()}
        want = evaluate(rule.src[0], inst, values, numeric)
        objects = {v: as_objects(a, FLOAT) for v, a in values.items()}
        got = evaluate(rule.src[0], inst, objects, symbolic(FLOAT))
        assert got.shape == want.shape
        rtol = 1e-6 if want.dtype == np.float32 else 1e-9  # the constants are float32 by default
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=rtol, atol=1e-12, err_msg=inst.describe())


def test_every_axiom_is_valid_on_a_few_instances() -> None:
    """The fast subset; `taso axioms validate --full` runs the big sweep."""
    failed = {}
    for name, axiom in ops.AXIOMS.items():
        report = validate(axiom, limit=3)
        if not report.ok:
            failed[name] = report.to_json()
    assert not failed


def test_real_attribute_values_are_exact_in_floats() -> None:
    """Instances pick quarters for real attributes: `?s * ?t` then equals the float product the
    operator computes, so scalar-compose is not failed by rounding (it was, with ?s = -4/3)."""
    _rule, found = _instances("scalar_mul(scalar_mul(x, scale=?s), scale=?t)", 40, seed=5)
    assert all(float(v) * 4 == int(float(v) * 4) for inst in found for v in inst.attrs.values())
    assert validate(ops.AXIOMS["scalar-compose"], limit=40).ok


@pytest.mark.parametrize("text, why", [
    ("relu(add(a, b)) == add(relu(a), relu(b))", "relu is not additive"),
    ("concat(relu(a), b, axis=?k) == relu(concat(a, b, axis=?k))", "relu applied to one part only"),
    ("matmul(a, b) == matmul(b, a)", "matmul does not commute"),
    ("split(concat(a, b, axis=?k), axis=?k, sizes=[dim(b, ?k), dim(a, ?k)])[0] == a", "sizes swapped"),
])
def test_a_wrong_axiom_is_caught_with_its_counterexample(text: str, why: str) -> None:
    report = validate(Axiom("wrong", text, why), limit=20)
    assert not report.ok and report.failures, why
    failure = report.failures[0]
    assert failure.instance.shapes and ("differ" in failure.message)


@pytest.mark.parametrize("name", ["relu-scale", "matmul-concat-batch-right-1"])
def test_a_wrong_shape_guard_is_caught(name: str) -> None:
    """Dropping the condition of a conditional axiom makes it invalid."""
    axiom = ops.AXIOMS[name]
    unguarded = axiom.text.split(" where ")[0] + (" where ?k < rank(b) - 2" if "?k" in axiom.text else "")
    report = validate(Axiom("unguarded", unguarded), limit=40)
    assert report.failures, unguarded


# ---- the axioms issue 17 found missing -------------------------------------------------------

_ANY = "stride=[?sh, ?sw], pad=[?pt, ?pl, ?pb, ?pr]"
_HW = "dim(x1, 2) == dim(x2, 2), dim(x1, 3) == dim(x2, 3)"


@pytest.mark.parametrize("text, axiom", [
    ("conv2d(x, add(w1, w2), stride=[1, 1], pad=[1, 1, 1, 1]) == add(conv2d(x, w1, stride=[1, 1], "
     "pad=[1, 1, 1, 1]), conv2d(x, w2, stride=[1, 1], pad=[1, 1, 1, 1]))", "conv-add-weights"),
    (f"conv2d(x, add(w1, w2), {_ANY}) == add(conv2d(x, w1, {_ANY}), conv2d(x, w2, {_ANY})) "
     "where dim(w1, 2) == dim(w2, 2), dim(w1, 3) == dim(w2, 3)", "conv-add-weights"),
    (f"conv2d(add(x1, x2), w, {_ANY}, act=none) == add(conv2d(x1, w, {_ANY}, act=none), "
     f"conv2d(x2, w, {_ANY}, act=none)) where {_HW}", "conv-add-input"),
    ("conv2d(add(x1, x2), w, stride=[2, 2], pad=[1, 1, 1, 1]) == add(conv2d(x1, w, stride=[2, 2], "
     f"pad=[1, 1, 1, 1]), conv2d(x2, w, stride=[2, 2], pad=[1, 1, 1, 1])) where {_HW}", "conv-add-input"),
    ("conv2d(add(x1, x2), w) == add(conv2d(x1, w), conv2d(x2, w))", "conv-add-input-unpadded"),
    ("transpose(add(x, b), perm=[1, 0]) == add(transpose(x, perm=[1, 0]), transpose(b, perm=[1, 0]))",
     "transpose-add-2"),
    ("transpose(add(x, b), perm=[0, 2, 3, 1]) == add(transpose(x, perm=[0, 2, 3, 1]), transpose(b, perm=[0, 2, 3, 1]))",
     "transpose-add-4"),
    ("transpose(add(x, b), perm=[1, 0]) == add(transpose(x, perm=[1, 0]), reshape(b, shape=[dim(b, 0), 1])) "
     "where rank(b) == 1", "transpose-add-vector"),
])
def test_linearity_of_convolution_and_transpose_over_add_are_proved(text: str, axiom: str) -> None:
    """These were UNKNOWN: the axioms asked for equal shapes where broadcasting is fine, or did not exist."""
    result = prove(parse_rule(text))
    assert result.status == "PROVED", result.to_json()
    assert axiom in result.axioms


@pytest.mark.parametrize("text", [
    f"conv2d(add(x1, x2), w, {_ANY}) == add(conv2d(x1, w, {_ANY}), conv2d(x2, w, {_ANY}))",
    f"conv2d(x, add(w1, w2), {_ANY}) == add(conv2d(x, w1, {_ANY}), conv2d(x, w2, {_ANY}))",
])
def test_linearity_with_broadcasting_over_height_and_width_is_refuted(text: str) -> None:
    """Without equal heights and widths a broadcast input (or kernel) is padded (or strided) differently."""
    assert prove(parse_rule(text)).status == "REFUTED"


def test_the_new_axioms_are_valid() -> None:
    names = ["conv-add-weights", "conv-add-input", "conv-add-input-unpadded", "transpose-add-2", "transpose-sub-3",
             "transpose-mul-4", "transpose-add-vector", "add-vector-as-row", "reshape-compose-2-3",
             "reshape-identity-3", "relu-reshape-2"]
    failed = {n: r.to_json() for n in names if not (r := validate(ops.AXIOMS[n], limit=12)).ok}
    assert not failed


_CONV = "stride=[?sh, ?sw], pad=[?pt, ?pl, ?pb, ?pr], dilation=[?dh, ?dw], groups=?g"


@pytest.mark.parametrize("text, why", [
    (f"conv2d(add(a, b), w, {_CONV}) == add(conv2d(a, w, {_CONV}), conv2d(b, w, {_CONV}))",
     "conv-add-input without equal heights and widths"),
    ("conv2d(add(a, b), w, stride=[?sh, ?sw], pad=[1, 1, 1, 1]) == add(conv2d(a, w, stride=[?sh, ?sw], "
     "pad=[1, 1, 1, 1]), conv2d(b, w, stride=[?sh, ?sw], pad=[1, 1, 1, 1]))", "conv-add-input-unpadded, padded"),
    ("transpose(add(a, b), perm=[1, 0]) == add(transpose(a, perm=[1, 0]), reshape(b, shape=[1, dim(b, 0)])) "
     "where rank(b) == 1", "transpose-add-vector with the bias as a row"),
    ("transpose(add(a, b), perm=[?p0, ?p1, ?p2]) == add(transpose(a, perm=[?p0, ?p1, ?p2]), b)",
     "transpose-add-3 leaving one operand untransposed"),
    ("add(a, reshape(b, shape=[?n, 1])) == add(a, b) where rank(b) == 1, rank(a) >= 2",
     "add-vector-as-row with the vector as a column"),
])
def test_a_wrong_variant_of_a_new_axiom_fails_validation(text: str, why: str) -> None:
    report = validate(Axiom("wrong", text, why), limit=20)
    assert report.failures, why


def test_proved_rule_names_axioms_from_the_unsat_core() -> None:
    result = prove(parse_rule("relu(conv2d(x, w, pad=[1, 1, 1, 1])) == conv2d(x, w, pad=[1, 1, 1, 1], act=relu)"))
    assert result.status == "PROVED"
    assert result.axioms == ("conv-relu",)


def test_precondition_from_the_where_clause_is_reported() -> None:
    """TASO could not prove this grouped-convolution identity: it holds only when the halves match."""
    text = ("conv2d(concat(a, b, axis=1), concat(c, d, axis=0), groups=2) == "
            "concat(conv2d(a, c), conv2d(b, d), axis=1)")
    assert prove(parse_rule(text)).status == "REFUTED"
    result = prove(parse_rule(text + " where dim(c, 0) == dim(d, 0)"))
    assert result.status == "PROVED"
    assert result.preconditions == ("dim(c, 0) == dim(d, 0)",)
    assert "conv-groups-concat" in result.axioms


def test_shape_dependent_identity_without_its_condition_is_refuted() -> None:
    pool = "kernel=[2, 2], stride=[2, 2]"
    text = (f"maxpool2d(concat(a, b, axis=2), {pool}) == "
            f"concat(maxpool2d(a, {pool}), maxpool2d(b, {pool}), axis=2)")
    result = prove(parse_rule(text))
    assert result.status == "REFUTED"
    cx = result.counterexample
    assert cx.shapes["a"][2] % 2 == 1  # the odd height is what breaks it
    assert not np.allclose(cx.src, cx.dst)


def test_counterexample_is_reproducible_with_numpy() -> None:
    rule = parse_rule("transpose(matmul(a, b), perm=[1, 0]) == matmul(transpose(a, perm=[1, 0]), "
                      "transpose(b, perm=[1, 0]))")
    result = prove(rule)
    assert result.status == "REFUTED"
    cx = result.counterexample
    a, b = cx.inputs["a"], cx.inputs["b"]
    np.testing.assert_array_equal(cx.src, (a @ b).T)
    np.testing.assert_array_equal(cx.dst, a.T @ b.T)


def test_a_timeout_is_unknown_never_a_proof() -> None:
    rule = parse_rule("matmul(matmul(matmul(a, b), c), d) == matmul(a, matmul(b, matmul(c, d)))")
    result = prove(rule, timeout=0.001, refute_first=False)
    assert result.status == "UNKNOWN"


def test_operator_outside_the_model_is_unknown() -> None:
    result = prove(parse_rule("layernorm(x, s) == layernorm(x, s)"))
    assert result.status == "UNKNOWN" and "outside the verifier's model" in result.reason


def test_instances_satisfy_the_rule_hypotheses() -> None:
    rule = parse_rule("matmul(x, concat(w1, w2, axis=1)) == concat(matmul(x, w1), matmul(x, w2), axis=1)")
    for inst in instances(rule, encode_rule(rule), 10, random.Random(3)):
        assert isinstance(inst, Instance)
        assert inst.shapes["x"][-1] == inst.shapes["w1"][-2]


# ---- CLI ---------------------------------------------------------------------------------

def _run(*args: str) -> object:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_cli_verify_rule_exit_codes() -> None:
    proved = _run("verify-rule", "add(a, b) == add(b, a)")
    assert proved.exit_code == 0 and "PROVED" in proved.output and "add-comm" in proved.output
    refuted = _run("verify-rule", "relu(add(a, b)) == add(relu(a), relu(b))")
    assert refuted.exit_code == 1 and "REFUTED" in refuted.output and "counterexample" in refuted.output


def test_cli_prints_list_attributes_verbatim() -> None:
    """Rule text holds brackets; the console must not read them as markup."""
    text = "relu(conv2d(x, w, pad=[1, 1, 1, 1])) == conv2d(x, w, pad=[1, 1, 1, 1], act=relu)"
    assert text in _run("verify-rule", text).output
    listed = _run("axioms", "list").output
    assert "sizes=[dim(a, ?k)," in listed.replace("\n", "")


def test_cli_verify_rule_json() -> None:
    out = _run("verify-rule", "--json", "matmul(matmul(a, b), c) == matmul(a, matmul(b, c))")
    doc = json.loads(out.output)
    assert doc["status"] == "PROVED" and doc["axioms"] == ["matmul-assoc"] and doc["method"] == "z3-axioms"


def test_cli_malformed_rule_is_exit_2_with_the_column(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as e:
        main(["verify-rule", "relu(add(a, b) == x"], standalone_mode=False)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "column 16" in err and len(err.strip().splitlines()) == 1


def test_cli_invalid_attribute_value_is_exit_2(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit) as e:
        main(["verify-rule", "conv2d(x, w, act=foo) == conv2d(x, w, act=foo)"], standalone_mode=False)
    assert e.value.code == 2
    assert "act must be one of" in capsys.readouterr().err


def test_cli_axioms_list_and_validate() -> None:
    listed = json.loads(_run("axioms", "list", "--json").output)
    assert {a["name"] for a in listed["axioms"]} == set(ops.AXIOMS)
    checked = _run("axioms", "validate", "--only", "add-comm", "--only", "conv-enlarge", "--json")
    doc = json.loads(checked.output)
    assert checked.exit_code == 0 and doc["failed"] == [] and len(doc["axioms"]) == 2
