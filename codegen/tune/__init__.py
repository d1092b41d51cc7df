"""Auto-tuning: schedule knobs, their search space, measurement and a learned cost model.

    def matmul(cfg: Config) -> tuple[Schedule, list[te.Tensor]]:
        ...                                   # build the tensors and a schedule,
        s[c].split(i, cfg.knob("tile", (4, 8, 16), default=8))   # asking cfg for every choice
        return s, [a, b, c]

    result = tune(matmul, None, 64, "tuning.jsonl")   # measure 64 candidates, append the records
    cfg = load_best("tuning.jsonl", result.workload)  # later: the fastest recorded config
"""

from taso_py.codegen.tune.cost_model import CostModel, rank_correlation
from taso_py.codegen.tune.features import extract, feature_names
from taso_py.codegen.tune.records import Record, best_record, load_best, workload_key
from taso_py.codegen.tune.space import Config, Space
from taso_py.codegen.tune.tuner import TuneResult, random_args, tune

__all__ = ["Config", "CostModel", "Record", "Space", "TuneResult", "best_record", "extract", "feature_names",
           "load_best", "random_args", "rank_correlation", "tune", "workload_key"]
