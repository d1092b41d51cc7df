"""The GPU backend: CUDA C with bound thread loops, shared-memory tiles and a host wrapper, built by nvcc."""

from taso_py.codegen.backends.cuda.build import CudaKernel, CudaModule, build, compile_cuda, device_count, nvcc, source
from taso_py.codegen.backends.cuda.emit import CudaEmitter

__all__ = ["CudaEmitter", "CudaKernel", "CudaModule", "build", "compile_cuda", "device_count", "nvcc", "source"]
