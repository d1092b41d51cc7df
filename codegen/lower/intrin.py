"""Tensor intrinsics: what `Stage.tensorize` maps an inner tile onto.

An intrinsic states the inner loop extents it replaces and checks that the stage computes
what it computes; a backend emits the call by the intrinsic's name. `GemmIntrin` (one reduce
axis, the tile in memory between calls) is the one the accelerator shares; `TileIntrin` is
the CPU's register tile over a whole reduction of several loops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from taso_py.codegen.errors import ScheduleError
from taso_py.codegen.lower.ir import Region
from taso_py.codegen.te.expr import Binary, Cast, Expr
from taso_py.codegen.te.tensor import Reduce, Tensor, TensorRead


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


@dataclass(frozen=True)
class TileIntrin:
    """C[i, g, l] (+)= sum over r1..rk of A[i, r1..rk] * B[g, l, r1..rk]: a register-resident tile of
    `rows` x (`groups` x `lanes`) outputs accumulated over the whole reduction.

    The CPU micro-kernel of blocked convolutions and matmuls. Unlike `GemmIntrin` the
    reduction may be several loops (input channel blocks, kernel rows and columns, channels
    within a block), each with its own strides, so the tile stays in registers from the first
    product to the last and is stored once. The loops it replaces, in order: rows, column
    groups, lanes, then the reduce loops (`reduce` gives their extents). Lanes are contiguous
    in C and B; A moves only with the rows and the reduction, B only with the columns and it.
    Its regions, in order: the output tile, A's, B's.
    """

    name: str
    rows: int
    groups: int
    lanes: int
    reduce: tuple[int, ...]

    @property
    def params(self) -> dict[str, Any]:
        return {"rows": self.rows, "groups": self.groups, "lanes": self.lanes, "reduce": self.reduce}

    @property
    def loop_extents(self) -> tuple[int, ...]:
        return (self.rows, self.groups, self.lanes, *self.reduce)

    def check(self, stage: Any, body: Expr) -> None:
        if not (isinstance(body, Reduce) and body.combiner == "sum" and len(body.axes) == len(self.reduce)):
            raise ScheduleError(f"tensorize {self.name!r}: stage {stage.name!r} is not a sum over "
                                f"{len(self.reduce)} axes")
        if not (isinstance(body.source, Binary) and body.source.op == "*") or body.dtype != "float32":
            raise ScheduleError(f"tensorize {self.name!r}: stage {stage.name!r} does not sum a float32 product")
        leaf = stage.leaf[-len(self.loop_extents):]
        if [iv.reduce for iv in leaf] != [False] * 3 + [True] * len(self.reduce):
            raise ScheduleError(f"tensorize {self.name!r}: the inner loops of {stage.name!r} must be (rows, "
                                f"column groups, lanes, reductions), got ({', '.join(iv.name for iv in leaf)})")

    def operands(self, body: Expr) -> list[TensorRead]:
        assert isinstance(body, Reduce) and isinstance(body.source, Binary)
        reads = [body.source.a, body.source.b]
        if not all(isinstance(r, TensorRead) for r in reads):
            raise ScheduleError(f"tensorize {self.name!r}: both factors must be tensor reads")
        return reads  # type: ignore[return-value]

    def arrange(self, x: Region, y: Region) -> tuple[Region, Region]:
        """The factors' tiles as (A, B): A is the one that does not move with the lanes. (A loop of
        one trip moves nothing, whatever its stride.)"""
        def still(r: Region) -> Region:
            return Region(r.buffer, r.offset, tuple(0 if e == 1 else st for e, st in zip(self.loop_extents,
                                                                                          r.loop_strides)))
        x, y = still(x), still(y)
        if x.loop_strides[2] != 0:
            x, y = y, x
        if x.loop_strides[1:3] != (0, 0) or y.loop_strides[0] != 0 or y.loop_strides[2] != 1:
            raise ScheduleError(f"tensorize {self.name!r}: the factors are not a tile product's (steps "
                                f"{x.loop_strides} and {y.loop_strides} over rows, groups, lanes, reductions; "
                                f"B's lanes must be contiguous)")
        return x, y
