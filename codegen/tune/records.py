"""Tuning records: one JSON line per measured (or failed) configuration, appended as tuning goes.

A line is `{"workload": key, "config": {knob: value}, "seconds": s | null, "error": msg | null}`.
Appending keeps an interrupted tuning's results; `load_best` gives the compiler the fastest
config of a workload, and `tune` resumes a workload from its records instead of re-measuring.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from taso_py.cache import cache_root
from taso_py.codegen import isa
from taso_py.codegen.te.tensor import Tensor
from taso_py.codegen.tune.space import Config


@dataclass(frozen=True)
class Record:
    workload: str
    config: dict[str, Any]
    seconds: float | None  # the median run time; None when the candidate failed
    error: str | None = None
    features: tuple[float, ...] | None = None  # the cost model's features of the kernel (codegen.tune.features)

    @property
    def ok(self) -> bool:
        return self.seconds is not None

    def to_json(self) -> str:
        d = {"workload": self.workload, "config": self.config, "seconds": self.seconds, "error": self.error}
        if self.features is not None:
            d["features"] = [round(x, 6) for x in self.features]
        return json.dumps(d, sort_keys=True, default=str)


def default_path() -> Path:
    """Where records go unless told otherwise: tuning.jsonl beside the kernel cache ($TASO_CACHE_DIR or
    ~/.cache/taso-py), shared by every tuning on this machine (timings only hold on the machine measured)."""
    return cache_root() / "tuning.jsonl"


def workload_key(name: str, args: Sequence[Tensor]) -> str:
    """The key records are filed under: the template's name, its arguments' dtypes and shapes, and
    the CPU model and ISA level they were measured on (a schedule tuned on one CPU can run at
    half speed on another; records of other CPUs are kept, and not used here)."""
    shapes = (f"{t.dtype}[{','.join(map(str, t.shape))}]" for t in args)
    return f"{name}({', '.join(shapes)}) on {isa.host().key}"


def _tuples(v: Any) -> Any:
    """JSON has lists only; knob choices such as loop orders are tuples."""
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def read(path: str | os.PathLike[str], workload: str | None = None) -> Iterator[Record]:
    """The records in `path` (of one workload, when given); unreadable lines are skipped."""
    p = Path(path)
    if not p.is_file():
        return
    with p.open() as fh:
        for line in fh:
            try:
                d = json.loads(line)
                feats = d.get("features")
                rec = Record(d["workload"], {k: _tuples(v) for k, v in d["config"].items()}, d.get("seconds"),
                             d.get("error"), tuple(float(x) for x in feats) if feats else None)
            except (ValueError, KeyError, TypeError, AttributeError):
                continue
            if workload is None or rec.workload == workload:
                yield rec


def append(path: str | os.PathLike[str], records: Sequence[Record]) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    with p.open("a") as fh:
        for r in records:
            fh.write(r.to_json() + "\n")


def best_record(path: str | os.PathLike[str], workload: str) -> Record | None:
    ok = [r for r in read(path, workload) if r.ok]
    return min(ok, key=lambda r: r.seconds) if ok else None  # type: ignore[arg-type, return-value]


def load_best(path: str | os.PathLike[str], workload: str) -> Config:
    """The fastest recorded config of `workload`; an empty config (the defaults) when none was recorded."""
    rec = best_record(path, workload)
    return Config(rec.config if rec is not None else None)
