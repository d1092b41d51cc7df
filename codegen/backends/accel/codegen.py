"""Instruction streams for convolution and matmul layers (direct convolution, VTA's way).

What goes through the generic stack and what does not, honestly: the micro-op kernel of
every GEMM instruction comes from `codegen.te` + `Stage.tensorize(AccelGemmIntrin)` +
`codegen.lower` (see `intrin.conv_kernel`). The loops *around* a block -- which output tile
and input-channel chunk each step works on, the DMA loads into the on-chip buffers (zero
padding included), the ALU epilogue, the two virtual threads and their dependency tokens --
are generated here from a tiled loop nest directly, not by lowering `cache_read` /
`cache_write` stages. This is the only path: the tiling search, ragged tiles, input and
weight reuse across steps and the epilogue are what every offloaded layer needs.

Layout (NCHW with 16-channel tiles, batch 1): input tiles (IC/16, H, W), weight tiles
(OC/16, IC/16, KH, KW), output tiles (OC/16, OH, OW); accumulator tiles of a block are
(toc, th, OW). Per-channel bias and requantize multiplier tiles are loaded once into the
accumulator buffer's head and stay.

Latency hiding: output tiles are dealt alternately to two virtual threads, each with its
own half of every buffer, and their steps (one input-channel chunk of one output tile)
are interleaved in one stream; `pipeline.link` adds the dependency tokens. A step whose
thread's buffer half still holds its input (or weight) block skips that load. Without
latency hiding the same tiles run on one thread, so each load waits for the previous
step's GEMM.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from taso_py.codegen.backends.accel.config import AccelConfig
from taso_py.codegen.backends.accel.intrin import ConvBlock, conv_kernel
from taso_py.codegen.backends.accel.isa import Alu, Finish, Gemm, Insn, Load, Store
from taso_py.codegen.backends.accel.pipeline import Step, link
from taso_py.codegen.backends.accel.simulator import Simulator, Stats
from taso_py.codegen.errors import CodegenError


@dataclass(frozen=True)
class ConvShape:
    """A batch-1 NCHW convolution with a symmetric zero padding; channels any positive count."""

    ic: int
    ih: int
    iw: int
    oc: int
    kh: int
    kw: int
    stride: int = 1
    pad: int = 0

    @property
    def oh(self) -> int:
        return (self.ih + 2 * self.pad - self.kh) // self.stride + 1

    @property
    def ow(self) -> int:
        return (self.iw + 2 * self.pad - self.kw) // self.stride + 1

    @property
    def macs(self) -> int:
        return self.oc * self.oh * self.ow * self.ic * self.kh * self.kw

    @staticmethod
    def matmul(m: int, k: int, n: int) -> ConvShape:
        """(m x k) @ (k x n) as a 1x1 convolution over m rows of one pixel."""
        return ConvShape(k, m, 1, n, 1, 1)


@dataclass(frozen=True)
class Epilogue:
    """What the ALU does to a finished output tile: add the bias; then either keep int32
    (`shift` None; `relu` clamps at 0) or requantize to int8: (acc * mult[c] + 2^(shift-1))
    >> shift, clipped to [-128, 127] ([0, 127] with `relu`)."""

    bias: bool = False
    shift: int | None = None
    relu: bool = False

    @property
    def out_dtype(self) -> str:
        return "int32" if self.shift is None else "int8"


@dataclass(frozen=True)
class Tiling:
    """Per step: `toc` output and `tic` input channel blocks, `th` output rows (all columns);
    `order` "oc" loops output-channel tiles outside spatial tiles, "sp" the reverse."""

    toc: int
    tic: int
    th: int
    order: str = "sp"


@dataclass
class Program:
    """An instruction stream and the DRAM tensors it expects: name -> (tiles, elements, dtype)."""

    insns: list[Insn]
    shape: ConvShape
    tiling: Tiling
    latency_hiding: bool
    dram: dict[str, tuple[int, int, str]] = field(default_factory=dict)


@dataclass
class _Step:
    thread: int
    oc_t: int
    sp_t: int
    chunk: int
    first: bool
    last: bool
    load_inp: bool = False  # not when the thread's input half already holds this block
    load_wgt: bool = False


def conv2d_program(shape: ConvShape, epi: Epilogue, cfg: AccelConfig | None = None, *, latency_hiding: bool = True,
                   tiling: Tiling | None = None) -> Program:
    """The instruction stream of one convolution; `tiling` defaults to `choose_tiling`'s."""
    cfg = cfg or AccelConfig()
    _check_shape(shape, cfg)
    t = tiling or choose_tiling(shape, epi, cfg)
    g = _Geometry(shape, cfg, t)
    g.check_fits()
    steps = _steps(g, latency_hiding)
    insns: list[Insn] = []
    ocb = g.ocb
    if epi.bias:
        insns.append(Load(buffer="acc", dram="bias", dram_offset=0, y_size=1, x_size=ocb, x_stride=ocb, sram_offset=0))
    if epi.shift is not None:
        insns.append(Load(buffer="acc", dram="mult", dram_offset=0, y_size=1, x_size=ocb, x_stride=ocb,
                          sram_offset=ocb))
    insns += link([Step(st.thread, _load_insns(g, st), _compute_insns(g, st, epi),
                         _store_insns(g, st, epi) if st.last else [], st.first) for st in steps])
    insns.append(Finish())
    dram = {"inp": (g.icb * shape.ih * shape.iw, cfg.inp_tile_elems, "int8"),
            "wgt": (ocb * g.icb * shape.kh * shape.kw, cfg.wgt_tile_elems, "int8"),
            "out": (ocb * shape.oh * shape.ow, cfg.acc_tile_elems, epi.out_dtype)}
    if epi.bias:
        dram["bias"] = (ocb, cfg.acc_tile_elems, "int32")
    if epi.shift is not None:
        dram["mult"] = (ocb, cfg.acc_tile_elems, "int32")
    return Program(insns, shape, t, latency_hiding, dram)


