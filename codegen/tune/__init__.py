"""Auto-tuning: schedule knobs, their search space, measurement and a learned cost model."""

from codegen.tune.space import Config

__all__ = ["Config"]
