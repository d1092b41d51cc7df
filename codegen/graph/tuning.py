"""Where a compile gets each kernel's schedule knobs: tuning records, tuning, or the defaults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from codegen.graph.compiler import ConfigFor, Template
from codegen.tune.space import Config


def config_source(records: Path | None, trials: int, console: Any = None) -> ConfigFor:
    """Knobs per workload: the best recorded config; with `trials`, tune first (records extended)."""
    from codegen.tune import tuner

    path = records or tuner.default_records()

    def config_for(workload: str, template: Template) -> Config:
        if trials > 0 and _tunable(template):
            tuner.tune(template, workload, trials, path)
        best = tuner.load_best(path, workload)
        return best if best is not None else Config()

    return config_for


def _tunable(template: Template) -> bool:
    cfg = Config()
    template(cfg)
    return bool(cfg.space)
