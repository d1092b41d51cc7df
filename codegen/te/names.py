"""Printable names for variables and buffers, shared by the IR's text and the backends' source."""

from __future__ import annotations

from typing import Any

from taso_py.codegen.te.intrinsics import CALLED_NAMES


class Names:
    """Unique printable names for variables and buffers (stages may reuse axis names like `i`)."""

    def __init__(self, sanitize: bool = False) -> None:
        self.sanitize = sanitize
        self.table: dict[int, str] = {}
        self.used: set[str] = set(CALLED_NAMES) if sanitize else set()  # source names the intrinsics call

    def __call__(self, obj: Any) -> str:  # a te Var or a lowered Buffer: anything with a `name`
        key = id(obj)
        if key not in self.table:
            base = obj.name
            if self.sanitize:
                base = "".join(ch if ch.isalnum() else "_" for ch in base)
                base = base if base and not base[0].isdigit() else f"v_{base}"
            name, k = base, 1
            while name in self.used:
                name, k = f"{base}_{k}", k + 1
            self.used.add(name)
            self.table[key] = name
        return self.table[key]
