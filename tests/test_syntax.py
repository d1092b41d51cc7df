"""The rule text syntax: examples parse to the expected AST, printing round-trips, and every
error names the right column."""

from __future__ import annotations

import dataclasses
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from taso_py import ops
from taso_py.errors import InputError
from taso_py.library import (
    Apply,
    AttrVar,
    BinOp,
    Call,
    Cond,
    Dim,
    Lit,
    Pick,
    Rank,
    Rule,
    RuleSyntaxError,
    Seq,
    Var,
    format_expr,
    format_rule,
    format_term,
    parse_rule,
    parse_term,
    walk,
    walk_expr,
)

EXAMPLES = [
    "matmul(x, concat(w1, w2, axis=1)) == concat(matmul(x, w1), matmul(x, w2), axis=1)",
    "relu(conv2d(x, w, stride=[1, 1], pad=[1, 1, 1, 1])) == conv2d(x, w, stride=[1, 1], pad=[1, 1, 1, 1], act=relu)",
    "(matmul(x, w1), matmul(x, w2)) == (split(matmul(x, concat(w1, w2, axis=1)), axis=1, "
    "sizes=[dim(w1, 1), dim(w2, 1)])[0], split(matmul(x, concat(w1, w2, axis=1)), axis=1, "
    "sizes=[dim(w1, 1), dim(w2, 1)])[1])",
    "maxpool2d(concat(a, b, axis=2), kernel=[2, 2], stride=[2, 2]) == concat(maxpool2d(a, kernel=[2, 2], "
    "stride=[2, 2]), maxpool2d(b, kernel=[2, 2], stride=[2, 2]), axis=2) where dim(a, 2) % 2 == 0",
    "matmul(x, concat(w1, w2, axis=?a)) == concat(matmul(x, w1), matmul(x, w2), axis=-1) where ?a == rank(w1) - 1",
    "scalar_mul(x, scale=2.5) == scalar_mul(x, scale=2.5)",
    'gelu(x, approximate=tanh) == gelu(x, approximate="tanh")',
]
x, w1, w2 = Var("x"), Var("w1"), Var("w2")


def mm(a, b):
    return Apply("matmul", (a, b), ())


def cat(*args, axis):
    return Apply("concat", args, (("axis", axis),))


# ---- examples --------------------------------------------------------------------------

@pytest.mark.parametrize("text", EXAMPLES)
def test_examples_round_trip(text: str) -> None:
    rule = parse_rule(text)
    printed = format_rule(rule)
    assert parse_rule(printed) == rule
    assert format_rule(parse_rule(printed)) == printed


def test_matmul_concat_ast() -> None:
    rule = parse_rule(EXAMPLES[0])
    assert rule == Rule((mm(x, cat(w1, w2, axis=Lit(1))),), (cat(mm(x, w1), mm(x, w2), axis=Lit(1)),))
    assert format_rule(rule) == EXAMPLES[0]


def test_fused_activation_is_a_bare_word() -> None:
    (dst,) = parse_rule(EXAMPLES[1]).dst
    assert dst.attrs == (("stride", Seq((Lit(1), Lit(1)))), ("pad", Seq((Lit(1),) * 4)), ("act", Lit("relu")))


def test_multi_output_rule_picks_split_outputs() -> None:
    rule = parse_rule(EXAMPLES[2])
    assert rule.src == (mm(x, w1), mm(x, w2))
    assert [type(t) for t in rule.dst] == [Pick, Pick] and [t.index for t in rule.dst] == [0, 1]
    split = rule.dst[1].term
    assert split.op == "split" and split.args == (mm(x, cat(w1, w2, axis=Lit(1))),)
    assert dict(split.attrs)["sizes"] == Seq((Dim("w1", Lit(1)), Dim("w2", Lit(1))))


def test_where_clause_and_negative_literal() -> None:
    rule = parse_rule(EXAMPLES[4])
    assert rule.src[0].args[1].attrs == (("axis", AttrVar("a")),)
    assert rule.dst[0].attrs == (("axis", Lit(-1)),)
    assert rule.where == (Cond("==", AttrVar("a"), BinOp("-", Rank("w1"), Lit(1))),)
    assert parse_rule(EXAMPLES[3]).where == (Cond("==", BinOp("%", Dim("a", Lit(2)), Lit(2)), Lit(0)),)


