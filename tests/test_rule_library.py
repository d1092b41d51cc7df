"""The library file format, a small generation end to end, and the `taso rules` commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from taso_py.generator.executor import LocalExecutor
from taso_py.generator.pipeline import Checkpoint, Settings, generate
from taso_py.library.proof import ProofRecord, Status
from taso_py.library.store import Entry, Library, LibraryError, load
from taso_py.library.syntax import parse_rule

TASO = [sys.executable, "-m", "taso_py"]
SMALL_OPS = ("matmul", "add", "transpose", "concat", "split", "relu")


def _quiet(stage: str, total: int):
    return lambda n: None


@pytest.fixture(scope="module")
def small_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-operator generation over a few operators, saved as a library file."""
    out = tmp_path_factory.mktemp("lib") / "small.json"
    checkpoint = Checkpoint(out.with_suffix(".ckpt"), resume=False)
    executor = LocalExecutor(2)
    try:
        library = generate(Settings(max_ops=2, ops=SMALL_OPS), executor, checkpoint, _quiet)
    finally:
        executor.close()
        checkpoint.close()
    library.save(out)
    return out


def test_small_generation_is_all_proved_and_has_the_expected_rules(small_library: Path):
    library = load(small_library)
    assert len(library) > 10
    assert {e.proof.status for e in library} == {Status.PROVED}
    texts = {e.text for e in library}
    assert "matmul(matmul(a, b), c) == matmul(a, matmul(b, c))" in texts
    assert "transpose(transpose(a, perm=[1, 0]), perm=[1, 0]) == a" in texts
    counts = library.generator["counts"]
    stages = list(counts)
    assert stages[:7] == ["graphs", "pairs", "renaming", "common-subgraph", "context", "products", "candidates"]
    assert (counts["graphs"] > counts["pairs"] >= counts["renaming"] >= counts["common-subgraph"] >= counts["context"]
            >= counts["products"] >= counts["candidates"])
    assert counts["final"] == len(library) and counts["implied"] <= counts["final"]


def test_resume_reuses_the_checkpoint(tmp_path: Path):
    settings = Settings(max_ops=2, ops=("matmul", "add", "transpose"))
    path = tmp_path / "c.jsonl"
    first = Checkpoint(path, resume=False)
    generate(settings, LocalExecutor(1), first, _quiet)
    first.close()
    proved_lines = sum(1 for line in path.read_text().splitlines() if '"prove"' in line)
    assert proved_lines > 0
    again = Checkpoint(path, resume=True)
    calls = []
    lib = generate(settings, LocalExecutor(1), again, lambda stage, total: (lambda n: calls.append((stage, n))))
    again.close()
    assert sum(1 for line in path.read_text().splitlines() if '"prove"' in line) == proved_lines  # nothing re-proved
    assert len(lib) > 0


def test_save_and_load_round_trip(small_library: Path, tmp_path: Path):
    library = load(small_library)
    copy = tmp_path / "copy.json"
    library.save(copy)
    assert json.loads(copy.read_text()) == json.loads(small_library.read_text())
    assert [e.id for e in load(copy)] == [e.id for e in library]


def _corrupt(tmp_path: Path, doc: object, raw: str | None = None) -> Path:
    path = tmp_path / "bad.json"
    path.write_text(raw if raw is not None else json.dumps(doc))
    return path


def test_corrupt_or_foreign_files_are_one_line_errors(small_library: Path, tmp_path: Path):
    good = json.loads(small_library.read_text())
    with pytest.raises(LibraryError, match="not a readable JSON"):
        load(_corrupt(tmp_path, None, raw="{not json"))
    with pytest.raises(LibraryError, match="no \"format\""):
        load(_corrupt(tmp_path, {"rules": []}))
    with pytest.raises(LibraryError, match="version 99 is not supported"):
        load(_corrupt(tmp_path, {**good, "format": {"name": "taso-py-rules", "version": 99}}))
    tampered = json.loads(json.dumps(good))
    tampered["rules"][0]["text"] = tampered["rules"][1]["text"]
    with pytest.raises(LibraryError, match="id does not match"):
        load(_corrupt(tmp_path, tampered))
    broken = json.loads(json.dumps(good))
    broken["rules"][0]["text"] = "matmul(a, == b"
    with pytest.raises(LibraryError, match=r"rule r[0-9a-f]+: column"):
        load(_corrupt(tmp_path, broken))
    graphless = json.loads(json.dumps(good))
    graphless["rules"][0]["src"]["nodes"] = []
    with pytest.raises(LibraryError, match="graphs do not match"):
        load(_corrupt(tmp_path, graphless))
    with pytest.raises(LibraryError, match="no such rule library"):
        load(tmp_path / "missing.json")
    for proof, needle in (({"method": "z3-axioms"}, "no proof record"),
                          ({"status": "proved"}, "unknown proof status 'proved'"),
                          ({"status": "PROVED", "axioms": "distrib"}, "lists of names")):
        bad = json.loads(json.dumps(good))
        bad["rules"][0]["proof"] = proof
        with pytest.raises(LibraryError, match=needle):
            load(_corrupt(tmp_path, bad))


