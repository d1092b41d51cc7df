"""Where a compile gets each kernel's schedule knobs: tuning records, tuning, or the defaults."""

from __future__ import annotations

from pathlib import Path

from taso_py.codegen.graph.kernels import ConfigFor, Template
from taso_py.codegen.tune import records, tuner
from taso_py.codegen.tune.space import Config


def config_source(path: Path | None, trials: int, progress: bool = True) -> ConfigFor:
    """Knobs per kernel workload: with `trials`, tune it first (the records grow; records already
    there are not measured again); then the fastest recorded config, else the defaults."""
    path = path or records.default_path()

    def config_for(workload: str, template: Template) -> Config:
        probe = Config()
        _, args = template(probe)
        if not probe.space:
            return probe
        if trials > 0:
            return tuner.tune(template, None, trials, path, name=workload, progress=progress).best
        return records.load_best(path, records.workload_key(workload, args))

    return config_for
