"""Computes of the indexing family (taso_py/ops/indexing.py)."""

from __future__ import annotations
