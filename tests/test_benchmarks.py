"""The benchmark scripts run and write what they promise (their numbers are for the README)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import optimize_suite, rule_generation
from taso_py.library.store import default_path


def test_rule_generation_tabulates_a_library(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    rule_generation.main(["--library", str(default_path()), "--out", str(tmp_path)])
    table = capsys.readouterr().out
    renamed = json.loads(default_path().read_text())["generator"]["counts"]["renaming"]
    assert f"| after renaming pruning | {renamed:,} | 17,346 |" in table  # next to TASO's count
    doc = json.loads((tmp_path / "rule_generation.json").read_text())
    assert doc["runs"][0]["counts"]["final"] == len(json.loads(default_path().read_text())["rules"])
    assert (tmp_path / "rule_generation.md").read_text().strip() == table.strip()


@pytest.mark.slow
def test_optimize_suite_on_a_small_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path / "cache"))
    optimize_suite.main(["--size", "small", "--models", "nasrnn", "--runs", "3", "--out", str(tmp_path)])
    doc = json.loads((tmp_path / "optimize_suite.json").read_text())
    (row,) = doc["rows"]
    assert row["check"]["ok"] and row["ort_2t"]["original_ms"] > 0
    assert row["written"] in ("optimized", "original", "no rewrite")
    assert (tmp_path / "optimize_suite.png").stat().st_size > 1000


def test_optimize_suite_runs_a_substitution_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TASO_CACHE_DIR", str(tmp_path / "cache"))
    optimize_suite.main(["--models", "parallel_matmuls", "--runs", "3", "--cost", "analytical", "--out", str(tmp_path)])
    (row,) = json.loads((tmp_path / "optimize_suite.json").read_text())["rows"]
    assert row["check"]["ok"] and row["ort_1t"]["optimized_ms"] > 0 and row["ort_2t"]["original_ms"] > 0
    assert row["written"] == (row["speed_check"]["kept"] if row["rules_applied"] else "no rewrite")
    assert "| parallel_matmuls |" in (tmp_path / "optimize_suite.md").read_text()
