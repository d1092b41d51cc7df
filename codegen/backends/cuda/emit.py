"""Lowered IR -> CUDA C: `__global__` kernels and an `extern "C"` host wrapper per PrimFunc.

`CudaEmitter` reuses `CEmitter`'s spelling of statements and expressions and overrides
what differs on the GPU (TVM's semantics of bound loops):

- Each top-level statement of a PrimFunc (a root stage's loop nest) is one kernel, launched
  in order. Top-level `Allocate`s are device buffers the host wrapper allocates.
- A loop bound to `blockIdx.*` / `threadIdx.*` is that index; the launch extent of a tag is
  the largest extent bound to it in the kernel, and smaller loops are guarded. A serial loop
  over a variable bound elsewhere in the kernel (a reduction's init nest repeats its
  stage's loop variables without their binding) is that index too.
- A `shared` buffer is a `__shared__` array: its fill (the cooperative fetch its stage's
  thread-bound loops make) is followed by `__syncthreads()`, and so is its use, so the next
  fill (the next step of an enclosing reduction loop) cannot overwrite it early.
- A `local` buffer is a per-thread array. One allocated outside its kernel's thread loops
  holds a whole block's tile in the IR, but each thread touches only its own elements, so it
  is privatized: the thread indices are dropped from its indices (they must weigh the same
  in every access) and the rest is renumbered densely, so a thread's 4x4 accumulator tile
  is 16 registers instead of a block-sized array.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from taso_py.codegen.backends.c.emit import C_TYPES, CEmitter
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.lower.ir import (
    Allocate,
    Buffer,
    For,
    Intrinsic,
    PrimFunc,
    Seq,
    Stmt,
    Store,
    walk_stmts,
)
from taso_py.codegen.lower.simplify import Ranges, linear, simplify
from taso_py.codegen.schedule.schedule import LoopKind
from taso_py.codegen.te.expr import Const, Expr, Load, Var, walk
from taso_py.codegen.te.intrinsics import ScalarIntrinsic, cuda_prelude
from taso_py.codegen.te.names import Names

PRELUDE_HEAD = r"""#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
__device__ __forceinline__ int32_t fdiv_i32(int32_t a, int32_t b) {
  int32_t q = a / b; return q - ((a % b != 0) & ((a < 0) != (b < 0))); }
__device__ __forceinline__ int32_t fmod_i32(int32_t a, int32_t b) {
  int32_t r = a % b; return r + ((r != 0) & ((r < 0) != (b < 0))) * b; }
