"""taso-py: a verified superoptimizer and compiler for deep-learning graphs."""

__version__ = "0.1.0"
