"""Tensor intrinsics: what `Stage.tensorize` maps an inner tile onto.

An intrinsic states the inner loop extents it replaces and checks that the stage computes
what it computes; a backend emits the call by the intrinsic's name. The GEMM update below
is the one the CPU backend (a register-blocked micro-kernel) and the accelerator share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from codegen.errors import ScheduleError
from codegen.lower.ir import Region
from codegen.te.expr import Binary, Cast, Expr
from codegen.te.tensor import Reduce, Tensor, TensorRead


@dataclass(frozen=True)
class GemmIntrin:
    """C[m, n] += sum_k A[m, k] * B[k, n] on an (m, n, k) tile; `reset` zeroes C first.

    Its regions, in order: the output tile, then A's and B's tiles (flat offsets into their
    buffers, whose strides the backend reads).
    """

    name: str
    m: int
    n: int
    k: int

    @property
    def params(self) -> dict[str, Any]:
        return {"m": self.m, "n": self.n, "k": self.k}

    @property
    def loop_extents(self) -> tuple[int, int, int]:
        return (self.m, self.n, self.k)

    one_reduce_axis: ClassVar[bool] = True  # the stage sums over the tile's k alone
    loop_names: ClassVar[str] = "row, column, reduction"

    def check(self, stage: Any, body: Expr) -> None:
        if not (isinstance(body, Reduce) and body.combiner == "sum"
                and (len(body.axes) == 1 or not self.one_reduce_axis)):
            what = "a sum over one axis" if self.one_reduce_axis else "a sum"
            raise ScheduleError(f"tensorize {self.name!r}: stage {stage.name!r} is not {what}")
        src = body.source
        while isinstance(src, Cast):
            src = src.value
        if not (isinstance(src, Binary) and src.op == "*"):
            raise ScheduleError(f"tensorize {self.name!r}: stage {stage.name!r} does not sum a product")
        self.check_types(stage, body)
        leaf = stage.leaf[-3:]
        if [iv.reduce for iv in leaf] != [False, False, True]:
            raise ScheduleError(f"tensorize {self.name!r}: the inner loops of {stage.name!r} must be "
                                f"({self.loop_names}), got ({', '.join(iv.name for iv in leaf)})")

    def check_types(self, stage: Any, body: Reduce) -> None:
        """What a hardware intrinsic requires of the sum's and the factors' types (nothing here)."""

    def operands(self, body: Expr) -> list[TensorRead]:
        """The two factors' reads, in the body's order (`arrange` puts them in A, B order)."""
        assert isinstance(body, Reduce)
        src = body.source
        while isinstance(src, Cast):
            src = src.value
        reads = []
        for side in (src.a, src.b):  # type: ignore[attr-defined]
            while isinstance(side, Cast):
                side = side.value
            if not isinstance(side, TensorRead):
                raise ScheduleError(f"tensorize {self.name!r}: both factors must be tensor reads")
            reads.append(side)
        return reads

    def input_order(self, body: Expr) -> list[Tensor]:
        return [r.tensor for r in self.operands(body)]

    def arrange(self, x: Region, y: Region) -> tuple[Region, Region]:
        """The factors' tiles as (A, B): A moves with the rows and not the columns, B the other way
        (so `b[k, j] * a[i, k]` is the same GEMM as `a[i, k] * b[k, j]`)."""
        if x.loop_strides[1] != 0 and y.loop_strides[1] == 0:
            x, y = y, x
        if x.loop_strides[1] != 0 or y.loop_strides[0] != 0:
            raise ScheduleError(f"tensorize {self.name!r}: the factors are not a matrix product's "
                                f"(tile steps {x.loop_strides} and {y.loop_strides} over rows, columns, reduction)")
        return x, y