def test_literal_kinds() -> None:
    assert parse_rule(EXAMPLES[5]).src[0].attrs == (("scale", Lit(2.5)),)
    rule = parse_rule(EXAMPLES[6])
    assert rule.src == rule.dst and rule.src[0].attrs == (("approximate", Lit("tanh")),)
    term = parse_term('maxpool2d(x, ceil_mode=true, pad=[0, "a b", -0.5, 1e-05, ?p])')
    assert term.attrs == (("ceil_mode", Lit(True)),
                          ("pad", Seq((Lit(0), Lit("a b"), Lit(-0.5), Lit(1e-05), AttrVar("p")))))
    assert format_term(term) == 'maxpool2d(x, ceil_mode=true, pad=[0, "a b", -0.5, 1e-05, ?p])'


def test_literals_of_different_types_differ() -> None:
    assert Lit(1) != Lit(True) and Lit(1) != Lit(1.0) and Lit(1) == Lit(1)
    assert len({Lit(1), Lit(True), Lit(1.0)}) == 3
    assert parse_term("flatten(x, axis=true)") != parse_term("flatten(x, axis=1)")


def test_one_tuple_side_prints_bare() -> None:
    assert parse_rule("(relu(x),) == (relu(x))") == parse_rule("relu(x) == relu(x)")
    assert format_rule(parse_rule("(relu(x),) == (relu(x))")) == "relu(x) == relu(x)"
    assert format_rule(parse_rule("(x, y,) == (y, x)")) == "(x, y) == (y, x)"


def test_where_conditions_joined_by_and_or_comma() -> None:
    rule = parse_rule("x == x where 1 < 2 and ?a >= 0, max(?a, 1) != min(2, 3)")
    assert [c.op for c in rule.where] == ["<", ">=", "!="]
    assert rule.where[2].left == Call("max", (AttrVar("a"), Lit(1)))
    assert format_rule(rule) == "x == x where 1 < 2, ?a >= 0, max(?a, 1) != min(2, 3)"


# ---- expressions ---------------------------------------------------------------------

def expr_of(text: str):
    return parse_term(f"flatten(x, axis={text})").attrs[0][1]


@pytest.mark.parametrize(("text", "expected"), [
    ("-1", Lit(-1)),
    ("-(2)", Lit(-2)),
    ("- -1", Lit(1)),
    ("-2.5", Lit(-2.5)),
    ("-?a", BinOp("*", Lit(-1), AttrVar("a"))),
    ("-true", BinOp("*", Lit(-1), Lit(True))),
    ("1 - 2 - 3", BinOp("-", BinOp("-", Lit(1), Lit(2)), Lit(3))),
    ("1 + 2 * 3", BinOp("+", Lit(1), BinOp("*", Lit(2), Lit(3)))),
    ("-?a * 2", BinOp("*", BinOp("*", Lit(-1), AttrVar("a")), Lit(2))),
    ("[]", Seq(())),
])
def test_expression_ast(text: str, expected) -> None:
    assert expr_of(text) == expected


@pytest.mark.parametrize(("text", "printed"), [
    ("(1 - 2) - 3", "1 - 2 - 3"),
    ("1 - (2 - 3)", "1 - (2 - 3)"),
    ("(1 + 2) * 3", "(1 + 2) * 3"),
    ("1 + (2 * 3)", "1 + 2 * 3"),
    ("?a // (?b % 2)", "?a // (?b % 2)"),
    ("-(?a + 1)", "-1 * (?a + 1)"),
    ("x - -?a", "x - -1 * ?a"),
    ('"where"', '"where"'),
    ('"x\\"y"', '"x\\"y"'),
    ("dim(x, rank(x) - 1)", "dim(x, rank(x) - 1)"),
])
def test_expression_printing(text: str, printed: str) -> None:
    assert format_expr(expr_of(text)) == printed
    assert expr_of(printed) == expr_of(text)


# ---- errors --------------------------------------------------------------------------

