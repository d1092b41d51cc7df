"""The import graph has no cycles and keeps the layers ARCHITECTURE.md draws.

Imports inside functions count: a lazy import hides a cycle from the interpreter, not from a reader.
The drawn picture is a fenced `layers` block in ARCHITECTURE.md ("package: what it may import");
the test fails on an import the picture does not draw *and* on a drawn edge no import makes, so the
picture stays true both ways.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
# repository folder -> the package name it installs as (pyproject.toml's package-dir)
TREES = {"taso_py": "taso_py", "verifier": "taso_py.verifier", "codegen": "taso_py.codegen", "rules": "taso_py.rules"}

# What the layers exist for; a change to ARCHITECTURE.md's picture cannot allow these.
NEVER = {
    ("taso_py.ops", "taso_py.runtime"): "the op table is below everything that runs models",
    ("taso_py.ops", "taso_py.graph"): "the op table is below the graph IR",
    ("taso_py.codegen", "taso_py.search"): "the backend takes a graph, it does not search",
    ("taso_py.codegen", "taso_py.optimizer"): "the backend takes a graph, it does not search",
    ("taso_py.codegen", "taso_py.onnx_io"): "the backend never reads or writes ONNX itself",
    ("taso_py.verifier", "taso_py.generator"): "the generator calls the verifier, never the reverse",
    ("taso_py.graph", "taso_py.onnx_io"): "the IR does not know ONNX",
}


def modules(root: Path = ROOT, trees: dict[str, str] = TREES) -> dict[str, Path]:
    """Every module by its installed dotted name."""
    found = {}
    for folder, prefix in trees.items():
        for path in (root / folder).rglob("*.py"):
            parts = path.relative_to(root / folder).with_suffix("").parts
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((prefix, *parts))] = path
    return found


def _targets(node: ast.AST, package: str, known: dict[str, Path]) -> list[str]:
    """The modules one import statement names (`from pkg import submodule` names the submodule)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        parts = package.split(".")[: len(package.split(".")) - node.level + 1]
        base = ".".join([*parts, base] if base else parts)
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def import_graph(root: Path = ROOT, trees: dict[str, str] = TREES) -> nx.DiGraph:
    """Module -> module edges, each with the line that makes it."""
    known = modules(root, trees)
    graph = nx.DiGraph()
    for name, path in known.items():
        graph.add_node(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _targets(node, package, known):
                while target and target not in known:  # a name inside a module: the module
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.add_edge(name, target, where=f"{path.relative_to(root)}:{node.lineno}")
    return graph


def layer(module: str) -> str:
    """The package a module belongs to in the picture: `taso_py.X` (or `taso_py` itself)."""
    return ".".join(module.split(".")[:2])


def package_edges(graph: nx.DiGraph) -> dict[tuple[str, str], str]:
    """Edges between packages, each with one import that makes it."""
    edges: dict[tuple[str, str], str] = {}
    for a, b, data in graph.edges(data=True):
        if layer(a) != layer(b):
            edges.setdefault((layer(a), layer(b)), data["where"])
    return edges


def drawn_layers(text: str) -> dict[str, set[str]]:
    """The `layers` block of ARCHITECTURE.md: `package: dep, dep` per line (`-` for none)."""
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "ARCHITECTURE.md has no ```layers block"
    drawn = {}
    for line in block.group(1).splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, deps = line.partition(":")
            drawn[name.strip()] = {d.strip() for d in deps.split(",") if d.strip() not in ("", "-")}
    return drawn


def shortest_cycle(graph: nx.DiGraph) -> list[str] | None:
    cycles = list(nx.simple_cycles(graph))
    return min(cycles, key=len) if cycles else None


def test_no_import_cycles() -> None:
    graph = import_graph()
    cycle = shortest_cycle(graph)
    if cycle:
        steps = [f"{a} ({graph.edges[a, b]['where']})" for a, b in zip(cycle, cycle[1:] + cycle[:1])]
        pytest.fail("import cycle: " + " -> ".join(steps) + f" -> {cycle[0]}")


def test_imports_match_the_picture_in_architecture_md() -> None:
    drawn = drawn_layers((ROOT / "ARCHITECTURE.md").read_text())
    actual = package_edges(import_graph())
    packages = {layer(m) for m in modules()}
    assert packages - set(drawn) == set(), "packages missing from ARCHITECTURE.md's layers block"
    undrawn = [f"{a} -> {b} ({where})" for (a, b), where in sorted(actual.items()) if b not in drawn.get(a, ())]
    assert not undrawn, "imports ARCHITECTURE.md does not draw: " + "; ".join(undrawn)
    stale = [f"{a} -> {b}" for a, deps in drawn.items() for b in sorted(deps) if (a, b) not in actual]
    assert not stale, "ARCHITECTURE.md draws imports no module makes: " + "; ".join(stale)


def test_the_layers_keep_their_reasons() -> None:
    drawn = drawn_layers((ROOT / "ARCHITECTURE.md").read_text())
    broken = [f"{a} -> {b}: {why}" for (a, b), why in NEVER.items() if b in drawn.get(a, ())]
    assert not broken, "; ".join(broken)


def test_verifier_and_codegen_are_imported_by_their_installed_names() -> None:
    """`verifier` and `codegen` are not top-level packages once installed (taso_py.verifier, taso_py.codegen)."""
    wrong = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            wrong += [f"{name}:{node.lineno}" for n in names if n.split(".")[0] in ("verifier", "codegen")]
    assert not wrong, f"import taso_py.verifier / taso_py.codegen instead: {', '.join(wrong)}"


def test_the_checks_find_a_cycle_and_an_undrawn_import(tmp_path: Path) -> None:
    """The checks above on a tree made to break them (a check that cannot fail proves nothing)."""
    pkg = tmp_path / "demo"
    for sub in ("low", "high"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    from demo.high import b  # lazily: still a cycle\n")
    (pkg / "high" / "b.py").write_text("from demo.low.a import f\n")
    graph = import_graph(tmp_path, {"demo": "demo"})
    assert set(shortest_cycle(graph) or ()) == {"demo.low.a", "demo.high.b"}
    assert package_edges(graph) == {("demo.low", "demo.high"): "demo/low/a.py:2",
                                    ("demo.high", "demo.low"): "demo/high/b.py:1"}
    assert drawn_layers("```layers\ndemo.high: demo.low\ndemo.low: -\n```") == {"demo.high": {"demo.low"},
                                                                              "demo.low": set()}
