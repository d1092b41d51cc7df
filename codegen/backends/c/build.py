"""Compile generated C with gcc into a shared library, cached by content hash, loaded via ctypes."""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from taso_py import host
from taso_py.cache import cache_root
from taso_py.codegen import isa
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.lower.ir import Buffer, PrimFunc

# -fopenmp-simd: `omp simd` and `declare simd` only (parallel loops run on the module's own pool, see pool.py)
CFLAGS = ("-O3", "-fopenmp-simd", "-pthread", "-D_GNU_SOURCE", "-fPIC", "-shared", "-std=gnu11", "-fno-math-errno",
          "-Wno-unused-variable", "-Wno-unknown-pragmas")


def cache_dir() -> Path:
    """Where compiled kernels are kept: `kernels/` in the one cache directory (`taso_py.cache`)."""
    path = cache_root() / "kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def compiler() -> str:
    cc = os.environ.get("CC", "gcc")
    if shutil.which(cc) is None:
        raise CodegenError(f"no C compiler: {cc!r} is not on PATH (install gcc or set CC)")
    return cc


def compile_shared(source: str, out: Path | None = None, extra: Sequence[str] = ()) -> Path:
    """A shared library built from C `source` by gcc; rebuilt only when the source or flags change."""
    return build_library(compiler(), [*CFLAGS, *isa.host().cflags, *extra], source, out, ".c", libs=("-lmvec", "-lm"))


def build_library(tool: str, flags: Sequence[str], source: str, out: Path | None, suffix: str,
                  libs: Sequence[str] = ()) -> Path:
    """`source` (a `suffix` file) compiled by `tool` into a shared library: at `out`, or in the
    cache under the content hash of tool, flags, source and the CPU's features (then reused: what
    `-march=native` means differs from CPU to CPU, and a kernel built for AVX-512 dies on a core
    without it); written atomically. The C and CUDA backends share it; a compiler error is one line."""
    key = f"{tool} {' '.join(flags)} {host.cpu().features}\n{source}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:20]
    name = Path(tool).name
    target = out or cache_dir() / f"{name}_{digest}.so"
    if target.exists() and out is None:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"taso-{name}-") as tmp:
        src = Path(tmp) / f"kernel{suffix}"
        src.write_text(source)
        so_tmp = Path(tmp) / "kernel.so"
        proc = subprocess.run([tool, *flags, str(src), "-o", str(so_tmp), *libs], capture_output=True, text=True)
        if proc.returncode != 0:
            first = next((ln for ln in proc.stderr.splitlines() if "error" in ln), proc.stderr.strip()[:300])
            raise CodegenError(f"{name} failed on generated code: {first}")
        fd, staged = tempfile.mkstemp(dir=target.parent, suffix=".so.tmp")
        os.close(fd)
        shutil.copyfile(so_tmp, staged)
        os.replace(staged, target)
    return target


def check_arrays(name: str, params: Sequence[Buffer], arrays: Sequence[np.ndarray]) -> list[int]:
    """The arrays' addresses, once each matches its parameter's shape and dtype and is contiguous."""
    if len(arrays) != len(params):
        raise CodegenError(f"kernel {name!r} takes {len(params)} arrays, got {len(arrays)}")
    for a, b in zip(arrays, params):
        if a.shape != b.shape or a.dtype != np.dtype(b.dtype) or not a.flags.c_contiguous:
            raise CodegenError(f"kernel {name!r}: {b.name} needs a contiguous {b.dtype} array of shape "
                               f"{b.shape}, got {a.dtype} {a.shape}")
    return [a.ctypes.data for a in arrays]


@dataclass
class Kernel:
    """A compiled kernel, called with numpy arrays of its parameters' shapes and dtypes."""

    name: str
    params: list[Buffer]
    fn: ctypes._CFuncPtr  # type: ignore[name-defined]

    def __call__(self, *arrays: np.ndarray) -> None:
        self.fn(*check_arrays(self.name, self.params, arrays))


class Module:
    """A loaded shared library and its kernels by name."""

    def __init__(self, path: Path, funcs: Sequence[PrimFunc], source: str) -> None:
        self.path = path
        self.source = source
        self.lib = ctypes.CDLL(str(path))
        self.kernels: dict[str, Kernel] = {}
        for f in funcs:
            fn = getattr(self.lib, f.name)
            fn.restype = None
            fn.argtypes = [ctypes.c_void_p] * len(f.params)
            self.kernels[f.name] = Kernel(f.name, f.params, fn)

    def __getitem__(self, name: str) -> Kernel:
        return self.kernels[name]


def build(funcs: PrimFunc | Sequence[PrimFunc], out: Path | None = None) -> Module:
    """C for the kernels, compiled and loaded."""
    from taso_py.codegen.backends.c.emit import CEmitter
    funcs = [funcs] if isinstance(funcs, PrimFunc) else list(funcs)
    source = CEmitter().module(funcs)
    return Module(compile_shared(source, out), funcs, source)
