"""A rule as a Graphviz drawing: source and destination graphs side by side."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

from taso_py.errors import InputError
from taso_py.library.store import Entry


def to_dot(entry: Entry) -> str:
    lines = [f'digraph "{entry.id}" {{', "  rankdir=TB; compound=true;",
             '  node [fontname="Helvetica", fontsize=10]; edge [fontsize=8];']
    for side in ("src", "dst"):
        graph = entry.to_json()[side]
        lines += _cluster(side, graph)
    lines.append("}")
    return "\n".join(lines) + "\n"


def _cluster(side: str, graph: dict[str, Any]) -> list[str]:
    label = "source" if side == "src" else "destination"
    out = [f"  subgraph cluster_{side} {{", f'    label="{label}"; style=rounded; color=gray;']

    def name(ref: str) -> str:
        return f'"{side}_{ref.split(":")[0]}"'

    for v in graph["inputs"]:
        out.append(f'    {name(v)} [label="{v}", shape=ellipse, style=filled, fillcolor="#e8f0fe"];')
    for node in graph["nodes"]:
        attrs = "\\n".join(f"{k}={_escape(v)}" for k, v in node["attrs"].items())
        label = node["op"] + (f"\\n{attrs}" if attrs else "")
        out.append(f'    {name(node["id"])} [label="{label}", shape=box, style="rounded,filled", fillcolor="#fff4e0"];')
        for ref in node["inputs"]:
            edge = f' [label="[{ref.split(":")[1]}]"]' if ":" in ref else ""
            out.append(f"    {name(ref)} -> {name(node['id'])}{edge};")
    for i, ref in enumerate(graph["outputs"]):
        out.append(f'    "{side}_out{i}" [label="out {i}", shape=plaintext];')
        edge = f' [label="[{ref.split(":")[1]}]"]' if ":" in ref else ""
        out.append(f'    {name(ref)} -> "{side}_out{i}"{edge};')
    out.append("  }")
    return out


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')


def render_png(dot: str, path: Path) -> None:
    """Render with Graphviz's `dot`; a clear error where it is not installed."""
    exe = shutil.which("dot")
    if exe is None:
        raise InputError("--png needs Graphviz's 'dot' program (apt install graphviz); use --format dot instead")
    result = subprocess.run([exe, "-Tpng", "-o", str(path)], input=dot.encode(), capture_output=True, check=False)
    if result.returncode != 0:
        raise InputError(f"dot failed: {result.stderr.decode().strip().splitlines()[0]}")