def simulate_timing(prog: Program, cfg: AccelConfig | None = None) -> Stats:
    """Cycle counts of `prog` without computing (zero DRAM tensors of the right shapes)."""
    dram = {n: np.zeros((tiles, el), dt) for n, (tiles, el, dt) in prog.dram.items()}
    return Simulator(cfg).run(prog.insns, dram, execute=False)


# ---- geometry ---------------------------------------------------------------------------------

class _Geometry:
    """Tile counts, block shapes and buffer halves of one (shape, tiling)."""

    def __init__(self, shape: ConvShape, cfg: AccelConfig, t: Tiling) -> None:
        self.shape, self.cfg, self.t = shape, cfg, t
        self.icb = -(-shape.ic // cfg.block_in)
        self.ocb = -(-shape.oc // cfg.block_out)
        self.n_oc = -(-self.ocb // t.toc)
        self.n_sp = -(-shape.oh // t.th)
        self.n_ch = -(-self.icb // t.tic)
        s = shape
        self.iwp = s.pad + s.iw + max(0, (s.ow - 1) * s.stride + s.kw - s.pad - s.iw)
        self.inp_half = cfg.capacity("inp") // 2
        self.wgt_half = cfg.capacity("wgt") // 2
        self.acc_head = 2 * self.ocb  # bias and multiplier tiles
        self.acc_half = (cfg.capacity("acc") - self.acc_head) // 2

    def iht(self, th: int) -> int:
        return (th - 1) * self.shape.stride + self.shape.kh

    def sizes(self, oc_t: int, sp_t: int, chunk: int) -> tuple[int, int, int]:
        t = self.t
        return (min(t.toc, self.ocb - oc_t * t.toc), min(t.tic, self.icb - chunk * t.tic),
                min(t.th, self.shape.oh - sp_t * t.th))

    def block(self, oc_t: int, sp_t: int, chunk: int) -> ConvBlock:
        toc, tic, th = self.sizes(oc_t, sp_t, chunk)
        s = self.shape
        return ConvBlock(toc, tic, th, s.ow, s.kh, s.kw, s.stride, self.iht(th), self.iwp)

    def check_fits(self) -> None:
        t, s = self.t, self.shape
        need = {"inp": t.tic * self.iht(t.th) * self.iwp, "wgt": t.toc * t.tic * s.kh * s.kw,
                "acc": t.toc * t.th * s.ow}
        have = {"inp": self.inp_half, "wgt": self.wgt_half, "acc": self.acc_half}
        for buf in need:
            if need[buf] > have[buf]:
                raise CodegenError(f"accel: tiling {t} needs {need[buf]} {buf} tiles per thread, "
                                   f"half the buffer holds {have[buf]}")


def _check_shape(shape: ConvShape, cfg: AccelConfig) -> None:
    if cfg.batch != 1:
        raise CodegenError("accel: the code generator handles batch-1 GEMM cores only")
    if min(shape.oh, shape.ow) < 1 or (shape.pad > 0 and shape.pad >= min(shape.kh, shape.kw)):
        raise CodegenError(f"accel: unsupported convolution {shape} (empty output, or a window all padding)")


# ---- steps and their tokens -----------------------------------------------------------------

def _steps(g: _Geometry, latency_hiding: bool) -> list[_Step]:
    tiles = [(o, p) for o in range(g.n_oc) for p in range(g.n_sp)] if g.t.order == "oc" else \
        [(o, p) for p in range(g.n_sp) for o in range(g.n_oc)]
    steps: list[_Step] = []
    group = 2 if latency_hiding else 1
    for k in range(0, len(tiles), group):
        pair = tiles[k:k + group]
        for c in range(g.n_ch):
            for v, (o, p) in enumerate(pair):
                steps.append(_Step(v, o, p, c, c == 0, c == g.n_ch - 1))
    res_inp: dict[int, tuple[int, int]] = {}
    res_wgt: dict[int, tuple[int, int]] = {}
    for st in steps:
        st.load_inp = res_inp.get(st.thread) != (st.sp_t, st.chunk)
        st.load_wgt = res_wgt.get(st.thread) != (st.oc_t, st.chunk)
        res_inp[st.thread], res_wgt[st.thread] = (st.sp_t, st.chunk), (st.oc_t, st.chunk)
    return steps


def _load_insns(g: _Geometry, st: _Step) -> list[Load]:
    s, t = g.shape, g.t
    toc, tic, th = g.sizes(st.oc_t, st.sp_t, st.chunk)
    out: list[Load] = []
    if st.load_inp:
        iht = g.iht(th)
        r_lo = st.sp_t * t.th * s.stride - s.pad
        lo, hi = max(r_lo, 0), min(r_lo + iht, s.ih)
        for c in range(tic):
            ic = st.chunk * t.tic + c
            out.append(Load(buffer="inp", dram="inp", dram_offset=(ic * s.ih + lo) * s.iw, y_size=hi - lo,
                            x_size=s.iw, x_stride=s.iw, sram_offset=st.thread * g.inp_half + c * iht * g.iwp,
                            y_pad0=lo - r_lo, y_pad1=r_lo + iht - hi, x_pad0=s.pad, x_pad1=g.iwp - s.pad - s.iw))
    if st.load_wgt:
        per = s.kh * s.kw
        out.append(Load(buffer="wgt", dram="wgt", dram_offset=(st.oc_t * t.toc * g.icb + st.chunk * t.tic) * per,
                        y_size=toc, x_size=tic * per, x_stride=g.icb * per, sram_offset=st.thread * g.wgt_half))
    return out


def _compute_insns(g: _Geometry, st: _Step, epi: Epilogue) -> list[Insn]:
    toc, _tic, th = g.sizes(st.oc_t, st.sp_t, st.chunk)
    kernel = conv_kernel(g.cfg, g.block(st.oc_t, st.sp_t, st.chunk))
    acc_base = g.acc_head + st.thread * g.acc_half
    bases = {"acc_base": acc_base, "inp_base": st.thread * g.inp_half, "wgt_base": st.thread * g.wgt_half}
    out: list[Insn] = []
    out.append(Gemm(kernel=kernel, reset=st.first, **bases))
    if st.last:
        n = toc * th * g.shape.ow
        dst = acc_base + np.arange(n)
        chan = st.oc_t * g.t.toc + np.repeat(np.arange(toc), th * g.shape.ow)
        if epi.bias:
            out.append(Alu(op="add", dst=dst, src=chan))
        if epi.shift is not None:
            out.append(Alu(op="requant", dst=dst, src=g.ocb + chan, imm=(epi.shift, 0 if epi.relu else -128, 127)))
        elif epi.relu:
            out.append(Alu(op="max", dst=dst, imm=(0,)))
    return out


def _store_insns(g: _Geometry, st: _Step, epi: Epilogue) -> list[Store]:
    s, t = g.shape, g.t
    toc, _tic, th = g.sizes(st.oc_t, st.sp_t, st.chunk)
    n = th * s.ow
    base = g.acc_head + st.thread * g.acc_half
    return [Store(dram="out", dram_offset=((st.oc_t * t.toc + c) * s.oh + st.sp_t * t.th) * s.ow, y_size=1, x_size=n,
                  x_stride=n, sram_offset=base + c * n, dtype=epi.out_dtype) for c in range(toc)]


# ---- choosing a tiling -----------------------------------------------------------------------

def choose_tiling(shape: ConvShape, epi: Epilogue, cfg: AccelConfig | None = None, simulate: int = 3) -> Tiling:
    """The tiling that fits the buffer halves with the fewest cycles: every candidate ranked
    by a roofline-style estimate, the best `simulate` of them timed by the simulator."""
    cfg = cfg or AccelConfig()
    _check_shape(shape, cfg)
    icb, ocb = -(-shape.ic // cfg.block_in), -(-shape.oc // cfg.block_out)
    ranked = []
    for toc, tic, th, order in itertools.product(_sizes(ocb), _sizes(icb), range(1, shape.oh + 1), ("sp", "oc")):
        g = _Geometry(shape, cfg, Tiling(toc, tic, th, order))
        try:
            g.check_fits()
        except CodegenError:
            continue
        ranked.append((_estimate(g, epi), g.t))
    if not ranked:
        raise CodegenError(f"accel: no tiling of {shape} fits the on-chip buffers")
    ranked.sort(key=lambda x: x[0])
    best = ranked[: max(1, simulate)]
    if len(best) == 1:
        return best[0][1]
    timed = [(simulate_timing(conv2d_program(shape, epi, cfg, tiling=t), cfg).cycles, k, t)
             for k, (_, t) in enumerate(best)]
    return min(timed)[2]


def _sizes(blocks: int) -> list[int]:
    """Divisors of `blocks` (no ragged tiles) and powers of two up to it."""
    return sorted({d for d in range(1, blocks + 1) if blocks % d == 0} | {1 << k for k in range(8) if 1 << k <= blocks})


def _estimate(g: _Geometry, epi: Epilogue) -> float:
    """Cycles if compute, loads and stores overlapped perfectly, plus a first load and last store."""
    cfg, s, t = g.cfg, g.shape, g.t
    lat, bw = cfg.dma_latency, cfg.dma_bytes_per_cycle
    tiles = g.n_oc * g.n_sp
    steps = tiles * g.n_ch
    gemm = g.ocb * g.icb * s.kh * s.kw * s.oh * s.ow + steps * cfg.gemm_overhead
    passes = 1 + int(epi.bias) + int(epi.shift is not None or epi.relu)  # 1: the GEMM
    acc_tiles = g.ocb * s.oh * s.ow
    compute = gemm + acc_tiles * (passes - 1) * cfg.acc_tile_elems / cfg.alu_lanes + tiles * passes * cfg.alu_overhead
    inp_bytes = g.icb * g.iht(t.th) * g.iwp * cfg.inp_tile_elems * g.n_sp  # one pass over the input
    wgt_bytes = g.ocb * g.icb * s.kh * s.kw * cfg.wgt_tile_elems
    if g.n_ch == 1 and t.order == "sp":  # inputs stay while output-channel tiles pass, weights reload
        loads = inp_bytes * min(2, g.n_oc) / bw + g.n_sp * t.tic * lat + wgt_bytes * g.n_sp / bw + steps * lat
    elif g.n_ch == 1:
        loads = inp_bytes * g.n_oc / bw + steps * t.tic * lat + wgt_bytes * min(2, g.n_sp) / bw + g.n_oc * lat
    else:
        loads = inp_bytes * g.n_oc / bw + steps * t.tic * lat + wgt_bytes * g.n_sp / bw + steps * lat
    store = acc_tiles * cfg.acc_tile_elems * (1 if epi.shift is not None else 4) / bw + tiles * t.toc * lat
    first = (t.tic * g.iht(t.th) * g.iwp * cfg.inp_tile_elems + t.toc * t.tic * s.kh * s.kw * cfg.wgt_tile_elems) / bw
    return max(compute, loads, store) + first + t.toc * t.th * s.ow * cfg.acc_tile_elems / bw
