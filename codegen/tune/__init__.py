"""Auto-tuning: schedule knobs, their search space, measurement and a learned cost model."""

from codegen.tune.cost_model import CostModel, rank_correlation
from codegen.tune.features import extract, feature_names
from codegen.tune.records import Record, best_record, load_best, workload_key
from codegen.tune.space import Config, Space
from codegen.tune.tuner import TuneResult, random_args, tune

__all__ = ["Config", "CostModel", "Record", "Space", "TuneResult", "best_record", "extract", "feature_names",
           "load_best", "random_args", "rank_correlation", "tune", "workload_key"]
