"""What the code generator compiles for: one `Target` object per `--target`, carrying everything that differs.

Code that depends on the target asks the object (its emitter, its build, whether it may run
ONNX Runtime regions, ...) rather than comparing names, so adding a target is one entry here.
`Target.parse` is the one place a name becomes a target: the command line's `--target` and the
`target` a compiled module's manifest records both go through it.

This module sits below the graph compiler and the operator library (it imports backends only),
so both can import it without a cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from taso_py.codegen.backends import cuda
from taso_py.codegen.backends.accel.offload import offloadable
from taso_py.codegen.backends.c.build import compile_shared
from taso_py.codegen.backends.c.emit import CEmitter
from taso_py.codegen.errors import CodegenError
from taso_py.graph.ir import Graph, Node


@dataclass(frozen=True, eq=False)
class Target:
    """A target and what differs on it; compared by identity (there is one object per target)."""

    name: str
    schedules: str  # key of the operator library's schedule table (topi.registry.SCHEDULE)
    source: str  # the module's source file in the compiled directory
    emitter: Callable[[], CEmitter]  # the kernels' and run function's source code
    build: Callable[[str, Path], Path]  # source -> the module's shared library
    blocked_layouts: bool  # tensors may be NCHW[x]c (vector units); otherwise every tensor stays NCHW
    regions: bool  # nodes without kernels may run as ONNX Runtime regions inside the module
    device_memory: bool  # the run function copies inputs and outputs to a device and returns a status
    native: bool  # the whole module runs on this CPU as generated: it can be tuned, priced and timed here
    offload: Callable[[Graph, Node], bool] | None = None  # layers the simulated accelerator runs (int8)
    check_rtol: float | None = None  # None: the one equivalence criterion's default (taso_py.runtime)
    # operators of the algebra this target has no kernel for: they run in ONNX Runtime regions where
    # `regions` allows, else the compile is refused naming the node (tests/test_target_coverage.py)
    unsupported: frozenset[str] = frozenset()

    @property
    def rtol(self) -> float:
        """The tolerance outputs are checked with (max|a-b| / max|a|): int8 layers round more."""
        from taso_py.runtime import DEFAULT_RTOL  # imports ONNX; only the check needs it
        return DEFAULT_RTOL if self.check_rtol is None else self.check_rtol

    def unavailable(self) -> str | None:
        """Why a compiled module cannot run on this machine, or None."""
        if self.device_memory and cuda.device_count() == 0:
            return "no CUDA device on this machine to run the module on"
        return None

    @staticmethod
    def parse(name: str) -> Target:
        """The target called `name` (from `--target`, or a manifest)."""
        target = TARGETS.get(name)
        if target is None:
            raise CodegenError(f"unknown target {name!r} (known: {', '.join(TARGETS)})")
        return target

    def __repr__(self) -> str:
        return f"Target({self.name})"


CPU = Target("cpu", "cpu", "model.c", CEmitter, compile_shared, blocked_layouts=True, regions=True,
             device_memory=False, native=True)
CUDA = Target("cuda", "cuda", "model.cu", cuda.CudaEmitter, cuda.compile_cuda, blocked_layouts=False, regions=True,
              device_memory=True, native=False)
# the accelerator's host side is C with the CPU's schedules; offloaded layers are simulated by the runtime
ACCEL = Target("accel", "cpu", "model.c", CEmitter, compile_shared, blocked_layouts=False, regions=True,
               device_memory=False, native=False, offload=offloadable, check_rtol=5e-2)

TARGETS: dict[str, Target] = {t.name: t for t in (CPU, CUDA, ACCEL)}
