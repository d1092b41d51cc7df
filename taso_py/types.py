"""Element types and tensor types shared by the operator table and the graph IR."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

import numpy as np

from taso_py.errors import InputError


class DType(enum.Enum):
    """Element types the IR can hold; values are numpy dtype names."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    FLOAT64 = "float64"
    INT8 = "int8"
    INT16 = "int16"
    INT32 = "int32"
    INT64 = "int64"
    UINT8 = "uint8"
    BOOL = "bool"

    # members are singletons (and unpickle as themselves): identity is equality, and hashing it is
    # done in C, where Enum's own hash is a Python call (see `TensorType`)
    __hash__ = object.__hash__

    @property
    def numpy(self) -> np.dtype:
        return np.dtype(self.value)

    @property
    def is_float(self) -> bool:
        return self in (DType.FLOAT16, DType.FLOAT32, DType.FLOAT64)

    @property
    def short(self) -> str:
        return _SHORT[self]

    @classmethod
    def of(cls, dtype: np.dtype | type | str) -> DType:
        """The DType of a numpy dtype; a clear error for one the IR cannot hold."""
        name = np.dtype(dtype).name
        try:
            return cls(name)
        except ValueError:
            raise InputError(f"unsupported element type {name!r}") from None


_SHORT = {
    DType.FLOAT32: "f32", DType.FLOAT16: "f16", DType.FLOAT64: "f64", DType.INT8: "i8",
    DType.INT16: "i16", DType.INT32: "i32", DType.INT64: "i64", DType.UINT8: "u8", DType.BOOL: "bool",
}


@dataclass(frozen=True)
class TensorType:
    """Shape and element type of a tensor. Opaque nodes may leave either unknown (None).

    The hash is computed once: types key the search's memos (match keys, operator prices), and
    NasRNN's equality saturation hashed 200,000 of them, each through `DType`'s hash, a Python call
    before. A pickled type is made anew, so its hash is that of the process that loads it."""

    shape: tuple[int, ...] | None
    dtype: DType | None = DType.FLOAT32
    _hash: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.shape, self.dtype)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:
        return TensorType, (self.shape, self.dtype)

    @property
    def rank(self) -> int:
        return len(self.known_shape)

    @property
    def known_shape(self) -> tuple[int, ...]:
        if self.shape is None:
            raise InputError("tensor shape is unknown")
        return self.shape

    @property
    def size(self) -> int:
        return math.prod(self.known_shape)

    @property
    def is_known(self) -> bool:
        return self.shape is not None and self.dtype is not None

    def __str__(self) -> str:
        dims = "?" if self.shape is None else ",".join(map(str, self.shape))
        return f"{self.dtype.short if self.dtype else '?'}[{dims}]"

    @classmethod
    def of(cls, array: np.ndarray) -> TensorType:
        return cls(tuple(int(d) for d in array.shape), DType.of(array.dtype))
