"""The rule library on disk: a versioned JSON document of proved rules and how they were made.

    {"format": {"name": "taso-py-rules", "version": 1},
     "generator": {settings, counts per stage, seconds per stage},
     "axioms": {"count", "names"},
     "rules": [{"id", "text", "src", "dst", "where", "proof", "provenance", ...}]}

`text` is the source of truth; `src`/`dst` are its graphs (see `graphs`). Loading checks the
format name and version, parses every rule and checks its graphs and id against the text, and
reports the first problem as one line naming the file and the rule.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from taso_py.atomic import write_json
from taso_py.errors import InputError
from taso_py.library.graphs import to_graph
from taso_py.library.proof import ProofRecord
from taso_py.library.syntax import format_cond, format_rule, parse_rule
from taso_py.library.terms import Apply, Rule, walk

FORMAT = {"name": "taso-py-rules", "version": 1}
DEFAULT_NAME = "default.json"


class LibraryError(InputError):
    """A library file that cannot be used: unreadable, corrupt, another format or version."""


def rule_id(text: str) -> str:
    """A stable id: the same rule text gets the same id in every generation."""
    return "r" + hashlib.blake2b(text.encode(), digest_size=4).hexdigest()


@dataclass(frozen=True)
class Entry:
    """One rule of the library with its proof record and provenance."""

    rule: Rule
    proof: ProofRecord
    provenance: str = "generated"  # or "hand-written"
    info: dict[str, Any] = field(default_factory=dict)  # world, size, parametric, ...

    @property
    def text(self) -> str:
        return format_rule(self.rule)

    @property
    def id(self) -> str:
        return rule_id(self.text)

    @property
    def ops(self) -> list[str]:
        return sorted({t.op for side in (self.rule.src, self.rule.dst) for s in side for t in walk(s)
                       if isinstance(t, Apply)})

    @property
    def size(self) -> int:
        """Operator nodes of source and destination together."""
        return len(to_graph(self.rule.src)["nodes"]) + len(to_graph(self.rule.dst)["nodes"])

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "text": self.text, "src": to_graph(self.rule.src), "dst": to_graph(self.rule.dst),
                "where": [format_cond(c) for c in self.rule.where], "outputs": len(self.rule.src),
                "proof": self.proof.to_json(), "provenance": self.provenance, **self.info}


@dataclass
class Library:
    entries: list[Entry]
    generator: dict[str, Any] = field(default_factory=dict)
    axioms: dict[str, Any] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Entry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def get(self, rule_id_or_prefix: str) -> Entry:
        found = [e for e in self.entries if e.id.startswith(rule_id_or_prefix)]
        if len(found) != 1:
            what = "no rule" if not found else f"{len(found)} rules"
            raise InputError(f"{what} with id {rule_id_or_prefix!r} in the library")
        return found[0]

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "generator": self.generator, "axioms": self.axioms,
                "rules": [e.to_json() for e in self.entries]}

    def save(self, path: str | Path) -> None:
        write_json(path, self.to_json())


def load(path: str | Path | None = None) -> Library:
    """The library at `path` (default: the shipped one), validated; LibraryError on any problem."""
    path = Path(path) if path is not None else default_path()
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise LibraryError(f"{path}: no such rule library") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise LibraryError(f"{path}: not a readable JSON rule library ({e})") from None
    return from_json(doc, str(path))


def from_json(doc: Any, where: str = "library") -> Library:
    if not isinstance(doc, dict) or not isinstance(doc.get("format"), dict):
        raise LibraryError(f"{where}: not a taso-py rule library (no \"format\" object)")
    fmt = doc["format"]
    if fmt.get("name") != FORMAT["name"]:
        raise LibraryError(f"{where}: format {fmt.get('name')!r} is not {FORMAT['name']!r}")
    if fmt.get("version") != FORMAT["version"]:
        raise LibraryError(f"{where}: format version {fmt.get('version')!r} is not supported "
                           f"(this taso-py reads version {FORMAT['version']})")
    rules = doc.get("rules")
    if not isinstance(rules, list):
        raise LibraryError(f"{where}: \"rules\" must be a list")
    entries = [_entry(r, i, where) for i, r in enumerate(rules)]
    return Library(entries, doc.get("generator") or {}, doc.get("axioms") or {})


_OWN_KEYS = {"id", "text", "src", "dst", "where", "outputs", "proof", "provenance"}


def _entry(raw: Any, index: int, where: str) -> Entry:
    if not isinstance(raw, dict) or not isinstance(raw.get("text"), str):
        raise LibraryError(f"{where}: rule {index} has no text")
    name = raw.get("id", f"#{index}")
    try:
        rule = parse_rule(raw["text"])
    except InputError as e:
        raise LibraryError(f"{where}: rule {name}: {e}") from None
    try:
        proof = ProofRecord.from_json(raw.get("proof"))
    except ValueError as e:
        raise LibraryError(f"{where}: rule {name}: {e}") from None
    entry = Entry(rule, proof, str(raw.get("provenance", "generated")),
                  {k: v for k, v in raw.items() if k not in _OWN_KEYS})
    if raw.get("id") != entry.id:
        raise LibraryError(f"{where}: rule {name}: id does not match its text (expected {entry.id})")
    if raw.get("src") != to_graph(rule.src) or raw.get("dst") != to_graph(rule.dst):
        raise LibraryError(f"{where}: rule {name}: src/dst graphs do not match its text")
    return entry


def default_path() -> Path:
    """`rules/default.json` of a checkout, else the copy installed with the package."""
    checkout = Path(__file__).resolve().parents[2] / "rules" / DEFAULT_NAME
    if checkout.is_file():
        return checkout
    return Path(str(resources.files("taso_py.rules").joinpath(DEFAULT_NAME)))
