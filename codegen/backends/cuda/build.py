"""Compile generated CUDA with nvcc into a shared library, cached by content hash, loaded via ctypes.

The library's entry points take host pointers (see `emit.CudaEmitter.host`), so a compiled
kernel is called with numpy arrays exactly like a CPU one. The default code is SASS for
sm_90 (H100/H200) plus compute_80 PTX, which the driver compiles for any other GPU from
Ampere on; $TASO_CUDA_ARCH replaces those flags (e.g. "-arch=sm_86").
"""

from __future__ import annotations

import ctypes
import os
import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from taso_py.codegen.backends.c.build import build_library, check_arrays
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.lower.ir import Buffer, PrimFunc

NVCC_FLAGS = ("-O3", "-Xcompiler", "-fPIC", "-shared", "-std=c++17", "-w")
DEFAULT_ARCH = ("-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_80,code=compute_80")


def nvcc() -> str:
    """$NVCC, else `nvcc` on PATH."""
    exe = os.environ.get("NVCC", "nvcc")
    path = shutil.which(exe)
    if path is None:
        raise CodegenError(f"no CUDA compiler: {exe!r} is not on PATH (install the CUDA toolkit, or set NVCC)")
    return path


def arch_flags() -> tuple[str, ...]:
    env = os.environ.get("TASO_CUDA_ARCH")
    return tuple(shlex.split(env)) if env else DEFAULT_ARCH


def compile_cuda(source: str, out: Path | None = None) -> Path:
    """A shared library built from CUDA `source` by nvcc; rebuilt only when the source, nvcc or flags change."""
    return build_library(nvcc(), [*NVCC_FLAGS, *arch_flags()], source, out, ".cu")


class CudaKernel:
    """A compiled PrimFunc: called with host numpy arrays; copies to and from the GPU on each call."""

    def __init__(self, name: str, params: list[Buffer], fn: ctypes._CFuncPtr,  # type: ignore[name-defined]
                 launch_fn: ctypes._CFuncPtr, error: ctypes._CFuncPtr) -> None:  # type: ignore[name-defined]
        self.name, self.params, self.fn, self.launch_fn, self.error = name, params, fn, launch_fn, error

    def __call__(self, *arrays: np.ndarray) -> None:
        self._check(self.fn(*check_arrays(self.name, self.params, arrays)))

    def launch(self, *device_pointers: int) -> None:
        """Launch on device buffers (addresses, e.g. torch's `data_ptr()`), no copies, no wait."""
        if len(device_pointers) != len(self.params):
            raise CodegenError(f"kernel {self.name!r} takes {len(self.params)} buffers, got {len(device_pointers)}")
        self._check(self.launch_fn(*device_pointers))

    def _check(self, status: int) -> None:
        if status != 0:
            raise CodegenError(f"cuda kernel {self.name!r} failed: {self.error(status).decode()}")


class CudaModule:
    """A loaded library of CUDA kernels by name (the same interface as the C backend's Module)."""

    def __init__(self, path: Path, funcs: Sequence[PrimFunc], source: str) -> None:
        self.path = path
        self.source = source
        self.lib = ctypes.CDLL(str(path))
        error = self.lib.taso_cuda_error_string
        error.restype, error.argtypes = ctypes.c_char_p, [ctypes.c_int]
        self.kernels: dict[str, CudaKernel] = {}
        for f in funcs:
            fns = [getattr(self.lib, f.name), getattr(self.lib, f"{f.name}_launch")]
            for fn in fns:
                fn.restype = ctypes.c_int
                fn.argtypes = [ctypes.c_void_p] * len(f.params)
            self.kernels[f.name] = CudaKernel(f.name, f.params, *fns, error)

    def __getitem__(self, name: str) -> CudaKernel:
        return self.kernels[name]


def source(funcs: PrimFunc | Sequence[PrimFunc]) -> str:
    """The CUDA translation unit for the kernels (no compiler needed)."""
    from taso_py.codegen.backends.cuda.emit import CudaEmitter
    return CudaEmitter().module([funcs] if isinstance(funcs, PrimFunc) else list(funcs))


def build(funcs: PrimFunc | Sequence[PrimFunc], out: Path | None = None) -> CudaModule:
    """CUDA for the kernels, compiled by nvcc (one call for all of them) and loaded."""
    funcs = [funcs] if isinstance(funcs, PrimFunc) else list(funcs)
    text = source(funcs)
    return CudaModule(compile_cuda(text, out), funcs, text)


def device_count() -> int:
    """How many CUDA devices the driver reports (0 where there is no driver or no GPU)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    return count.value if lib.cuInit(0) == 0 and lib.cuDeviceGetCount(ctypes.byref(count)) == 0 else 0
