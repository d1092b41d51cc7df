"""The one cache directory: `$TASO_CACHE_DIR`, else `taso-py` in the user's cache folder.

Operator timings (`cost.measured`), compiled kernels, tuning records and the machine's measured
limits (`codegen`) all live under it. Each is valid only on the machine that made it, so each is
keyed inside by the CPU as `taso_py.host` identifies it; deleting the folder only costs re-measuring.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

ENV = "TASO_CACHE_DIR"


def cache_root() -> Path:
    """$TASO_CACHE_DIR, else $XDG_CACHE_HOME/taso-py, else ~/.cache/taso-py (not created here)."""
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "taso-py"


def read_records(path: Path, parse: Callable[[Any], dict[str, T]]) -> dict[str, T]:
    """`parse` of the JSON records at `path`; empty when the file is missing or damaged (a damaged
    cache is only lost time: what it held is measured again)."""
    try:
        return parse(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, IndexError, AttributeError):
        return {}