def test_proof_records_are_typed_and_round_trip(small_library: Path):
    raw = json.loads(small_library.read_text())["rules"][0]["proof"]
    record = load(small_library).entries[0].proof
    assert record.status is Status.PROVED and record.proved
    assert record.to_json() == raw
    unknown = ProofRecord.from_json({"status": "UNKNOWN", "reason": "timeout", "seconds": 10.0})
    assert unknown.status is Status.UNKNOWN and not unknown.proved
    assert unknown.to_json() == {"status": "UNKNOWN", "reason": "timeout", "seconds": 10.0}


def test_entries_expose_graphs_with_shared_nodes():
    rule = parse_rule("(matmul(a, b), matmul(a, c)) == (split(matmul(a, concat(b, c, axis=1)), axis=1, "
                      "sizes=[dim(b, 1), dim(c, 1)])[0], split(matmul(a, concat(b, c, axis=1)), axis=1, "
                      "sizes=[dim(b, 1), dim(c, 1)])[1])")
    doc = Entry(rule, ProofRecord(Status.PROVED)).to_json()
    assert [n["op"] for n in doc["dst"]["nodes"]] == ["concat", "matmul", "split"]
    assert doc["dst"]["outputs"] == ["n2:0", "n2:1"]
    assert doc["dst"]["nodes"][2]["attrs"] == {"axis": "1", "sizes": "[dim(b, 1), dim(c, 1)]"}
    assert doc["src"]["inputs"] == ["a", "b", "c"]


def _taso(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*TASO, *args], capture_output=True, text=True, check=False)


def test_rules_commands(small_library: Path, tmp_path: Path):
    lib = str(small_library)
    listed = _taso("rules", "list", "--library", lib, "--op", "matmul", "--json")
    assert listed.returncode == 0, listed.stderr
    doc = json.loads(listed.stdout)
    assert doc["count"] == len(doc["rules"]) > 0 and all("matmul" in r["ops"] for r in doc["rules"])
    rule_id = doc["rules"][0]["id"]
    for fmt, needle in (("text", "proof: PROVED"), ("dot", "subgraph cluster_src"), ("json", '"proof"')):
        shown = _taso("rules", "show", rule_id[:6], "--library", lib, "--format", fmt)
        assert shown.returncode == 0 and needle in shown.stdout, shown.stderr
    stats = json.loads(_taso("rules", "stats", "--library", lib, "--json").stdout)
    assert stats["rules"] == len(load(small_library)) and stats["per_operator"]["matmul"] > 0
    assert "graphs" in stats["stages"] and stats["proof_status"] == {"PROVED": stats["rules"]}
    verified = _taso("rules", "verify", "--library", lib, "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert json.loads(verified.stdout)["failed"] == []


def test_rules_verify_names_a_rule_that_fails(small_library: Path, tmp_path: Path):
    library = load(small_library)
    wrong = Entry(parse_rule("relu(add(a, b)) == add(relu(a), relu(b))"), ProofRecord(Status.PROVED))
    bad = tmp_path / "wrong.json"
    Library([*library.entries[:2], wrong], library.generator, library.axioms).save(bad)
    result = _taso("rules", "verify", "--library", str(bad))
    assert result.returncode == 1
    assert wrong.id in result.stdout and "REFUTED" in result.stderr


def test_rules_errors_are_one_line(tmp_path: Path, small_library: Path):
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    for args in (("rules", "list", "--library", str(bad)), ("rules", "show", "zzzz", "--library", str(small_library)),
                 ("generate-rules", "--ops", "matmul,frobnicate", "-o", str(tmp_path / "x.json"))):
        result = _taso(*args)
        assert result.returncode == 2, result
        assert result.stderr.startswith("taso: error:") and len(result.stderr.strip().splitlines()) == 1
