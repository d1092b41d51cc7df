"""The shipped library holds the rule families real models need (present, or derivable from it)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from taso_py.generator import implied
from taso_py.generator.candidates import canonical
from taso_py.generator.implied import derivable
from taso_py.library.store import load
from taso_py.library.syntax import parse_rule

MATRIX = {"a": [4, 4], "b": [4, 4], "c": [4, 4]}
CONV = {"a": [1, 2, 4, 4], "b": [2, 2, 3, 3], "c": [2, 2, 3, 3]}


@pytest.fixture(scope="module")
def library():
    return load()


def _has(library, text: str) -> bool:
    want = canonical(parse_rule(text))[1]
    return any(canonical(e.rule)[1] == want for e in library)


def _derivable(library, text: str, shapes: dict) -> bool:
    """Present, or reached by rewriting with the library's rules (deeper than the generator's
    pruning looks: a rule it pruned may be justified by rules that were pruned in turn)."""
    rules = [e.rule for e in library if len(e.rule.src) == 1]
    return _has(library, text) or derivable(parse_rule(text), rules, shapes)


def test_the_shipped_library_re_proves(library) -> None:
    """CI's `taso rules verify`: every shipped rule proved again from the axioms as they are now."""
    result = subprocess.run([sys.executable, "-m", "taso_py", "rules", "verify", "--workers", "2", "--json"],
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    report = json.loads(result.stdout)
    assert report["failed"] == [] and report["proved"] == report["rules"] == len(library)
    assert report["vacuous"] == 0  # every shipped rule applies somewhere (issue 17)


def test_the_demo_shows_rules_that_exist(library) -> None:
    makefile = (Path(__file__).parent.parent / "Makefile").read_text()
    shown = re.findall(r"rules show (r[0-9a-f]+)", makefile)
    assert shown and all(library.get(i).id == i for i in shown)


def test_every_rule_is_proved(library) -> None:
    assert len(library) > 100 and {e.proof.proved for e in library} == {True}
    assert library.generator["max_ops"] == 3


def test_merge_two_matmuls_sharing_an_input(library) -> None:
    assert _has(library, "(split(matmul(a, concat(b, c, axis=1)), axis=1, sizes=[dim(b, 1), dim(c, 1)])[0], "
                         "split(matmul(a, concat(b, c, axis=1)), axis=1, sizes=[dim(b, 1), dim(c, 1)])[1]) == "
                         "(matmul(a, b), matmul(a, c))")


def test_merge_two_convs_sharing_an_input(library) -> None:
    conv = "stride=[?s1_0, ?s1_1], pad=[?p0_0, ?p0_1, ?p0_2, ?p0_3], groups=1, act=none"
    merged = f"split(conv2d(a, concat(b, c, axis=0), {conv}), axis=1, sizes=[dim(b, 0), dim(c, 0)])"
    assert _has(library, f"({merged}[0], {merged}[1]) == (conv2d(a, b, {conv}), conv2d(a, c, {conv}))")


def test_merge_two_convs_with_biases_sharing_an_input(library) -> None:
    """Inception's sibling convolutions, which carry biases once batch norms are folded in."""
    conv = "stride=[?s1_0, ?s1_1], pad=[?p0_0, ?p0_1, ?p0_2, ?p0_3], groups=1, act=relu"
    merged = (f"split(conv2d(a, concat(b, c, axis=0), concat(d, e, axis=0), {conv}), axis=1, "
              "sizes=[dim(b, 0), dim(c, 0)])")
    assert _has(library, f"({merged}[0], {merged}[1]) == (conv2d(a, b, d, {conv}), conv2d(a, c, e, {conv}))")


def test_merge_two_projections_of_a_rank3_activation(library) -> None:
    """A transformer's Q, K and V: the merged output splits on the last axis of a rank-3 tensor."""
    merged = "split(matmul(a, concat(b, c, axis=1)), axis=2, sizes=[dim(b, 1), dim(c, 1)])"
    assert _has(library, f"({merged}[0], {merged}[1]) == (matmul(a, b), matmul(a, c))")


def test_conv_relu_fusion(library) -> None:
    assert any("act=relu" in e.text and e.text.startswith("relu(conv2d(") and e.rule.attr_variables()
               for e in library)


@pytest.mark.parametrize("bias", ["", ", c"])
def test_enlarge_a_1x1_kernel_for_its_3x3_sibling(library, bias: str) -> None:
    assert _has(library, f"conv2d(a, enlarge(b, kernel=[3, 3]){bias}, stride=[1, 1], pad=[1, 1, 1, 1], groups=1, "
                         f"act=none) == conv2d(a, b{bias}, stride=[1, 1], pad=[0, 0, 0, 0], groups=1, act=none)")


@pytest.mark.parametrize("text", [
    "matmul(matmul(a, b), c) == matmul(a, matmul(b, c))",
    "matmul(a, add(b, c)) == add(matmul(a, b), matmul(a, c))",
    "matmul(add(a, b), c) == add(matmul(a, c), matmul(b, c))",
    "transpose(transpose(a, perm=[1, 0]), perm=[1, 0]) == a",
    "transpose(matmul(a, b), perm=[1, 0]) == matmul(transpose(b, perm=[1, 0]), transpose(a, perm=[1, 0]))",
    "concat(concat(a, b, axis=1), c, axis=1) == concat(a, concat(b, c, axis=1), axis=1)",
    "transpose(concat(a, b, axis=0), perm=[1, 0]) == concat(transpose(a, perm=[1, 0]), transpose(b, perm=[1, 0]),"
    " axis=1)",
])
def test_matrix_laws(library, text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(implied, "DEPTH", 3)
    monkeypatch.setattr(implied, "MAX_STATES", 3000)
    assert _derivable(library, text, MATRIX)
