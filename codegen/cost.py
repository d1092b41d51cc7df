"""The superoptimizer's cost model for `taso compile --target cpu`: operators priced as taso-py's own
kernels run them on this machine, not as ONNX Runtime does.

A roofline of this machine's measured limits (`codegen.machine`), with the efficiencies the
kernels reach: the register-tiled convolutions and matrix products run near the FMA peak; a
3x3 convolution that Winograd computes costs the fraction of its direct FLOPs that the
transformed products and transforms take (measured on VGG's and ResNet's layers); depthwise
and other narrow convolutions are bound by memory; element-wise operators mostly fuse into
the kernel before them; each kernel costs a dispatch. The prices are predictions: `taso
compile` measures the compiled result before it keeps a rewrite (see taso_py.cli.compile).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from taso_py.codegen.machine import Limits, limits
from taso_py.codegen.topi import conv, winograd
from taso_py.cost.model import OpCall
from taso_py.ops.schema import Fusion

BLOCK = 16
DENSE_EFFICIENCY = 0.9  # of the FMA peak: register-tiled convolutions and matmuls (benchmarks/codegen_kernels)
WINOGRAD_SHARE = {4: 0.4, 2: 0.65}  # Winograd's time over direct's, by output tile (benchmarks/codegen_kernels)
DISPATCH_MS = 0.003  # a kernel's fixed cost: the pool's dispatch, loop set-up
FUSED_SHARE = 0.3  # of an element-wise operator's memory time: most fuse into the kernel before them
VIEWS = frozenset({"reshape", "flatten"})


@dataclass
class KernelCost:
    """`CostModel` of taso-py's CPU kernels on this machine (milliseconds)."""

    machine: Limits = field(default_factory=limits)
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    name: str = "compiled"
    unit: str = "ms"
    seconds = 0.0  # nothing is timed (not a field)

    def cost(self, call: OpCall) -> float:
        op = call.op.name
        flops = call.op.count_flops(call.inputs, call.outputs, call.attrs)
        moved = sum(t.size * t.dtype.numpy.itemsize for t in (*call.inputs, *call.outputs))
        compute_ms = flops / (self.machine.peak(self.threads) * 1e6)
        memory_ms = moved / (self.machine.bandwidth(self.threads) * 1e6)
        if op in VIEWS:
            return memory_ms * FUSED_SHARE
        if op == "conv2d":
            return DISPATCH_MS + max(self._conv(call, compute_ms), memory_ms)
        if op == "matmul":
            return DISPATCH_MS + max(compute_ms / DENSE_EFFICIENCY, memory_ms)
        if call.op.fusion is Fusion.INJECTIVE:
            return memory_ms * FUSED_SHARE
        return DISPATCH_MS + memory_ms + compute_ms

    def _conv(self, call: OpCall, compute_ms: float) -> float:
        attrs, w = call.attrs, call.inputs[1].shape
        if attrs.groups == w[0] and w[1] == 1:  # depthwise: a few FMAs per byte
            return compute_ms / 0.25
        if attrs.groups > 1 and conv.small_groups(attrs.groups, w, BLOCK):  # block-diagonal: BLOCK / width the work
            return compute_ms * (BLOCK // w[1]) / DENSE_EFFICIENCY
        if winograd.applies(attrs, w):
            m = winograd.tile_size(call.outputs[0].shape, (call.inputs[0].shape[1],), BLOCK)
            if m:
                return compute_ms * WINOGRAD_SHARE[m] / DENSE_EFFICIENCY
        return compute_ms / DENSE_EFFICIENCY

    def prepare(self, calls: Iterable[OpCall]) -> None:
        """Nothing to measure per operator (the machine's limits are measured once)."""
