"""The text syntax of rewrite rules: a parser to the AST of `terms` and a canonical printer.

    rule  := side '==' side ['where' cond {(',' | 'and') cond}]
    side  := term | '(' term {',' term} [','] ')'
    term  := NAME | OPNAME '(' [term {',' term}] {',' NAME '=' expr} ')' | term '[' INT ']'
    expr  := arithmetic (+ - * // %, unary minus, parentheses) over INT, FLOAT, true, false,
             bare words and "strings" (str), ?NAME, dim(NAME, expr), rank(NAME),
             max(...), min(...), [expr, ...]
    cond  := expr ('==' | '!=' | '<' | '<=' | '>' | '>=') expr

The parser checks what it can without shapes (operator names, attribute names, arities, that
dim/rank name a tensor variable of the rule) and reports the column of the offending token. It
keeps attribute values as expressions: converting them to an operator's attributes is the
consumer's job, once a match has bound the variables. Unary minus folds into a number literal
(`-1` is `Lit(-1)`); on anything else it is `BinOp('*', Lit(-1), e)`, which prints as `-1 * e`.
A one-term side prints without parentheses (`(t)` and `t` mean the same).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
from typing import NamedTuple, NoReturn

from taso_py import ops
from taso_py.errors import InputError, ShapeError
from taso_py.library.terms import (
    Apply,
    AttrVar,
    BinOp,
    Call,
    Cond,
    Dim,
    Expr,
    Lit,
    Pick,
    Rank,
    Rule,
    Seq,
    Term,
    Var,
    walk,
)


class RuleSyntaxError(InputError):
    """A rule that does not parse or names things that do not exist; `column` is 1-based."""

    def __init__(self, message: str, text: str, column: int) -> None:
        super().__init__(f"column {column}: {message}")
        self.message, self.text, self.column = message, text, column

    def __reduce__(self) -> tuple[type, tuple[str, str, int]]:
        """Pickle by the constructor's arguments (the default would pass the formatted line)."""
        return type(self), (self.message, self.text, self.column)

    def pointer(self) -> str:
        """The rule text and a caret under the column, for showing the error to a person."""
        line = re.sub(r"\s", " ", self.text)  # one line whose characters keep their columns
        return f"{line}\n{' ' * (self.column - 1)}^"


# ---- tokens --------------------------------------------------------------------------

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<float>[0-9]+\.[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+[eE][+-]?[0-9]+)
  | (?P<int>[0-9]+)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<attrvar>\?[A-Za-z_][A-Za-z0-9_]*)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<punct>==|!=|<=|>=|//|[-+*%<>()\[\],=])
