"""The analytical cost model: FLOPs and bytes against a roofline, plus a fixed cost per operator.

Fast and deterministic, for tests and for machines where timing is not wanted. The defaults are
this 2-core machine's: numpy's BLAS reaches about 145 GFLOP/s on a large matmul and a STREAM
triad about 30 GB/s; an operator costs ONNX Runtime a few microseconds even when it does nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from taso_py.cost.model import OpCall

VIEWS = frozenset({"reshape", "flatten"})  # ONNX Runtime reuses the input buffer


@dataclass(frozen=True)
class Roofline:
    peak_gflops: float = 100.0
    bandwidth_gbs: float = 25.0
    overhead_us: float = 3.0
    name: str = "analytical"
    unit: str = "ms"
    seconds = 0.0  # nothing is timed (not a field)

    def cost(self, call: OpCall) -> float:
        """Milliseconds: the slower of compute and memory traffic, plus the per-operator overhead."""
        overhead = self.overhead_us * 1e-3
        if call.op.name in VIEWS:
            return overhead
        flops = call.op.count_flops(call.inputs, call.outputs, call.attrs)
        moved = sum(t.size * t.dtype.numpy.itemsize for t in (*call.inputs, *call.outputs))
        return max(flops / (self.peak_gflops * 1e6), moved / (self.bandwidth_gbs * 1e6)) + overhead

    def prepare(self, calls: Iterable[OpCall]) -> None:
        """Nothing to measure."""
