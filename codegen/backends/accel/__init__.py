"""A simulated VTA-style tensor accelerator: `--target accel`.

- `config.AccelConfig`: the hardware (GEMM core shape, buffer sizes, DMA bandwidth/latency, ALU width).
- `isa`: LOAD / GEMM / ALU / STORE / FINISH with dependency-token flags.
- `simulator.Simulator.run(program, dram)`: bit-exact execution and cycle counts of the load,
  compute and store modules overlapping as the tokens allow (`Stats`: cycles, busy, MACs, utilization).
- `intrin`: the GEMM intrinsic for `Stage.tensorize`, and micro-op kernels lowered through it.
- `codegen.conv2d_program`: instruction streams for convolutions and matmuls (with bias /
  requantize / ReLU on the ALU), with or without latency hiding (two virtual threads); the
  micro-op kernels come from tensorize + lower, the loops around them are generated directly.
- `lowered.program_from_lowered`: the generic path -- a schedule with `cache_read` /
  `cache_write` into the `accel.inp` / `accel.wgt` / `accel.acc` scopes and a tensorized inner
  tile, lowered by `codegen.lower`, mapped onto LOAD / GEMM / STORE (packed int32 matmuls and
  zero-padded convolutions: `lowered.matmul_schedule`, `lowered.conv2d_schedule`).
  `pipeline.link` adds the tokens for both paths.
- `quant`: the quantization scheme and `run_layer(kind, x_int8, w_int8, bias_int32, attrs, config,
  latency_hiding=True) -> (output, stats)`, what the graph compiler calls for each conv2d / matmul
  (other operators run on the host); `reference` is its numpy twin.
"""

from taso_py.codegen.backends.accel.codegen import ConvShape, Epilogue, Program, Tiling, choose_tiling, conv2d_program
from taso_py.codegen.backends.accel.config import AccelConfig
from taso_py.codegen.backends.accel.intrin import AccelGemmIntrin
from taso_py.codegen.backends.accel.quant import LayerAttrs, reference, run_layer
from taso_py.codegen.backends.accel.simulator import (
    AccelError,
    BufferOverflowError,
    DeadlockError,
    ProtocolError,
    Simulator,
    Stats,
)

__all__ = [
    "AccelConfig", "AccelError", "AccelGemmIntrin", "BufferOverflowError", "ConvShape", "DeadlockError", "Epilogue",
    "LayerAttrs", "Program", "ProtocolError", "Simulator", "Stats", "Tiling", "choose_tiling", "conv2d_program",
    "reference", "run_layer",
]