""", re.VERBOSE)
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VAR = re.compile(r"[a-z_][a-z0-9_]*")
_RESERVED = frozenset({"dim", "rank", "max", "min", "true", "false", "where", "and"})
_COMPARE = ("==", "!=", "<", "<=", ">", ">=")
_PREC = {"+": 1, "-": 1, "*": 2, "//": 2, "%": 2}


class _Token(NamedTuple):
    kind: str  # a group name of _TOKEN, or "end"
    text: str
    pos: int  # 0-based offset in the rule text


def _tokenize(text: str) -> list[_Token]:
    """Tokens without whitespace, ending with an "end" token at the end of the text."""
    tokens, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None:
            what = "unterminated string" if text[pos] == '"' else f"unexpected character {text[pos]!r}"
            raise RuleSyntaxError(what, text, pos + 1)
        if match.lastgroup != "ws":
            tokens.append(_Token(match.lastgroup or "", match.group(), pos))
        pos = match.end()
    tokens.append(_Token("end", "", len(text)))
    return tokens


# ---- parser --------------------------------------------------------------------------

class _Parser:
    """Recursive descent over the token list; `refs` collects dim/rank names to check at the end."""

    def __init__(self, text: str, what: str) -> None:
        self.text, self.what = text, what
        self.tokens = _tokenize(text)
        self.i = 0
        self.refs: list[tuple[str, _Token]] = []

    @property
    def tok(self) -> _Token:
        return self.tokens[self.i]

    def peek(self) -> _Token:
        return self.tokens[min(self.i + 1, len(self.tokens) - 1)]

    def at(self, text: str) -> bool:
        """Whether the current token is punctuation or a word spelled `text` (strings keep quotes)."""
        return self.tok.kind != "end" and self.tok.text == text

    def advance(self) -> _Token:
        tok = self.tok
        self.i = min(self.i + 1, len(self.tokens) - 1)
        return tok

    def fail(self, message: str, tok: _Token | None = None) -> NoReturn:
        raise RuleSyntaxError(message, self.text, (tok or self.tok).pos + 1)

    def found(self) -> str:
        return f"end of {self.what}" if self.tok.kind == "end" else f"'{self.tok.text}'"

    def expect(self, text: str, context: str) -> _Token:
        if not self.at(text):
            self.fail(f"expected '{text}' {context}, found {self.found()}")
        return self.advance()

    # -- rules and terms --

    def rule(self) -> Rule:
        src = self.side()
        self.expect("==", "between the sides of the rule")
        dst_tok = self.tok
        dst = self.side()
        if len(src) != len(dst):
            self.fail(f"the left side has {len(src)} terms but the right side has {len(dst)}", dst_tok)
        where: tuple[Cond, ...] = ()
        if self.at("where"):
            where = self.conditions()
        elif self.tok.kind != "end":
            self.fail(f"expected 'where' or end of rule, found {self.found()}")
        self.check_refs((*src, *dst))
        return Rule(src, dst, where)

    def side(self) -> tuple[Term, ...]:
        if not self.at("("):
            return (self.term(),)
        self.advance()
        terms = [self.term()]
        while self.at(","):
            self.advance()
            if self.at(")"):
                break
            terms.append(self.term())
        self.expect(")", "after the terms of a side")
        return tuple(terms)

    def term(self) -> Term:
        term = self.primary_term()
        while self.at("["):
            bracket = self.advance()
            if not isinstance(term, Apply):
                what = f"tensor variable '{term.name}'" if isinstance(term, Var) else "a picked output"
                self.fail(f"cannot pick an output of {what}", bracket)
            if self.tok.kind != "int":
                self.fail(f"expected an output index after '[', found {self.found()}")
            index = int(self.advance().text)
            self.expect("]", "after the output index")
            term = Pick(term, index)
        return term

    def primary_term(self) -> Term:
        tok = self.tok
        if tok.kind != "name":
            self.fail(f"expected a term, found {self.found()}")
        self.advance()
        if self.at("("):
            return self.apply(tok)
        if tok.text in ops.algebra_names():
            self.fail(f"operator '{tok.text}' needs arguments", tok)
        if tok.text in _RESERVED:
            self.fail(f"'{tok.text}' is a reserved word, not a tensor variable", tok)
        if not _VAR.fullmatch(tok.text):
            self.fail(f"tensor variables are lowercase names, found '{tok.text}'", tok)
        return Var(tok.text)

    def apply(self, name: _Token) -> Apply:
        op = self.opdef(name)
        self.advance()  # '('
        args: list[Term] = []
        attrs: list[tuple[str, Expr]] = []
        if not self.at(")"):
            self.argument(op, args, attrs)
            while self.at(","):
                self.advance()
                self.argument(op, args, attrs)
        self.expect(")", f"after the arguments of {op.name}")
        try:
            op.check_arity(len(args))
        except ShapeError as e:
            self.fail(str(e), name)
        return Apply(op.name, tuple(args), tuple(attrs))

    def opdef(self, name: _Token) -> ops.OpDef:
        """The algebra entry for an operator name; a close match is suggested for a typo."""
        if name.text in ops.algebra_names():
            return ops.get(name.text)
        close = difflib.get_close_matches(name.text, ops.algebra_names(), n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        self.fail(f"unknown operator '{name.text}'{hint}", name)

    def argument(self, op: ops.OpDef, args: list[Term], attrs: list[tuple[str, Expr]]) -> None:
        """One tensor argument or `name=expr`; tensor arguments must come first."""
        if self.tok.kind == "name" and self.peek().text == "=":
            name = self.advance()
            self.advance()  # '='
            fields = [f.name for f in dataclasses.fields(op.attrs)]
            if name.text not in fields:
                self.fail(f"{op.name} has no attribute '{name.text}' (has: {', '.join(fields) or 'none'})", name)
            if any(key == name.text for key, _ in attrs):
                self.fail(f"duplicate attribute '{name.text}' of {op.name}", name)
            attrs.append((name.text, self.expr()))
        elif attrs:
            self.fail(f"tensor argument after the attributes of {op.name}")
        else:
            args.append(self.term())

    def check_refs(self, terms: tuple[Term, ...]) -> None:
        """dim/rank must name a tensor variable of the sides: nothing else has a shape."""
        names = {t.name for term in terms for t in walk(term) if isinstance(t, Var)}
        for fn, tok in self.refs:
            if tok.text not in names:
                self.fail(f"{fn} of '{tok.text}', which is not a tensor variable of the {self.what}", tok)

    # -- conditions and expressions --

    def conditions(self) -> tuple[Cond, ...]:
        self.advance()  # 'where'
        conds = [self.condition()]
        while self.at(",") or self.at("and"):
            self.advance()
            conds.append(self.condition())
        if self.tok.kind != "end":
            self.fail(f"expected ',', 'and' or end of rule, found {self.found()}")
        return tuple(conds)

    def condition(self) -> Cond:
        left = self.expr()
        if self.tok.kind != "punct" or self.tok.text not in _COMPARE:
            self.fail(f"expected a comparison ({' '.join(_COMPARE)}), found {self.found()}")
        op = self.advance().text
        return Cond(op, left, self.expr())

    def expr(self) -> Expr:
        left = self.product()
        while self.tok.kind == "punct" and self.tok.text in ("+", "-"):
            op = self.advance().text
            left = BinOp(op, left, self.product())
        return left

    def product(self) -> Expr:
        left = self.unary()
        while self.tok.kind == "punct" and self.tok.text in ("*", "//", "%"):
            op = self.advance().text
            left = BinOp(op, left, self.unary())
        return left

    def unary(self) -> Expr:
        if not self.at("-"):
            return self.atom()
        self.advance()
        operand = self.unary()
        value = operand.value if isinstance(operand, Lit) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return Lit(-value)
        return BinOp("*", Lit(-1), operand)

    def atom(self) -> Expr:
        tok = self.tok
        if tok.kind in ("int", "float", "string"):
            return Lit(self.literal(self.advance()))
        if tok.kind == "attrvar":
            return AttrVar(self.advance().text[1:])
        if tok.kind == "name":
            return self.word(self.advance())
        if self.at("("):
            self.advance()
            inner = self.expr()
            self.expect(")", "to close the parenthesis")
            return inner
        if self.at("["):
            self.advance()
            return Seq(self.items("]", "after the list items"))
        self.fail(f"expected a value, found {self.found()}")

    def literal(self, tok: _Token) -> int | float | str:
        """The value of a number or string token; values the printer cannot write back are errors."""
        convert = {"int": int, "float": float, "string": json.loads}[tok.kind]
        try:
            value = convert(tok.text)
        except ValueError:  # a bad escape, or more digits than int() accepts
            self.fail(f"bad {tok.kind} literal {tok.text}", tok)
        if isinstance(value, float) and math.isinf(value):
            self.fail(f"number out of range: {tok.text}", tok)
        return value

    def word(self, tok: _Token) -> Expr:
        """A reserved word's construct, or a bare word (a string, even if it names an operator)."""
        if tok.text in ("true", "false"):
            return Lit(tok.text == "true")
        if tok.text in ("where", "and"):
            self.fail(f"'{tok.text}' is a reserved word; quote it to use it as a string", tok)
        if tok.text not in ("dim", "rank", "max", "min"):
            return Lit(tok.text)
        self.expect("(", f"after {tok.text}")
        if tok.text in ("max", "min"):
            if self.at(")"):
                self.fail(f"{tok.text} needs at least one argument")
            return Call(tok.text, self.items(")", f"after the arguments of {tok.text}"))
        if self.tok.kind != "name":
            self.fail(f"expected a tensor variable after '{tok.text}(', found {self.found()}")
        var = self.advance()
        self.refs.append((tok.text, var))
        if tok.text == "rank":
            self.expect(")", "after the argument of rank")
            return Rank(var.text)
        self.expect(",", "after the tensor variable of dim")
        axis = self.expr()
        self.expect(")", "after the axis of dim")
        return Dim(var.text, axis)

    def items(self, close: str, context: str) -> tuple[Expr, ...]:
        """Comma-separated expressions up to `close` (which is consumed); may be empty."""
        items: list[Expr] = []
        if not self.at(close):
            items.append(self.expr())
            while self.at(","):
                self.advance()
                items.append(self.expr())
        self.expect(close, context)
        return tuple(items)


