"""The accelerator's GEMM intrinsic and the micro-op kernels `tensorize` produces with it.

A block of a convolution (or a matmul, a 1x1 convolution over rows) whose operands sit in
the on-chip buffers is written as a tensor expression over those buffers, scheduled with
its (batch, block_out, block_in) inner tile tensorized onto `AccelGemmIntrin`, and lowered
by `codegen.lower`. The lowered loop nest holds one intrinsic call per tile GEMM and the
reduction's init stores; evaluating their (linear) buffer offsets over the loop ranges gives
the micro-op kernel of a GEMM instruction: which accumulator, input and weight tile each
micro-op uses, and which accumulator tiles a reset zeroes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from taso_py.codegen import te
from taso_py.codegen.backends.accel.config import AccelConfig
from taso_py.codegen.backends.accel.isa import UopKernel
from taso_py.codegen.errors import CodegenError, ScheduleError
from taso_py.codegen.lower import For, Intrinsic, Stmt, Store, lower
from taso_py.codegen.lower.intrin import GemmIntrin
from taso_py.codegen.lower.ir import Seq
from taso_py.codegen.lower.simplify import linear
from taso_py.codegen.schedule import create_schedule
from taso_py.codegen.te.expr import Const, Expr, Var
from taso_py.codegen.te.tensor import Reduce


@dataclass(frozen=True)
class AccelGemmIntrin(GemmIntrin):
    """acc[b, o] += sum_i inp[b, i] * wgt[o, i] on one (batch, block_out, block_in) tile.

    Unlike the CPU's `GemmIntrin` the stage may reduce over several axes (input channel
    blocks, kernel rows and columns) outside the tile; the tile's factors must be int8 and
    its sum int32, the GEMM core's types.
    """

    @staticmethod
    def for_config(cfg: AccelConfig) -> AccelGemmIntrin:
        return AccelGemmIntrin("accel.gemm", cfg.batch, cfg.block_out, cfg.block_in)

    one_reduce_axis: ClassVar[bool] = False
    loop_names: ClassVar[str] = "batch, block_out, block_in"

    def check_types(self, stage: Any, body: Reduce) -> None:
        if body.dtype != "int32":
            raise ScheduleError(f"tensorize {self.name!r}: stage {stage.name!r} accumulates {body.dtype}, not int32")
        for side in self.input_order(body):
            if side.dtype != "int8":
                raise ScheduleError(f"tensorize {self.name!r}: factor {side.name!r} is {side.dtype}, not int8")


@dataclass(frozen=True)
class ConvBlock:
    """One on-chip block of a direct convolution: `toc` output and `tic` input channel blocks,
    `th` x `ow` output pixels, a kh x kw kernel at `stride`, the input window `iht` x `iwp`."""

    toc: int
    tic: int
    th: int
    ow: int
    kh: int
    kw: int
    stride: int
    iht: int
    iwp: int


@functools.lru_cache(maxsize=256)
def conv_kernel(cfg: AccelConfig, blk: ConvBlock) -> UopKernel:
    """The micro-op kernel of `blk`, by tensorizing and lowering its tensor expression."""
    s_, b_, bi, bo = blk.stride, cfg.batch, cfg.block_in, cfg.block_out
    inp = te.placeholder((blk.tic, blk.iht, blk.iwp, b_, bi), "int8", "inp")
    wgt = te.placeholder((blk.toc, blk.tic, blk.kh, blk.kw, bo, bi), "int8", "wgt")
    ric, rkh, rkw, ri = (te.reduce_axis(e, n) for e, n in ((blk.tic, "ic"), (blk.kh, "kh"), (blk.kw, "kw"), (bi, "ci")))
    acc = te.compute(
        (blk.toc, blk.th, blk.ow, b_, bo),
        lambda oc, h, w, b, o: te.sum(te.cast("int32", inp[ric, h * s_ + rkh, w * s_ + rkw, b, ri])
                                      * te.cast("int32", wgt[oc, ric, rkh, rkw, o, ri]), axis=[ric, rkh, rkw, ri]),
        name="acc", tag="conv2d")
    sch = create_schedule(acc)
    st = sch[acc]
    oc, h, w, b, o = st.axes
    st.reorder(oc, h, w, ric, rkh, rkw, b, o, ri)
    st.tensorize(b, AccelGemmIntrin.for_config(cfg))
    return kernel_from_lowered(cfg, lower(sch, [inp, wgt, acc], "uops").body)


def kernel_from_lowered(cfg: AccelConfig, body: Stmt) -> UopKernel:
    """Micro-ops from a lowered nest of `accel.gemm` calls and zero stores into the accumulator."""
    uops: list[list[np.ndarray]] = [[], [], []]
    resets: list[np.ndarray] = []
    tiles = (cfg.acc_tile_elems, cfg.inp_tile_elems, cfg.wgt_tile_elems)
    # the tile each operand covers, as strides over the (batch, block_out, block_in) loops
    want = ((cfg.block_out, 1, 0), (cfg.block_in, 0, 1), (0, cfg.block_in, 1))

    def visit(s: Stmt, loops: list[tuple[Var, int]]) -> None:
        if isinstance(s, For):
            visit(s.body, [*loops, (s.var, s.extent)])
        elif isinstance(s, Seq):
            for x in s.stmts:
                visit(x, loops)
        elif isinstance(s, Intrinsic):
            if s.name != "accel.gemm":
                raise CodegenError(f"accel: cannot run intrinsic {s.name!r}")
            for k, (r, tile, stride) in enumerate(zip(s.regions, tiles, want)):
                if r.loop_strides != stride:
                    raise CodegenError(f"accel: {r.buffer.name} tile is not contiguous (strides {r.loop_strides})")
                uops[k].append(_tile_index(evaluate(r.offset, loops), tile, r.buffer.name))
            if s.params.get("reset"):  # the tile holds the whole reduction: the call zeroes it first
                resets.append(uops[0][-1])
        elif isinstance(s, Store) and isinstance(s.value, Const) and s.value.value == 0:
            resets.append(evaluate(s.index, loops) // cfg.acc_tile_elems)
        else:
            raise CodegenError(f"accel: cannot map lowered statement {type(s).__name__} onto the GEMM core")

    visit(body, [])
    acc, inp, wgt = (np.concatenate(u) if u else np.zeros(0, np.int64) for u in uops)
    reset = np.unique(np.concatenate(resets)) if resets else np.zeros(0, np.int64)
    return UopKernel(acc, inp, wgt, reset)


def evaluate(e: Expr, loops: list[tuple[Var, int]]) -> np.ndarray:
    """A linear index over every iteration of `loops` (outermost first), flattened."""
    lin = linear(e)
    shape = tuple(ext for _, ext in loops)
    out = np.full(shape, lin.constant, np.int64)
    pos = {v: k for k, (v, _) in enumerate(loops)}
    for atom, coeff in lin.terms.items():
        if not isinstance(atom, Var) or atom not in pos:
            raise CodegenError(f"accel: index {e} is not linear in the enclosing loops")
        k = pos[atom]
        out += coeff * np.arange(shape[k]).reshape([-1 if j == k else 1 for j in range(len(shape))])
    return out.ravel()


def _tile_index(offsets: np.ndarray, tile: int, name: str) -> np.ndarray:
    if np.any(offsets % tile):
        raise CodegenError(f"accel: {name} tile offsets are not multiples of the {tile}-element tile")
    return offsets // tile

