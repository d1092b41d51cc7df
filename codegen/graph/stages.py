"""The first and last stages every target's compile shares, and the report they fill.

`prepare` folds and fuses the graph before partitioning; `publish_module` emits the lowered
kernels with the target's emitter, pre-packs weights, plans the arena and writes the directory
(`module`). The target-specific middle is `compiler.compile_graph` (kernels for every group)
or `accel.compile_accel` (layers on the accelerator, the rest on the host).
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taso_py.codegen.errors import CodegenError
from taso_py.codegen.graph.fallback import RegionWriter, held_in_arena
from taso_py.codegen.graph.kernels import Buffer, Kernel, KernelBuilder, prepack
from taso_py.codegen.graph.memory import plan_memory
from taso_py.codegen.graph.module import (
    c_run_function,
    cuda_run_functions,
    lifetimes,
    manifest_of,
    nbytes,
    region_steps,
    segments_of,
    weight_blob,
    write_directory,
)
from taso_py.graph.fold import fold_constants
from taso_py.graph.ir import Graph
from taso_py.graph.normalize import batchnorm_to_affine, fold_batchnorm, fuse_activations
from taso_py.runtime import available_memory


@dataclass
class CompileReport:
    groups: int = 0
    kernels: int = 0
    unique_kernels: int = 0
    layout_transforms: int = 0
    blocked_groups: int = 0
    accel_layers: int = 0  # layers on the simulated accelerator (--target accel)
    kernel_nodes: int = 0  # graph nodes computed by our kernels
    fallback_nodes: int = 0  # graph nodes run by ONNX Runtime inside the module (graph.fallback)
    regions: int = 0
    kernel_failures: list[str] = field(default_factory=list)  # groups whose kernel failed to build (run in ORT)
    arena_bytes: int = 0
    unshared_bytes: int = 0
    weight_bytes: int = 0
    seconds: dict[str, float] = field(default_factory=dict)

    def stats(self) -> dict[str, int]:
        """What the manifest records of the compile."""
        return {"groups": self.groups, "kernels": self.kernels, "unique_kernels": self.unique_kernels,
                "kernel_nodes": self.kernel_nodes, "fallback_nodes": self.fallback_nodes, "regions": self.regions,
                "layout_transforms": self.layout_transforms, "blocked_groups": self.blocked_groups,
                "arena_bytes": self.arena_bytes, "unshared_bytes": self.unshared_bytes}


def prepare(graph: Graph) -> Graph:
    """A copy with batch norms folded into convolutions (the others an affine map), activations fused,
    weight-only subgraphs folded."""
    g = graph.copy()
    fold_batchnorm(g)
    batchnorm_to_affine(g)
    fuse_activations(g)
    fold_constants(g)
    g.remove_unused()
    return g


def publish_module(g: Graph, b: KernelBuilder, order: list[Kernel], report: CompileReport, out_dir: Path,
                   write_onnx: Callable[[Path], None] | None, steps: list[dict[str, Any]] | None = None,
                   write_region: RegionWriter | None = None) -> None:
    """Emit the kernels (each distinct one once), pre-pack weights, plan the arena and write the
    directory. `order` is every step of a run; with `steps` (steps the host does not run as one C
    call, the accelerator's layers) the manifest lists them and the module has no run function.
    Regions (`b.regions`, run by ONNX Runtime) are written with `write_region`, and the kernels
    between them become one run function per segment (`module.segments_of`)."""
    clock = time.perf_counter()
    target = b.target
    emitter = target.emitter()
    bodies: dict[str, str] = {}  # C body without its name -> function name
    sources: list[str] = []
    loops: list[str] = []  # the lowered loop IR of each distinct kernel, for people to read
    for lw in b.steps:
        text = emitter.function(lw.func)
        key = hashlib.sha1(re.sub(rf"\b{lw.func.name}(?=\b|_par\d)", "NAME", text).encode()).hexdigest()
        if key not in bodies:
            bodies[key] = lw.func.name
            sources.append(text)
            loops.append(f"# {lw.kernel.group}\n{lw.func}\n")
        lw.kernel.name = bodies[key]
    report.kernels, report.unique_kernels = len(b.steps), len(bodies)
    report.layout_transforms = sum(1 for k in order if k.group.startswith("layout_"))
    report.seconds["emit"] = time.perf_counter() - clock

    clock = time.perf_counter()
    for key, value in prepack(b.steps, b.values).items():
        b.values[key] = value
        b.buffers[key] = Buffer(key, value.shape, value.dtype.name, "weight")
    read = {key for k in order for key in k.reads} | set(b.copies.values())
    for key in [k for k, buf in b.buffers.items() if buf.kind == "weight" and k not in read]:
        del b.buffers[key]
    report.seconds["prepack"] = time.perf_counter() - clock
    plan = plan_memory(lifetimes(order, b.buffers))
    memory = available_memory()  # now: the check runs the module
    if plan.arena_bytes > memory:
        raise CodegenError(f"the model's intermediates need {plan.arena_bytes / 2**30:,.1f} GiB at once, more than "
                           f"the {memory / 2**30:,.1f} GiB of memory available")
    for key, offset in plan.offsets.items():
        b.buffers[key].offset = offset
    report.arena_bytes, report.unshared_bytes = plan.arena_bytes, plan.unshared_bytes
    weights = weight_blob(b.values, b.buffers)
    report.weight_bytes = len(weights)

    source = emitter.module_source(sources)
    manifest = manifest_of(g, target.name, order, b.buffers, plan.arena_bytes, report.stats())
    segments = segments_of(order, b.regions) if steps is None and b.regions else None
    if target.device_memory:
        # 0 for an output only ONNX Runtime shapes (the runtime takes it from the region, graph.fallback)
        out_bytes = [nbytes(Buffer("", g.type(r).shape, g.type(r).dtype.value, "output"))
                     if held_in_arena(g.type(r)) else 0 for r in g.outputs]
        source += cuda_run_functions(order, b.buffers, b.copies, plan.arena_bytes, len(weights), out_bytes, segments)
    elif segments is None and steps is None:
        source += c_run_function(order, b.buffers, b.copies)
    else:
        source += "".join(c_run_function([order[k] for k in seg["kernels"]], b.buffers, {}, seg["entry"])
                          for seg in segments or () if "entry" in seg)
    if segments is not None or steps is not None:
        manifest.update(entry=None, segments=segments or [], copies={str(i): key for i, key in b.copies.items()},
                        steps=region_steps(order, b.regions) if steps is None else steps)
    report.regions = len(b.regions)
    manifest["stats"] = report.stats()

    def write_regions(stage: Path) -> None:
        assert write_region is not None or not b.regions
        for name, sub in b.regions.items():
            write_region(sub, stage / f"{name}.onnx")

    clock = time.perf_counter()
    write_directory(out_dir, {target.source: source, "kernels.ir": "\n".join(loops)}, target.source, target.build,
                    weights, manifest, write_onnx, write_regions)
    report.seconds["gcc"] = time.perf_counter() - clock
