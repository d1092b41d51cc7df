#!/usr/bin/env bash
# Every check that needs a real GPU, in one run sized for a short lease on a GPU machine: the CUDA
# tests, the suite through `--target cuda` (compile, `taso run --check` against ONNX Runtime, time),
# and the kernel benchmark against torch. Logs and results go to $OUT (default /tmp/taso-gpu-check).
# Usage, from a checkout: bash benchmarks/gpu_check.sh [RUNS]
set -u
out=${OUT:-/tmp/taso-gpu-check}
runs=${1:-20}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  nvcc --version | tail -1
  "$py" -V
  lscpu | grep -E '^Model name|^CPU\(s\)'
  uptime
} 2>&1 | tee "$out/env.txt"

# the tests (about one core) beside the suite (8 compiles at once, then one model timed at a time)
"$py" -m pytest tests/test_cuda.py tests/test_codegen_cuda_compile.py -p no:cacheprovider -rfEs --tb=short \
  >"$out/tests.log" 2>&1 &
tests=$!
timeout 300 "$py" -m benchmarks.cuda_suite --runs "$runs" --jobs 8 --compile-timeout 240 --out "$out" 2>&1 | tee "$out/suite.log"
wait "$tests"
echo "tests exit $?" >>"$out/tests.log"
tail -15 "$out/tests.log"
timeout 100 "$py" -m benchmarks.cuda_kernels --runs "$runs" --grid 2>&1 | tee "$out/kernels.log"
