"""From a lowered schedule to an instruction stream: the generic path of the accel target.

A schedule for the accelerator computes its output through `cache_write(C, "accel.acc")`,
reads its operands through `cache_read(A, "accel.inp", ...)` / `cache_read(B, "accel.wgt",
...)` computed at a reduction loop, and tensorizes the accumulator stage's inner tile with
`AccelGemmIntrin`. `codegen.lower` turns that into loops around: allocations in the
`accel.*` scopes, copy nests from DRAM into them, a zeroing nest, a nest of `accel.gemm`
calls and the copy nest back to DRAM. `program_from_lowered` walks those loops with concrete
values and maps each piece onto the hardware:
- a copy nest into `accel.inp`/`accel.wgt` -> 2-D DMA LOADs (the element copies grouped
  into whole tiles, the tiles into rows of equal length and stride; a guarded copy of a
  zero-padded input -> the loads' padding);
- the zeroing nest -> the `reset` of the tile's first GEMM; a gemm nest -> one GEMM whose
  micro-op kernel is the calls' tile offsets (`intrin.kernel_from_lowered`);
- the copy nest out of `accel.acc` -> STOREs (int32).
Every `accel.acc` allocation is one output tile. With `virtual_threads=2` the tiles are dealt
alternately to two threads, each with its own half of every buffer, and the two tiles' steps
(loads + GEMM per reduction block) interleave in one stream; `pipeline.link` adds the tokens.
`matmul_schedule` and `conv2d_schedule` build such schedules. The layouts must make operands
whole tiles (packed inputs (.., batch, block_in), weights (.., block_out, block_in), outputs
(.., batch, block_out)) and the tiles must divide the loops (no tail guards). Epilogues (bias,
requantize) are on the direct path (`codegen.conv2d_program`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from taso_py.codegen import te
from taso_py.codegen.backends.accel.config import AccelConfig
from taso_py.codegen.backends.accel.intrin import AccelGemmIntrin, evaluate, kernel_from_lowered
from taso_py.codegen.backends.accel.isa import Finish, Gemm, Insn, Load, Store, UopKernel
from taso_py.codegen.backends.accel.pipeline import Step, link
from taso_py.codegen.backends.accel.simulator import Simulator, Stats
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.lower.ir import Allocate, Buffer, For, Intrinsic, PrimFunc, Seq, Stmt, walk_stmts
from taso_py.codegen.lower.ir import Store as IrStore
from taso_py.codegen.schedule import Schedule, create_schedule
from taso_py.codegen.te.expr import Binary, Const, Expr, Not, Select, Var
from taso_py.codegen.te.expr import Load as IrLoad

SCOPES = {"accel.inp": "inp", "accel.wgt": "wgt", "accel.acc": "acc"}


@dataclass
class _Tile:
    thread: int
    steps: list[Step] = field(default_factory=list)
    reset: np.ndarray | None = None  # accumulator tiles zeroed before the first GEMM
    loads: list[Load] = field(default_factory=list)  # pending, for the next GEMM


class _Walker:
    def __init__(self, func: PrimFunc, cfg: AccelConfig, threads: int) -> None:
        self.cfg, self.threads = cfg, threads
        self.params = {b.name: b for b in func.params}
        self.base: dict[str, int] = {}  # on-chip buffer name -> tile offset
        self.top = {(t, s): t * cfg.capacity(s) // threads for t in range(threads) for s in ("inp", "wgt", "acc")}
        self.tiles: list[_Tile] = []
        self.tile: _Tile | None = None

    def elems(self, scope: str) -> int:
        return {"inp": self.cfg.inp_tile_elems, "wgt": self.cfg.wgt_tile_elems, "acc": self.cfg.acc_tile_elems}[scope]

    def run(self, s: Stmt, env: dict[Var, int]) -> None:
        if isinstance(s, Seq):
            for x in s.stmts:
                self.run(x, env)
        elif isinstance(s, Allocate):
            self.allocate(s, env)
        elif isinstance(s, For) and _only(s, (For, Intrinsic)):
            self.gemm(s, env)
        elif isinstance(s, For | IrStore) and _only(s, (For, IrStore)):
            self.copy(s, env)
        elif isinstance(s, For):
            for v in range(s.extent):
                self.run(s.body, {**env, s.var: v})
        elif isinstance(s, Intrinsic):
            self.gemm(s, env)
        else:
            raise CodegenError(f"accel: cannot map lowered statement {type(s).__name__} onto the accelerator")

    def allocate(self, s: Allocate, env: dict[Var, int]) -> None:
        scope = SCOPES.get(s.buffer.scope)
        if scope is None:
            raise CodegenError(f"accel: buffer {s.buffer.name!r} is in scope {s.buffer.scope!r}; on the accelerator "
                               f"every intermediate lives in {', '.join(SCOPES)}")
        if scope == "acc":
            self.tile = _Tile(len(self.tiles) % self.threads)
            self.tiles.append(self.tile)
        assert self.tile is not None, "the accumulator tile is allocated outside its operands"
        key = (self.tile.thread, scope)
        n = -(-s.buffer.size // self.elems(scope))
        limit = (self.tile.thread + 1) * self.cfg.capacity(scope) // self.threads
        if self.top[key] + n > limit:
            raise CodegenError(f"accel: {s.buffer.name!r} needs {n} {scope} tiles, {limit - self.top[key]} are free "
                               f"in this thread's part of the buffer")
        self.base[s.buffer.name] = self.top[key]
        self.top[key] += n
        self.run(s.body, env)
        self.top[key] -= n

    def copy(self, s: Stmt, env: dict[Var, int]) -> None:
        loops, store = _nest(s)
        assert isinstance(store, IrStore)
        dst_scope = SCOPES.get(store.buffer.scope)
        assert self.tile is not None
        if dst_scope == "acc" and isinstance(store.value, Const) and store.value.value == 0:
            self.tile.reset = evaluate(store.index, loops, env) // self.cfg.acc_tile_elems
            return
        value, valid = store.value, None
        if isinstance(value, Select) and isinstance(value.f, Const) and value.f.value == 0:  # zero padding
            valid = _evaluate_expr(value.cond, loops, env).astype(bool)
            value = value.t
        if not isinstance(value, IrLoad):
            raise CodegenError(f"accel: the copy into {store.buffer.name!r} computes; only copies map onto DMA")
        src_buf = value.buffer
        dst, src = evaluate(store.index, loops, env), evaluate(value.index, loops, env)
        if dst_scope in ("inp", "wgt") and src_buf.name in self.params:
            e = self.elems(dst_scope)
            base = self.base[store.buffer.name]
            if valid is None:
                rects = [dict(sram_offset=sram, dram_offset=dram, y_size=y, x_size=x, x_stride=stride)
                         for sram, dram, y, x, stride in _rows(dst, src, e, store.buffer.name)]
            else:
                rects = _padded_rows(dst, src, valid, e, store.buffer.shape[-3], store.buffer.name)
            for r in rects:
                r["sram_offset"] += base
                self.tile.loads.append(Load(buffer=dst_scope, dram=src_buf.name, **r))
        elif SCOPES.get(src_buf.scope) == "acc" and store.buffer.name in self.params:
            if store.buffer.dtype != "int32":
                raise CodegenError(f"accel: {store.buffer.name!r} is {store.buffer.dtype}; this path stores int32")
            stores = [Store(dram=store.buffer.name, dram_offset=dram, y_size=y, x_size=x, x_stride=stride,
                            sram_offset=self.base[src_buf.name] + sram, dtype="int32")
                      for sram, dram, y, x, stride in _rows(src, dst, self.cfg.acc_tile_elems, src_buf.name)]
            if not self.tile.steps:
                raise CodegenError("accel: an output tile is stored before any GEMM computed it")
            self.tile.steps[-1].stores += stores
        else:
            raise CodegenError(f"accel: copy {src_buf.name!r} ({src_buf.scope}) -> {store.buffer.name!r} "
                               f"({store.buffer.scope}) is not a DMA transfer")

    def gemm(self, s: Stmt, env: dict[Var, int]) -> None:
        tile = self.tile
        calls = [x for x in walk_stmts(s) if isinstance(x, Intrinsic)]
        if tile is None or any(SCOPES.get(r.buffer.scope) != k for x in calls for r, k in
                               zip(x.regions, ("acc", "inp", "wgt"))):
            raise CodegenError("accel: accel.gemm must read accel.inp / accel.wgt and write accel.acc buffers "
                               "(cache_read / cache_write them)")
        k = kernel_from_lowered(self.cfg, s, env)
        bases = [self.base[r.buffer.name] for r in calls[0].regions]
        first = not tile.steps
        reset = tile.reset if first and tile.reset is not None else k.reset_tiles  # relative to the buffer
        kernel = UopKernel(k.acc, k.inp, k.wgt, reset)
        g = Gemm(kernel=kernel, acc_base=bases[0], inp_base=bases[1], wgt_base=bases[2], reset=first)
        tile.steps.append(Step(tile.thread, tile.loads, [g], first=first))
        tile.loads = []


def program_from_lowered(func: PrimFunc, cfg: AccelConfig | None = None, virtual_threads: int = 2) -> list[Insn]:
    """The instruction stream of a lowered accelerator schedule (see the module docstring)."""
    cfg = cfg or AccelConfig()
    if virtual_threads not in (1, 2):
        raise CodegenError(f"accel: 1 or 2 virtual threads, not {virtual_threads}")
    w = _Walker(func, cfg, virtual_threads)
    w.run(func.body, {})
    steps: list[Step] = []
    for k in range(0, len(w.tiles), virtual_threads):
        group = [t.steps for t in w.tiles[k:k + virtual_threads]]
        for j in range(max(len(g) for g in group)):
            steps += [g[j] for g in group if j < len(g)]
    return [*link(steps), Finish()]


def run_lowered(func: PrimFunc, arrays: Sequence[np.ndarray], cfg: AccelConfig | None = None,
                virtual_threads: int = 2, **kw: object) -> Stats:
    """Run `func` on the simulator with its parameters bound to `arrays` (outputs written back)."""
    cfg = cfg or AccelConfig()
    prog = program_from_lowered(func, cfg, virtual_threads)
    dram = {}
    for buf, a in zip(func.params, arrays):
        if a.shape != buf.shape or a.dtype != buf.dtype:
            raise CodegenError(f"accel: {buf.name} needs {buf.dtype}{list(buf.shape)}, got {a.dtype}{list(a.shape)}")
        dram[buf.name] = a.reshape(-1, _tile_elems(cfg, buf))
    return Simulator(cfg).run(prog, dram, **kw)  # type: ignore[arg-type]


def _tile_elems(cfg: AccelConfig, buf: Buffer) -> int:
    return cfg.wgt_tile_elems if buf.shape[-2:] == (cfg.block_out, cfg.block_in) else buf.shape[-1] * buf.shape[-2]


def _only(s: Stmt, kinds: tuple[type, ...]) -> bool:
    return all(isinstance(x, kinds) for x in walk_stmts(s))


def _nest(s: Stmt) -> tuple[list[tuple[Var, int]], Stmt]:
    loops = []
    while isinstance(s, For):
        loops.append((s.var, s.extent))
        s = s.body
    return loops, s


def _evaluate_expr(e: Expr, loops: list[tuple[Var, int]], env: dict[Var, int]) -> np.ndarray:
    """An integer or boolean expression over every iteration of `loops` (flattened, as `evaluate`)."""
    shape = tuple(ext for _, ext in loops)
    pos = {v: k for k, (v, _) in enumerate(loops)}

    def go(x: Expr) -> np.ndarray:
        if isinstance(x, Const):
            return np.asarray(x.value)
        if isinstance(x, Var):
            if x in pos:
                k = pos[x]
                return np.arange(shape[k]).reshape([-1 if j == k else 1 for j in range(len(shape))])
            if x in env:
                return np.asarray(env[x])
        if isinstance(x, Not):
            return ~go(x.a).astype(bool)
        if isinstance(x, Select):
            return np.where(go(x.cond), go(x.t), go(x.f))
        if isinstance(x, Binary) and x.op in _OPS:
            return _OPS[x.op](go(x.a), go(x.b))
        raise CodegenError(f"accel: cannot evaluate {x} in a copy nest")

    return np.broadcast_to(go(e), shape).ravel()


_OPS = {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide, "%": np.mod, "min": np.minimum,
        "max": np.maximum, "<": np.less, "<=": np.less_equal, "==": np.equal, "!=": np.not_equal,
        "&&": np.logical_and, "||": np.logical_or}


def _padded_rows(onchip: np.ndarray, dram: np.ndarray, valid: np.ndarray, e: int, width: int,
                 name: str) -> list[dict[str, int]]:
    """A zero-padded copy (`valid` false: a zero) as 2-D LOADs: the on-chip tiles in rows of
    `width`, each row's valid tiles one contiguous DRAM run; rows with the same padding and a
    constant DRAM stride merge, rows of padding only become the loads' y padding."""
    order = np.argsort(onchip, kind="stable")
    on, dr, ok = onchip[order], dram[order], valid[order]
    if len(on) % (e * width) or on[0] % e or np.any(np.diff(on) != 1):
        raise CodegenError(f"accel: the copy of {name!r} does not fill whole, dense tiles")
    ok_t = ok.reshape(-1, e)
    if np.any(ok_t.any(1) != ok_t.all(1)):
        raise CodegenError(f"accel: the padding of {name!r} splits a tile")
    ok_t = ok_t[:, 0]
    dr_t = np.where(ok, dr, 0).reshape(-1, e)
    if np.any(dr_t[ok_t, 0] % e) or np.any(dr_t[ok_t] - dr_t[ok_t, :1] != np.arange(e)):
        raise CodegenError(f"accel: the copy of {name!r} does not move whole DRAM tiles")
    tiles = (dr_t[:, 0] // e).reshape(-1, width)
    ok_rows = ok_t.reshape(-1, width)
    out: list[dict[str, int]] = []
    pad_rows = 0
    for r in range(len(tiles)):
        cols = np.flatnonzero(ok_rows[r])
        if not len(cols):
            if out:
                out[-1]["y_pad1"] += 1
            else:
                pad_rows += 1
            continue
        x0, x = int(cols[0]), len(cols)
        src = int(tiles[r, x0])
        if x != cols[-1] - x0 + 1 or np.any(np.diff(tiles[r, cols]) != 1):
            raise CodegenError(f"accel: a row of {name!r} is not one contiguous DRAM run")
        last = out[-1] if out else None
        if (last is not None and last["y_pad1"] == 0 and (last["x_pad0"], last["x_size"]) == (x0, x)
                and (last["y_size"] == 1 or src - last["_end"] == last["x_stride"])):
            if last["y_size"] == 1:
                last["x_stride"] = src - last["dram_offset"]
            last["y_size"] += 1
            last["_end"] = src
            continue
        out.append(dict(sram_offset=(r - pad_rows) * width, dram_offset=src, y_size=1, x_size=x, x_stride=x,
                        y_pad0=pad_rows, y_pad1=0, x_pad0=x0, x_pad1=width - x0 - x, _end=src))
        pad_rows = 0
    if not out:
        raise CodegenError(f"accel: the copy of {name!r} is padding only")
    first = int(on[0]) // e
    for d in out:
        del d["_end"]
        d["sram_offset"] += first
    return out


def _rows(onchip: np.ndarray, dram: np.ndarray, e: int, name: str) -> list[tuple[int, int, int, int, int]]:
    """Element copies onchip[i] <-> dram[i] as 2-D tile transfers (sram tile, dram tile, y, x, stride)."""
    order = np.argsort(onchip, kind="stable")
    on, dr = onchip[order], dram[order]
    if len(on) % e or on[0] % e or np.any(np.diff(on) != 1):
        raise CodegenError(f"accel: the copy of {name!r} does not fill whole, dense tiles")
    on_t, dr_t = on.reshape(-1, e), dr.reshape(-1, e)
    if np.any(dr_t[:, 0] % e) or np.any(dr_t - dr_t[:, :1] != np.arange(e)):
        raise CodegenError(f"accel: the copy of {name!r} does not move whole DRAM tiles")
    tiles, sram0 = dr_t[:, 0] // e, int(on_t[0, 0]) // e
    breaks = np.flatnonzero(np.diff(tiles) != 1) + 1
    runs = np.split(np.arange(len(tiles)), breaks)
    x = len(runs[0])
    starts = tiles[[r[0] for r in runs]]
    if all(len(r) == x for r in runs) and (len(runs) < 3 or np.all(np.diff(starts) == starts[1] - starts[0])):
        stride = int(starts[1] - starts[0]) if len(runs) > 1 else x
        if stride >= x:
            return [(sram0, int(starts[0]), len(runs), x, stride)]
    return [(sram0 + int(r[0]), int(tiles[r[0]]), 1, len(r), len(r)) for r in runs]


def matmul_schedule(m: int, k: int, n: int, tm: int, tn: int, tk: int,
                    cfg: AccelConfig | None = None) -> tuple[Schedule, list[te.Tensor]]:
    """A packed int8 matmul scheduled for the accelerator: C[no, m, 0, j] = sum A[ko, m, 0, i] *
    B[no, ko, j, i] (A: (k/block_in, m, 1, block_in), B: (n/block_out, k/block_in, block_out,
    block_in), C int32 (n/block_out, m, 1, block_out)); output tiles of `tm` rows x `tn` channel
    blocks, `tk` input-channel blocks loaded per step. Returns the schedule and [A, B, C]."""
    cfg = cfg or AccelConfig()
    if cfg.batch != 1 or k % cfg.block_in or n % cfg.block_out:
        raise CodegenError(f"accel: matmul_schedule needs batch 1 and k, n multiples of {cfg.block_in}, "
                           f"{cfg.block_out}")
    ko, no, bi, bo = k // cfg.block_in, n // cfg.block_out, cfg.block_in, cfg.block_out
    a = te.placeholder((ko, m, 1, bi), "int8", "A")
    b = te.placeholder((no, ko, bo, bi), "int8", "B")
    rko, rki = te.reduce_axis(ko, "ko"), te.reduce_axis(bi, "ki")
    c = te.compute((no, m, 1, bo), lambda n_, m_, b_, j: te.sum(
        te.cast("int32", a[rko, m_, b_, rki]) * te.cast("int32", b[n_, rko, j, rki]), axis=[rko, rki]), name="C")
    s = create_schedule(c)
    cl = s.cache_write(c, "accel.acc")
    al = s.cache_read(a, "accel.inp", [cl])
    bl = s.cache_read(b, "accel.wgt", [cl])
    axes = s[c].axes
    _no, mo, _ni, _mi = s[c].tile(axes[0], axes[1], tn, tm)
    s[cl].compute_at(s[c], mo)
    cn, cm, cb, cj = s[cl].axes
    k_outer, k_inner = s[cl].split(s[cl].reduce_axes[0], tk)
    s[cl].reorder(k_outer, cn, cm, k_inner, cb, cj, s[cl].reduce_axes[1])
    s[al].compute_at(s[cl], k_outer)
    s[bl].compute_at(s[cl], k_outer)
    s[cl].tensorize(cb, AccelGemmIntrin.for_config(cfg))
    return s, [a, b, c]


def conv2d_schedule(ic: int, h: int, w: int, oc: int, kh: int, kw: int, stride: int, pad: int, toc: int, tic: int,
                    th: int, cfg: AccelConfig | None = None) -> tuple[Schedule, list[te.Tensor]]:
    """A packed int8 convolution: X (ic/block_in, h, w, 1, block_in), W (oc/block_out,
    ic/block_in, kh, kw, block_out, block_in), C int32 (oc/block_out, oh, ow, 1, block_out);
    the zero padding is an inlined stage, so it reaches the input's copy into `accel.inp` as a
    guard and becomes the DMA loads' padding. Output tiles of `toc` channel blocks x `th` rows
    (all columns), `tic` input-channel blocks loaded per step."""
    cfg = cfg or AccelConfig()
    bi, bo = cfg.block_in, cfg.block_out
    if cfg.batch != 1 or ic % bi or oc % bo:
        raise CodegenError(f"accel: conv2d_schedule needs batch 1 and channels in multiples of {bi}, {bo}")
    hp, wp = h + 2 * pad, w + 2 * pad
    oh, ow = (hp - kh) // stride + 1, (wp - kw) // stride + 1
    x = te.placeholder((ic // bi, h, w, 1, bi), "int8", "X")
    xp = te.compute((ic // bi, hp, wp, 1, bi), lambda c_, y, v, b, i: te.if_then_else(
        te.all_of(y >= pad, y < h + pad, v >= pad, v < w + pad), x[c_, y - pad, v - pad, b, i], te.const(0, "int8")),
        name="Xpad")
    wt = te.placeholder((oc // bo, ic // bi, kh, kw, bo, bi), "int8", "W")
    ric, rkh, rkw, rci = (te.reduce_axis(e, n) for e, n in ((ic // bi, "ic"), (kh, "kh"), (kw, "kw"), (bi, "ci")))
    c = te.compute((oc // bo, oh, ow, 1, bo), lambda o, y, v, b, j: te.sum(
        te.cast("int32", xp[ric, y * stride + rkh, v * stride + rkw, b, rci])
        * te.cast("int32", wt[o, ric, rkh, rkw, j, rci]), axis=[ric, rkh, rkw, rci]), name="C")
    s = create_schedule(c)
    cl = s.cache_write(c, "accel.acc")
    xl = s.cache_read(xp, "accel.inp", [cl])
    wl = s.cache_read(wt, "accel.wgt", [cl])
    s[xp].compute_inline()
    o, y, *_ = s[c].axes
    o_outer, o_inner = s[c].split(o, toc)
    h_outer, h_inner = s[c].split(y, th)
    s[c].reorder(o_outer, h_outer, o_inner, h_inner)
    s[cl].compute_at(s[c], h_outer)
    co, chh, cv, cb, cj = s[cl].axes
    ic_outer, ic_inner = s[cl].split(ric, tic)
    s[cl].reorder(ic_outer, co, chh, cv, ic_inner, rkh, rkw, cb, cj, rci)
    s[xl].compute_at(s[cl], ic_outer)
    s[wl].compute_at(s[cl], ic_outer)
    s[cl].tensorize(cb, AccelGemmIntrin.for_config(cfg))
    return s, [x, wt, c]
