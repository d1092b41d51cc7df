"""Run generated CUDA on the CPU: the same source compiled by g++ against a small CUDA stand-in.

For machines without a GPU (CI, this project's build machines): the emitted kernels and
host wrappers are compiled unchanged, with a `cuda_runtime.h` that maps device memory to
host memory and launches each block as real threads (one OS thread per CUDA thread, the
block's `__syncthreads()` a barrier, `__shared__` arrays shared by them, blocks one after
another). This checks what the emitter decides — the index arithmetic of bound loops,
launch extents, shared-memory fills and barriers, privatized accumulators, host copies —
against numpy without a device; it says nothing about nvcc's code or speed.
"""

from __future__ import annotations

import ctypes
import hashlib
from collections.abc import Sequence
from pathlib import Path

from taso_py.codegen.backends.c.build import cache_dir, compile_shared
from taso_py.codegen.backends.cuda.build import CudaModule, source
from taso_py.codegen.lower.ir import PrimFunc

RUNTIME_H = r"""#pragma once
#include <barrier>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
typedef int cudaError_t;
enum { cudaSuccess = 0, cudaErrorMemoryAllocation = 2, cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2,
       cudaMemcpyDeviceToDevice = 3 };
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
inline thread_local dim3 threadIdx, blockIdx;
inline std::barrier<>* taso_emu_barrier = nullptr;
inline void __syncthreads() { taso_emu_barrier->arrive_and_wait(); }
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaMalloc(void** p, size_t n) {
  *p = std::malloc(n); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, int) { std::memcpy(d, s, n); return cudaSuccess; }
inline cudaError_t cudaFree(void* p) { std::free(p); return cudaSuccess; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline const char* cudaGetErrorString(cudaError_t) { return "emulated CUDA runtime error"; }
template <class K, class... A> void taso_emu_launch(K kernel, dim3 grid, dim3 block, A... args) {
  unsigned n = block.x * block.y * block.z;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        std::barrier<> bar(n);
        taso_emu_barrier = &bar;
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < n; ++t)
          threads.emplace_back([=] {
            blockIdx = dim3(bx, by, bz);
            threadIdx = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
            kernel(args...);
          });
        for (auto& th : threads) th.join();
      }
}
#define TASO_LAUNCH(kernel, grid, block, ...) taso_emu_launch(kernel, grid, block, __VA_ARGS__)
"""


def _include_dir() -> Path:
    path = cache_dir() / f"cuda_emu_{hashlib.sha256(RUNTIME_H.encode()).hexdigest()[:12]}"
    header = path / "cuda_runtime.h"
    if not header.exists():
        path.mkdir(parents=True, exist_ok=True)
        tmp = path / f"cuda_runtime.h.{id(path)}.tmp"
        tmp.write_text(RUNTIME_H)
        tmp.replace(header)
    return path


def compile_emulated(text: str) -> Path:
    """A shared library of CUDA source `text` (ours: prelude, kernels, entry points, and any host
    code around them) for the CPU emulation; cached by content hash like the C backend's."""
    path = compile_shared(text, extra=("-x", "c++", "-std=c++20", "-O1", "-pthread", "-Wno-attributes",
                                       "-I", str(_include_dir())))
    # the gcc driver does not link the C++ runtime (and links flags before the source): load it globally
    ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
    return path


def build_emulated(funcs: PrimFunc | Sequence[PrimFunc]) -> CudaModule:
    """The kernels' CUDA source compiled for the CPU emulation; called like `cuda.build(...)`'s module."""
    funcs = [funcs] if isinstance(funcs, PrimFunc) else list(funcs)
    text = source(funcs)
    return CudaModule(compile_emulated(text), funcs, text)