"""
# MIN and MAX are functions, not the C backend's macros: `a > b ? a : b` over two loads lets nvcc load
# once from a select of the two addresses through the read-only cache (ld.global.nc), which returns a
# stale value when one operand is an accumulator the kernel itself writes (a reduction's output in
# global memory; wrong maxima on an H200). A function loads each operand once, then selects values;
# its type is the conditional's over values (a prvalue: over the parameters it would be a reference).
PRELUDE_TAIL = r"""template <class A, class B>
__device__ __forceinline__ auto MIN(A a, B b) -> decltype(true ? A() : B()) { return a < b ? a : b; }
template <class A, class B>
__device__ __forceinline__ auto MAX(A a, B b) -> decltype(true ? A() : B()) { return a > b ? a : b; }
#ifndef TASO_LAUNCH
#define TASO_LAUNCH(kernel, grid, block, ...) kernel<<<grid, block>>>(__VA_ARGS__)
#endif
#define TASO_CHECK(x) do { int e_ = (int)(x); if (e_ != 0) { status = e_; goto done; } } while (0)
extern "C" const char* taso_cuda_error_string(int code) {
  return code == -1 ? "no CUDA device is available" : cudaGetErrorString((cudaError_t)code);
}
"""

NO_DEVICE = -1  # the host wrapper's status when cudaGetDeviceCount finds no device
TAGS = tuple(f"{s}.{d}" for s in ("blockIdx", "threadIdx") for d in "xyz")


@dataclass(frozen=True)
class _Named:
    """A host-side name (a device pointer) drawn from the same name table as the buffers."""

    name: str


@dataclass
class Launch:
    """One kernel of a PrimFunc: its name, launch extents per tag and the global buffers it uses."""

    name: str
    body: Stmt
    extents: dict[str, int]
    buffers: list[Buffer]

    def dims(self, kind: str) -> str:
        return ", ".join(str(self.extents.get(f"{kind}.{d}", 1)) for d in "xyz")


class CudaEmitter(CEmitter):
    """One CUDA translation unit: kernels and host wrappers for a list of PrimFuncs."""

    restrict = "__restrict__"

    def module_source(self, bodies: list[str]) -> str:
        return PRELUDE_HEAD + cuda_prelude() + PRELUDE_TAIL + "\n" + "\n".join(bodies)

    def spelling(self, f: ScalarIntrinsic, dtype: str) -> str:
        return f.cuda_float or f.c_float if dtype == "float32" else f.c_double

    def function(self, f: PrimFunc) -> str:
        self.names = Names(sanitize=True)
        self.vector_bufs = {}  # no GCC vector types on the GPU: vectorized loops are unrolled
        self.ranges: Ranges = {s.var: (0, s.extent - 1) for s in walk_stmts(f.body) if isinstance(s, For)}
        for b in f.params:
            self.names(b)
        temps: list[Buffer] = []
        stmts = _kernel_stmts(f.body, temps)
        launches = [Launch(f"{f.name}_k{k}", s, _thread_extents(s), _globals(s, f.params, temps))
                    for k, s in enumerate(stmts)]
        for b in temps:
            self.names(b)
        return "".join(self.kernel(k) for k in launches) + self.host(f, temps, launches)

    # ---- kernels -----------------------------------------------------------------------------

    def kernel(self, k: Launch) -> str:
        self.thread_vars: dict[Var, str] = {}
        for s in walk_stmts(k.body):
            if isinstance(s, For) and s.kind is LoopKind.THREAD:
                self.thread_vars[s.var] = s.thread_tag
        self.launch = k
        self.remap: dict[Buffer, tuple[dict[str, int], dict[int, int], int]] = {}
        params = ", ".join(f"{C_TYPES[b.dtype]}* {self.restrict} {self.names(b)}" for b in k.buffers)
        threads = int(np.prod([k.extents.get(f"threadIdx.{d}", 1) for d in "xyz"]))
        lines = [f"__global__ void __launch_bounds__({threads}) {k.name}({params}) {{"]
        lines += list(self.stmt(k.body, 1, in_parallel=True))
        lines.append("}")
        return "\n".join(lines) + "\n"

    def loop(self, s: For, depth: int, in_parallel: bool) -> Iterator[str]:
        pad = "  " * depth
        v = self.names(s.var)
        tag = s.thread_tag if s.kind is LoopKind.THREAD else self.thread_vars.get(s.var)
        if tag is not None:  # the loop is a thread or block index
            yield f"{pad}{{ const int32_t {v} = {tag};"
            if s.extent < self.launch.extents[tag]:
                yield f"{pad}  if ({v} < {s.extent}) {{"
                yield from self.stmt(s.body, depth + 2, in_parallel)
                yield f"{pad}  }}"
            else:
                yield from self.stmt(s.body, depth + 1, in_parallel)
            yield f"{pad}}}"
            return
        if s.kind in (LoopKind.UNROLLED, LoopKind.VECTORIZED):
            yield f"{pad}#pragma unroll"
        yield f"{pad}for (int32_t {v} = 0; {v} < {s.extent}; ++{v}) {{"
        yield from self.stmt(s.body, depth + 1, in_parallel)
        yield f"{pad}}}"

    def allocate(self, s: Allocate, depth: int, in_parallel: bool) -> Iterator[str]:
        pad = "  " * depth
        b = s.buffer
        if b.scope == "shared":
            yield from self.shared(s, depth, in_parallel)
            return
        size = b.size
        plan = _privatize(b, s.body, self.thread_vars, self.ranges)
        if plan is not None:
            self.remap[b] = plan
            size = plan[2]
        yield f"{pad}{C_TYPES[b.dtype]} {self.names(b)}[{size}];"
        yield from self.stmt(s.body, depth, in_parallel)

    def shared(self, s: Allocate, depth: int, in_parallel: bool) -> Iterator[str]:
        """Nested shared buffers, each filled by the first statement of its body: all fills, one
        barrier, the use, one barrier."""
        pad = "  " * depth
        fills: list[Stmt] = []
        rest: Stmt = s
        while isinstance(rest, Allocate) and rest.buffer.scope == "shared":
            b = rest.buffer
            yield f"{pad}__shared__ {C_TYPES[b.dtype]} {self.names(b)}[{b.size}];"
            body = rest.body.stmts if isinstance(rest.body, Seq) else (rest.body,)
            if len(body) < 2:
                raise CodegenError(f"shared buffer {b.name!r} is not filled before it is used "
                                   f"(compute its stage at a loop of its reader)")
            fills.append(body[0])
            rest = Seq(body[1:]) if len(body) > 2 else body[1]
        for fill in fills:
            yield from self.stmt(fill, depth, in_parallel)
        yield f"{pad}__syncthreads();"
        yield from self.stmt(rest, depth, in_parallel)
        yield f"{pad}__syncthreads();"

    def stmt(self, s: Stmt, depth: int, in_parallel: bool) -> Iterator[str]:
        if isinstance(s, Store) and s.buffer in self.remap:
            yield f"{'  ' * depth}{self.names(s.buffer)}[{self.expr(self.private_index(s.buffer, s.index))}] = " \
                  f"{self.expr(s.value)};"
        else:
            yield from super().stmt(s, depth, in_parallel)

    def expr(self, e: Expr) -> str:
        if isinstance(e, Load) and e.buffer in self.remap:
            return f"{self.names(e.buffer)}[{self.expr(self.private_index(e.buffer, e.index))}]"
        return super().expr(e)

    def private_index(self, b: Buffer, index: Expr) -> Expr:
        """The index with the thread terms dropped and the others renumbered (see `_privatize`)."""
        _, radix, _ = self.remap[b]
        out: Expr = Const(0)
        for atom, c in linear(simplify(index, self.ranges)).terms.items():
            if c in radix and not _is_thread(atom, self.thread_vars):
                out = out + atom * radix[c]  # type: ignore[operator]
        return simplify(out)

    def intrinsic(self, s: Intrinsic, depth: int) -> Iterator[str]:
        raise CodegenError(f"the cuda backend has no intrinsic {s.name!r} (tensorize is for the cpu and accel targets)")

    # ---- host wrapper --------------------------------------------------------------------------

    def host(self, f: PrimFunc, temps: list[Buffer], launches: list[Launch]) -> str:
        """Two entry points, each returning 0, -1 (no device) or a cudaError_t:
        `name_launch(device pointers...)` allocates the intermediate buffers and launches the
        kernels on the default stream (for a runtime that keeps tensors on the GPU), and
        `name(host pointers...)` copies the inputs in, calls it, waits and copies the outputs back."""
        written = {s.buffer for s in walk_stmts(f.body) if isinstance(s, Store)}
        handles = {b: _Named(f"d_{self.names(b)}") for b in [*f.params, *temps]}  # kept alive: Names keys by id
        dev = {b: self.names(h) for b, h in handles.items()}

        def decl(bufs: list[Buffer], names: dict[Buffer, str]) -> str:
            return ", ".join(f"{C_TYPES[b.dtype]}* {names[b]}" for b in bufs)

        lines = [f'extern "C" int {f.name}_launch({decl(f.params, dev)}) {{', "  int status = 0;"]
        lines += [f"  {C_TYPES[b.dtype]}* {dev[b]} = NULL;" for b in temps]
        lines += [f"  TASO_CHECK(cudaMalloc((void**)&{dev[b]}, {max(1, _nbytes(b))}));" for b in temps]
        for k in launches:
            args = ", ".join(dev[b] for b in k.buffers)
            lines.append(f"  TASO_LAUNCH({k.name}, dim3({k.dims('blockIdx')}), dim3({k.dims('threadIdx')}), {args});")
            lines.append("  TASO_CHECK(cudaGetLastError());")
        lines.append("done:")
        lines += [f"  cudaFree({dev[b]});" for b in temps]
        lines += ["  return status;", "}"]

        host_names = {b: self.names(b) for b in f.params}
        lines += [f'extern "C" int {f.name}({decl(f.params, host_names)}) {{', "  int status = 0, devices = 0;"]
        lines += [f"  {C_TYPES[b.dtype]}* {dev[b]} = NULL;" for b in f.params]
        lines += ["  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return -1;"]
        lines += [f"  TASO_CHECK(cudaMalloc((void**)&{dev[b]}, {max(1, _nbytes(b))}));" for b in f.params]
        copy = "  TASO_CHECK(cudaMemcpy({}, {}, {}, cudaMemcpy{}));"
        lines += [copy.format(dev[b], host_names[b], _nbytes(b), "HostToDevice") for b in f.params if b not in written]
        lines += [f"  TASO_CHECK({f.name}_launch({', '.join(dev[b] for b in f.params)}));",
                  "  TASO_CHECK(cudaDeviceSynchronize());"]
        lines += [copy.format(host_names[b], dev[b], _nbytes(b), "DeviceToHost") for b in f.params if b in written]
        lines.append("done:")
        lines += [f"  cudaFree({dev[b]});" for b in f.params]
        lines += ["  return status;", "}"]
        return "\n".join(lines) + "\n"


def _nbytes(b: Buffer) -> int:
    return b.size * np.dtype(b.dtype).itemsize


def _kernel_stmts(s: Stmt, temps: list[Buffer]) -> list[Stmt]:
    """The statements that become kernels, in order; top-level allocations go to `temps`."""
    if isinstance(s, Allocate):
        temps.append(s.buffer)
        return _kernel_stmts(s.body, temps)
    if isinstance(s, Seq):
        return [k for x in s.stmts for k in _kernel_stmts(x, temps)]
    return [s]


def _thread_extents(s: Stmt) -> dict[str, int]:
    extents: dict[str, int] = {}
    for x in walk_stmts(s):
        if isinstance(x, For) and x.kind is LoopKind.THREAD:
            extents[x.thread_tag] = max(extents.get(x.thread_tag, 1), x.extent)
    if extents.get("blockIdx.y", 1) > 65535 or extents.get("blockIdx.z", 1) > 65535 \
            or extents.get("blockIdx.x", 1) > 2**31 - 1:
        raise CodegenError(f"a kernel binds {extents} blocks: blockIdx.x allows 2^31-1, blockIdx.y and "
                           f"blockIdx.z 65535 (bind the longest loop to blockIdx.x)")
    threads = int(np.prod([extents.get(f"threadIdx.{d}", 1) for d in "xyz"]))
    if threads > 1024:
        raise CodegenError(f"a kernel binds {threads} threads per block (at most 1024): {extents}")
    return extents


def _globals(s: Stmt, params: list[Buffer], temps: list[Buffer]) -> list[Buffer]:
    """The device buffers a kernel reads or writes, parameters first."""
    used: set[Buffer] = set()
    for x in walk_stmts(s):
        if isinstance(x, Store):
            used.add(x.buffer)
            exprs = [x.index, x.value]
        else:
            exprs = [getattr(x, "cond", None)]
        for e in exprs:
            if e is not None:
                used.update(y.buffer for y in walk(e) if isinstance(y, Load))
    return [b for b in [*params, *temps] if b in used]


def _is_thread(atom: Expr, thread_vars: dict[Var, str]) -> bool:
    return isinstance(atom, Var) and thread_vars.get(atom, "").startswith("threadIdx")


def _privatize(b: Buffer, body: Stmt, thread_vars: dict[Var, str],
               ranges: Ranges) -> tuple[dict[str, int], dict[int, int], int] | None:
    """(weight of each thread tag, new weight of each old coefficient, size) for a local buffer
    whose accesses are linear in the thread indices with the same weights and whose other
    terms are loop variables with mixed-radix coefficients; None when that does not hold
    (then each thread keeps the whole array, which is correct, only larger)."""
    indices = []
    for s in walk_stmts(body):
        exprs = [s.index, s.value] if isinstance(s, Store) else [getattr(s, "cond", None)]
        if isinstance(s, Store) and s.buffer is b:
            indices.append(s.index)
        for e in exprs:
            if e is not None:
                indices += [x.index for x in walk(e) if isinstance(x, Load) and x.buffer is b]
    weights: dict[str, int] | None = None
    digits: dict[int, int] = {}  # coefficient -> number of values
    for index in indices:
        lin = linear(simplify(index, ranges))
        w: dict[str, int] = {}
        for atom, c in lin.terms.items():
            if isinstance(atom, Var) and ranges.get(atom) == (0, 0):
                continue  # a loop of one trip (a block index over a single block)
            if _is_thread(atom, thread_vars):
                tag = thread_vars[atom]  # type: ignore[index]
                if w.get(tag, c) != c:
                    return None
                w[tag] = c
            elif isinstance(atom, Var) and c > 0 and atom in ranges:
                digits[c] = max(digits.get(c, 1), ranges[atom][1] + 1)
            else:
                return None
        if lin.constant != 0 or (weights is not None and w != weights):
            return None
        weights = w
    if not weights:
        return None
    coefs = sorted(digits)
    radix, size = {}, 1
    for k, c in enumerate(coefs):  # the old map must be injective: each coefficient exceeds all below it
        if sum(x * (digits[x] - 1) for x in coefs[:k]) >= c:
            return None
        radix[c] = size
        size *= digits[c]
    if size >= b.size:
        return None
    return weights, radix, size