def parse_rule(text: str) -> Rule:
    """The rule written in `text`; a RuleSyntaxError gives the column of the first problem."""
    return _Parser(text, "rule").rule()


def parse_term(text: str) -> Term:
    """A single term (no '=='), e.g. to write a pattern; dim/rank must name its own variables."""
    parser = _Parser(text, "term")
    term = parser.term()
    if parser.tok.kind != "end":
        parser.fail(f"expected end of term, found {parser.found()}")
    parser.check_refs((term,))
    return term


# ---- printer -------------------------------------------------------------------------

def format_rule(rule: Rule) -> str:
    """Canonical text of a rule: parsing it gives the rule back."""
    text = f"{_format_side(rule.src)} == {_format_side(rule.dst)}"
    return f"{text} where {', '.join(map(format_cond, rule.where))}" if rule.where else text


def _format_side(terms: tuple[Term, ...]) -> str:
    return format_term(terms[0]) if len(terms) == 1 else f"({', '.join(map(format_term, terms))})"


def format_term(term: Term) -> str:
    """`op(arg, ..., name=value, ...)`, `x`, or `t[i]`."""
    if isinstance(term, Var):
        return term.name
    if isinstance(term, Pick):
        return f"{format_term(term.term)}[{term.index}]"
    if isinstance(term, Apply):
        parts = [*map(format_term, term.args), *(f"{name}={format_expr(value)}" for name, value in term.attrs)]
        return f"{term.op}({', '.join(parts)})"
    raise TypeError(f"not a term: {term!r}")