ERRORS = [
    ("matmull(x, y) == x", 1, "unknown operator 'matmull' (did you mean 'matmul'?)"),
    ("zzz(x) == x", 1, "unknown operator 'zzz'"),
    ("relu == x", 1, "operator 'relu' needs arguments"),
    ("add(x, relu) == x", 8, "operator 'relu' needs arguments"),
    ("concat(x, y, axes=1) == x", 14, "concat has no attribute 'axes' (has: axis)"),
    ("relu(x, act=relu) == x", 9, "relu has no attribute 'act' (has: none)"),
    ("concat(x, y, axis=1, axis=2) == x", 22, "duplicate attribute 'axis' of concat"),
    ("concat(x, axis=1, y) == x", 19, "tensor argument after the attributes of concat"),
    ("x == matmul(x)", 6, "matmul: takes 2 inputs (a, b), got 1"),
    ("concat() == x", 1, "concat: takes 1+ inputs (x), got 0"),
    ("(x, y) == x", 11, "the left side has 2 terms but the right side has 1"),
    ("x[0] == x", 2, "cannot pick an output of tensor variable 'x'"),
    ("split(x, axis=0, sizes=[1])[0][0] == x", 31, "cannot pick an output of a picked output"),
    ("split(x, axis=0, sizes=[1])[a] == x", 29, "expected an output index after '[', found 'a'"),
    ("concat(x, axis=dim(y, 0)) == x", 20, "dim of 'y', which is not a tensor variable of the rule"),
    ("x == x where rank(z) == 1", 19, "rank of 'z', which is not a tensor variable of the rule"),
    ("matmul(x, y", 12, "expected ')' after the arguments of matmul, found end of rule"),
    ("x == x $", 8, "unexpected character '$'"),
    ('gelu(x, approximate="tanh) == x', 21, "unterminated string"),
    ('gelu(x, approximate="\\q") == x', 21, 'bad string literal "\\q"'),
    ("x == y == z", 8, "expected 'where' or end of rule, found '=='"),
    ("x == x where 1", 15, "expected a comparison (== != < <= > >=), found end of rule"),
    ("x == x where 1 < 2 3", 20, "expected ',', 'and' or end of rule, found '3'"),
    ("X == x", 1, "tensor variables are lowercase names, found 'X'"),
    ("where == x", 1, "'where' is a reserved word, not a tensor variable"),
    ("x = x", 3, "expected '==' between the sides of the rule, found '='"),
    ("() == x", 2, "expected a term, found ')'"),
    ("scalar_mul(x, scale=1e999) == x", 21, "number out of range: 1e999"),
    ("flatten(x, axis=and) == x", 17, "'and' is a reserved word; quote it to use it as a string"),
    ("flatten(x, axis=dim) == x", 20, "expected '(' after dim, found ')'"),
    ("flatten(x, axis=max()) == x", 21, "max needs at least one argument"),
    ("flatten(x, axis=(1) == x", 21, "expected ')' after the arguments of flatten, found '=='"),
    ("flatten(x, axis=[1, 2) == x", 22, "expected ']' after the list items, found ')'"),
]


@pytest.mark.parametrize(("text", "column", "message"), ERRORS)
def test_errors_name_the_column(text: str, column: int, message: str) -> None:
    with pytest.raises(RuleSyntaxError) as info:
        parse_rule(text)
    assert (info.value.column, info.value.message) == (column, message)
    assert str(info.value) == f"column {column}: {message}"
    assert info.value.text == text


def test_error_is_an_input_error_with_a_pointer() -> None:
    with pytest.raises(InputError) as info:
        parse_rule("matmul(x, y) == relu")
    assert isinstance(info.value, RuleSyntaxError)
    assert info.value.pointer() == "matmul(x, y) == relu\n                ^"
    copy = pickle.loads(pickle.dumps(info.value))
    assert (str(copy), copy.column, copy.text) == (str(info.value), 17, info.value.text)


def test_pointer_keeps_columns_across_whitespace() -> None:
    with pytest.raises(RuleSyntaxError) as info:
        parse_rule("relu(x)\n\t== $")
    assert info.value.column == 13
    assert info.value.pointer() == "relu(x)  == $\n            ^"


def test_parse_term_errors() -> None:
    with pytest.raises(RuleSyntaxError, match=r"^column 9: expected end of term, found '=='$"):
        parse_term("relu(x) == x")
    with pytest.raises(RuleSyntaxError, match="found end of term"):
        parse_term("relu(")
    with pytest.raises(RuleSyntaxError, match="not a tensor variable of the term"):
        parse_term("flatten(x, axis=rank(y))")


# ---- helpers -------------------------------------------------------------------------

def test_variables_in_order_of_first_appearance() -> None:
    rule = parse_rule("concat(b, axis=dim(c, ?k)) == add(a, concat(c, b, axis=?j)) where ?i == ?k")
    assert rule.variables() == ("b", "c", "a")
    assert rule.attr_variables() == ("k", "j", "i")
    assert parse_rule(EXAMPLES[2]).variables() == ("x", "w1", "w2")


def test_walk_is_pre_order() -> None:
    term = parse_term("split(add(x, relu(y)), axis=0, sizes=[1, 1])[1]")
    assert [format_term(t) for t in walk(term)][1:] == [
        "split(add(x, relu(y)), axis=0, sizes=[1, 1])", "add(x, relu(y))", "x", "relu(y)", "y"]
    assert list(walk_expr(expr_of("max(?a, 1) + 2"))) == [
        expr_of("max(?a, 1) + 2"), Call("max", (AttrVar("a"), Lit(1))), AttrVar("a"), Lit(1), Lit(2)]


# ---- properties ----------------------------------------------------------------------

