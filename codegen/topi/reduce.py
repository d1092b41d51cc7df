"""Computes of the reduce family (taso_py/ops/reduce.py)."""

from __future__ import annotations
