"""Benchmark suite for taso-py: the evaluation models and their drivers."""