OPDEFS = [ops.get(name) for name in ops.algebra_names()]
VARS = ["x", "y", "w1", "_t"]
words = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,5}", fullmatch=True)
literals = st.one_of(st.integers(-10**6, 10**6), st.floats(allow_nan=False, allow_infinity=False),
                     st.booleans(), st.text(max_size=4), words).map(Lit)


def exprs(tensor_vars: list[str]) -> st.SearchStrategy:
    """Expressions whose dim/rank name only `tensor_vars` (which the parser requires)."""
    leaves = st.one_of(literals, words.map(AttrVar), *([st.sampled_from(tensor_vars).map(Rank)] if tensor_vars else []))

    def extend(sub: st.SearchStrategy) -> st.SearchStrategy:
        options = [st.builds(BinOp, st.sampled_from(["+", "-", "*", "//", "%"]), sub, sub),
                   st.builds(Call, st.sampled_from(["max", "min"]), st.lists(sub, min_size=1, max_size=3).map(tuple)),
                   st.lists(sub, max_size=3).map(lambda items: Seq(tuple(items)))]
        if tensor_vars:
            options.append(st.builds(Dim, st.sampled_from(tensor_vars), sub))
        return st.one_of(options)

    return st.recursive(leaves, extend, max_leaves=6)


def applications(sub: st.SearchStrategy) -> st.SearchStrategy:
    """An operator over the right number of tensor arguments; attributes are filled in later."""
    def args_for(op: ops.OpDef) -> st.SearchStrategy:
        low = len(op.inputs) - op.optional
        high = low + 2 if op.variadic else len(op.inputs)
        return st.lists(sub, min_size=low, max_size=high).map(lambda args: Apply(op.name, tuple(args), ()))
    return st.sampled_from(OPDEFS).flatmap(args_for)


shapes = st.recursive(st.sampled_from(VARS).map(Var),
                      lambda sub: st.one_of(applications(sub), st.builds(Pick, applications(sub), st.integers(0, 3))),
                      max_leaves=5)


def with_attrs(draw: st.DrawFn, term, values: st.SearchStrategy):
    """`term` with random attributes (valid names, no duplicates) on every application."""
    if isinstance(term, Pick):
        return Pick(with_attrs(draw, term.term, values), term.index)
    if isinstance(term, Var):
        return term
    names = [f.name for f in dataclasses.fields(ops.get(term.op).attrs)]
    chosen = draw(st.lists(st.sampled_from(names), unique=True)) if names else []
    return Apply(term.op, tuple(with_attrs(draw, a, values) for a in term.args),
                 tuple((name, draw(values)) for name in chosen))


@st.composite
def rules(draw: st.DrawFn) -> Rule:
    n = draw(st.integers(1, 2))
    src, dst = (tuple(draw(shapes) for _ in range(n)) for _ in range(2))
    used = sorted({t.name for term in (*src, *dst) for t in walk(term) if isinstance(t, Var)})
    values = exprs(used)
    conds = st.builds(Cond, st.sampled_from(["==", "!=", "<", "<=", ">", ">="]), values, values)
    return Rule(tuple(with_attrs(draw, t, values) for t in src), tuple(with_attrs(draw, t, values) for t in dst),
                tuple(draw(st.lists(conds, max_size=2))))


@settings(max_examples=60, deadline=None)
@given(rules())
def test_round_trip_over_generated_rules(rule: Rule) -> None:
    text = format_rule(rule)
    assert parse_rule(text) == rule
    assert format_rule(parse_rule(text)) == text


TOKENS = ["x", "y", "matmul", "relu", "concat", "split", "(", ")", "[", "]", ",", "=", "==", "axis", "1", "-",
          "?a", "dim", "rank", "max", "where", "and", "<", "2.5", '"s"', "*", "//", "true", "0", "X", "$"]


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(st.sampled_from(TOKENS), max_size=12).map(" ".join),
                 st.tuples(st.sampled_from(EXAMPLES), st.integers(0, 300), st.integers(0, 3), st.text(max_size=2))
                 .map(lambda t: t[0][:t[1]] + t[3] + t[0][t[1] + t[2]:])))
def test_any_text_parses_or_raises_a_syntax_error(text: str) -> None:
    try:
        rule = parse_rule(text)
    except RuleSyntaxError as e:
        assert 1 <= e.column <= len(text) + 1
        return
    printed = format_rule(rule)
    assert parse_rule(printed) == rule and format_rule(parse_rule(printed)) == printed


def test_no_operator_is_named_like_a_reserved_word() -> None:
    """An operator called `where` (ONNX's Where) would read as the start of a rule's conditions."""
    from taso_py.library.syntax import _RESERVED

    assert not set(ops.algebra_names()) & _RESERVED
