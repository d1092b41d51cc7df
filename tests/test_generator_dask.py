"""The generator on a Dask cluster gives the same library as local processes, and a bad scheduler is one error line."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from taso_py.errors import InputError
from taso_py.generator.executor import DaskExecutor, Executor, LocalExecutor
from taso_py.generator.pipeline import Checkpoint, Settings, generate
from taso_py.library.store import Library

distributed = pytest.importorskip("distributed")

SETTINGS = Settings(max_ops=2, ops=("matmul", "add", "transpose", "relu"), seed=0, timeout=10.0)
UNREACHABLE = "tcp://127.0.0.1:1"  # port 1: nothing listens there
TASO = Path(sys.executable).with_name("taso")


def _generate(executor: Executor, checkpoint_path: Path) -> Library:
    checkpoint = Checkpoint(checkpoint_path, resume=False)
    try:
        return generate(SETTINGS, executor, checkpoint, lambda stage, total: (lambda n: None))
    finally:
        checkpoint.close()
        executor.close()


def _rules(library: Library) -> list[dict]:
    """The library's rules without the proofs' wall-clock seconds, the one field that differs between runs."""
    rules = library.to_json()["rules"]
    for rule in rules:
        rule["proof"].pop("seconds", None)
    return rules


def _untimed(generator: dict) -> dict:
    return {k: v for k, v in generator.items() if "seconds" not in k}


def test_dask_gives_the_local_library(tmp_path: Path) -> None:
    local = _generate(LocalExecutor(1), tmp_path / "local.jsonl")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        dask = _generate(DaskExecutor(cluster.scheduler_address), tmp_path / "dask.jsonl")
    rules = _rules(local)
    assert rules, "the small generation found no rules"
    assert _rules(dask) == rules
    assert dask.generator["counts"] == local.generator["counts"]
    assert _untimed(dask.generator) == _untimed(local.generator)


def test_unreachable_scheduler_is_an_input_error() -> None:
    started = time.perf_counter()
    with pytest.raises(InputError, match=r"cannot reach the Dask scheduler at tcp://127\.0\.0\.1:1"):
        DaskExecutor(UNREACHABLE)
    assert time.perf_counter() - started < 30


@pytest.mark.skipif(not TASO.is_file(), reason="the taso script is not installed next to this Python")
def test_cli_unreachable_scheduler_exits_2(tmp_path: Path) -> None:
    out = subprocess.run([str(TASO), "generate-rules", "--scheduler", UNREACHABLE, "-o", str(tmp_path / "x.json")],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith("taso: error: cannot reach the Dask scheduler at tcp://127.0.0.1:1")
    assert not (tmp_path / "x.json").exists()
