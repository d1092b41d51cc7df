"""A simulated VTA-style tensor accelerator: `--target accel`.

- `config.AccelConfig`: the hardware (GEMM core shape, buffer sizes, DMA bandwidth/latency, ALU width).
- `isa`: LOAD / GEMM / ALU / STORE / FINISH with dependency-token flags.
- `simulator.Simulator.run(program, dram)`: bit-exact execution and cycle counts of the load,
  compute and store modules overlapping as the tokens allow (`Stats`: cycles, busy, MACs, utilization).
- `intrin`: the GEMM intrinsic for `Stage.tensorize`, and micro-op kernels lowered through it.
- `codegen.conv2d_program`: the one instruction-stream path, for convolutions and matmuls (with
  bias / requantize / ReLU on the ALU), with or without latency hiding (two virtual threads); the
  micro-op kernels come from tensorize + lower, the loops around them are generated directly;
  `pipeline.link` adds the tokens.
- `quant`: the quantization scheme and `run_layer(kind, x_int8, w_int8, bias_int32, attrs, config,
  latency_hiding=True) -> (output, stats)`, what the graph compiler calls for each conv2d / matmul
  (other operators run on the host); `reference` is its numpy twin.
- `offload.offloadable`: which graph nodes `--target accel` sends to the accelerator.
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