def format_cond(cond: Cond) -> str:
    return f"{format_expr(cond.left)} {cond.op} {format_expr(cond.right)}"


def format_expr(expr: Expr) -> str:
    """Canonical text of an expression, with only the parentheses that precedence needs."""
    if isinstance(expr, Lit):
        return _format_lit(expr.value)
    if isinstance(expr, AttrVar):
        return f"?{expr.name}"
    if isinstance(expr, Dim):
        return f"dim({expr.var}, {format_expr(expr.axis)})"
    if isinstance(expr, Rank):
        return f"rank({expr.var})"
    if isinstance(expr, Call):
        return f"{expr.fn}({', '.join(map(format_expr, expr.args))})"
    if isinstance(expr, Seq):
        return f"[{', '.join(map(format_expr, expr.items))}]"
    if isinstance(expr, BinOp):
        prec = _PREC[expr.op]
        left = _operand(expr.left, parens=_prec(expr.left) < prec)
        right = _operand(expr.right, parens=_prec(expr.right) <= prec)  # operators are left associative
        return f"{left} {expr.op} {right}"
    raise TypeError(f"not an expression: {expr!r}")


def _prec(expr: Expr) -> int:
    return _PREC[expr.op] if isinstance(expr, BinOp) else 3


def _operand(expr: Expr, parens: bool) -> str:
    return f"({format_expr(expr)})" if parens else format_expr(expr)


def _format_lit(value: object) -> str:
    """true/false, ints, floats by repr, strings bare when they read back as a bare word."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"a rule cannot hold the number {value!r}")
        return repr(value)
    if isinstance(value, str):
        bare = _NAME.fullmatch(value) and value not in _RESERVED
        return value if bare else json.dumps(value, ensure_ascii=False)
    raise TypeError(f"not a literal value: {value!r}")
