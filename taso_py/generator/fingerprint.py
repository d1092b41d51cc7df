"""Exact fingerprints: every operator's `sym_value` over the integers modulo a prime.

Polynomial work (sums, products, matmul, conv, concat, transpose...) is exact modulo P, so two
graphs that compute the same polynomial give the same residues, and two that do not collide
only with probability about degree / P per element. The non-polynomial scalar functions (relu,
max, sigmoid, tanh, ...) are modelled as fixed random functions of their arguments: they keep
every identity that holds for *any* function in that place (conv + relu fusion, pooling of a
concatenation) and cannot create one that holds only for the real function. Identities that
need the real function (relu is idempotent) are the axioms' business, not the generator's.

Values are int64 arrays reduced modulo P after each operator; P < 2^24 keeps every product
and every sum of up to 2^15 products inside int64.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from taso_py import ops

P = (1 << 24) - 3  # prime
_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finalizer: a fixed, well-spread function of a 64-bit integer."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _salt(name: str) -> int:
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


class ModP:
    """ops.symbolic.ScalarDomain over integers modulo P, non-polynomial functions made random."""

    def __init__(self) -> None:
        self._salts: dict[str, int] = {}

    def _random(self, name: str, *args: Any) -> int:
        salt = self._salts.get(name)
        if salt is None:
            salt = self._salts[name] = _salt(name)
        h = salt
        for a in args:
            h = _mix(h ^ (int(a) % P))
        return h % P

    def const(self, v: float | Fraction) -> int:
        q = Fraction(v)
        return q.numerator % P * pow(q.denominator, -1, P) % P

    def div(self, a: Any, b: Any) -> int:
        b = int(b) % P
        return int(a) * pow(b, -1, P) % P if b else self._random("div0", a)

    def relu(self, x: Any) -> int:
        return self._random("relu", x)

    def max(self, a: Any, b: Any) -> int:
        return self._random("max", a, b)

    def apply(self, name: str, impl: Callable[[float], float], x: Any) -> int:
        return self._random(name, x)


MODP = ModP()


def reduce(x: np.ndarray) -> np.ndarray:
    """An operator's output as int64 residues (object arrays come from the scalar functions)."""
    if x.dtype == object:
        return np.asarray(x % P, dtype=np.int64)
    return np.mod(x, P).astype(np.int64, copy=False)


def run(op: str, args: Sequence[np.ndarray], attrs: Any) -> tuple[np.ndarray, ...]:
    """One operator on residues."""
    return tuple(reduce(np.asarray(out)) for out in ops.get(op).sym_value(args, attrs, MODP))


def random_input(shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    return rng.integers(0, P, size=tuple(shape), dtype=np.int64)


def digest(value: np.ndarray) -> int:
    """A stable 64-bit hash of a residue tensor and its shape (the same in every process)."""
    h = hashlib.blake2b(repr(value.shape).encode(), digest_size=8)
    h.update(np.ascontiguousarray(value).tobytes())
    return int.from_bytes(h.digest(), "little")
