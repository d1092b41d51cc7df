"""The CPU backend: C with OpenMP and SIMD, compiled by gcc and loaded through ctypes."""

from taso_py.codegen.backends.c.build import Kernel, Module, build, cache_dir, compile_shared
from taso_py.codegen.backends.c.emit import CEmitter

__all__ = ["CEmitter", "Kernel", "Module", "build", "cache_dir", "compile_shared"]
