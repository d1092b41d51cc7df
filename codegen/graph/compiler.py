"""The graph compiler: a taso-py graph -> one compiled module per model, in a self-describing directory.

Passes, in order: fold batch norms into convolutions, fuse activations into them, fold
weight-only subgraphs (taso_py.graph); partition into fused groups (`partition`); choose each
group's layout (`layout`); lower each group to a kernel (`kernels`); emit every distinct kernel
once, pre-pack weights, plan the arena (`memory`) and write the directory (`module`).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taso_py.codegen.backends.c.emit import CEmitter
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.graph import fallback, layout
from taso_py.codegen.graph.fallback import Region, RegionWriter
from taso_py.codegen.graph.kernels import Buffer, ConfigFor, Kernel, KernelBuilder, prepack
from taso_py.codegen.graph.memory import plan_memory
from taso_py.codegen.graph.module import (
    c_run_function,
    cuda_backend,
    cuda_run_function,
    lifetimes,
    manifest_of,
    nbytes,
    region_steps,
    weight_blob,
    write_directory,
)
from taso_py.codegen.graph.partition import Group, partition

from taso_py.graph.fold import fold_constants
from taso_py.graph.ir import Graph
from taso_py.graph.normalize import batchnorm_to_affine, fold_batchnorm, fuse_activations

BLOCK = 16  # channels per block of the NCHW[x]c layout: one AVX-512 vector of floats


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


def compile_graph(graph: Graph, out_dir: Path, target: str = "cpu", config_for: ConfigFor | None = None,
                  write_onnx: Callable[[Path], None] | None = None, progress: Callable[[int, int], None] | None = None,
                  block: int = BLOCK, write_region: RegionWriter | None = None) -> CompileReport:
    """Compile `graph` into `out_dir` (created, or replaced if it holds an earlier compile);
    `block` 0 keeps every tensor in NCHW (no layout transforms). Nodes without a kernel run in
    ONNX Runtime (see graph.fallback), written as ONNX by `write_region`."""
    if target == "accel":
        from taso_py.codegen.graph.accel import compile_accel
        return compile_accel(graph, out_dir, write_onnx, progress, write_region=write_region)
    if target == "cuda":
        import taso_py.codegen.topi.cuda  # noqa: F401  (registers the GPU schedules)
        block = layout.PLAIN  # NCHW16c is a CPU layout
    elif target != "cpu":
        raise CodegenError(f"unknown target {target!r} (available: cpu, cuda, accel)")
    clock = time.perf_counter()
    g = prepare(graph)
    groups = partition(g)
    can_fall_back = target != "cuda" and write_region is not None
    forced: set[int] = set()  # nodes of groups whose kernel failed to build: ORT runs them
    failures: list[str] = []
    while True:
        report, b, failed = _build(g, groups, forced, can_fall_back, target, config_for, block, progress, clock,
                                   failures)
        if failed is None:
            break
        forced.update(n.id for n in failed.nodes)
    report.kernel_failures = failures
    publish_module(g, b, b.order, report, out_dir, write_onnx, write_region=write_region)
    return report


def _build(g: Graph, all_groups: list[Group], forced: set[int], can_fall_back: bool, target: str,
           config_for: ConfigFor | None, block: int, progress: Callable[[int, int], None] | None, clock: float,
           failures: list[str]) -> tuple[CompileReport, KernelBuilder, Group | None]:
    """Lower every group and region in run order; the group whose kernel failed to build is
    returned (to run in ORT on the next try) when regions are possible, else its error raised."""
    report = CompileReport()
    steps = fallback.plan(g, all_groups, forced) or [fallback.whole(g)]
    groups = [s for s in steps if isinstance(s, Group)]
    if len(groups) < len(steps) and not can_fall_back:
        node = next(n for s in steps if isinstance(s, Region) for n in s.nodes if fallback.unsupported(g, n))
        where = "on --target cuda" if target == "cuda" else "without a region writer"
        raise CodegenError(f"no kernel for {fallback.unsupported(g, node)} {g.name_of(node.outputs[0])!r}, and "
                           f"operators without kernels cannot run through ONNX Runtime {where}")
    plan = layout.choose(g, groups, block)
    layouts = dict(zip(map(id, groups), plan.layouts))
    report.groups, report.blocked_groups = len(groups), sum(1 for b in plan.layouts if b)
    report.fallback_nodes = sum(len(s.nodes) for s in steps if isinstance(s, Region))
    report.kernel_nodes = sum(len(grp.nodes) for grp in groups)
    report.seconds["passes"] = time.perf_counter() - clock

    clock = time.perf_counter()
    b = KernelBuilder(g, config_for, target, plan.segments)
    for k, step in enumerate(steps):
        if isinstance(step, Region):
            b.region(step)
            continue
        try:
            b.group(step, layouts[id(step)])
        except Exception as e:  # a kernel we cannot build: ORT runs the group, and the report says so
            if not can_fall_back:
                raise
            failures.append(f"{step.name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
            return report, b, step
        if progress:
            progress(k + 1, len(steps))
    b.finish()
    report.seconds["lower"] = time.perf_counter() - clock
    return report, b, None


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
    Regions (`b.regions`, run by ONNX Runtime) are written with `write_region`, and the C kernels
    between them become one run function per segment."""
    clock = time.perf_counter()
    cuda = b.target == "cuda"
    emitter: CEmitter = cuda_backend().CudaEmitter() if cuda else CEmitter()
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
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")  # free now: the check runs the module
    if plan.arena_bytes > memory:
        raise CodegenError(f"the model's intermediates need {plan.arena_bytes / 2**30:,.1f} GiB at once, more than "
                           f"this machine's {memory / 2**30:,.1f} GiB of free memory")
    for key, offset in plan.offsets.items():
        b.buffers[key].offset = offset
    report.arena_bytes, report.unshared_bytes = plan.arena_bytes, plan.unshared_bytes
    weights = weight_blob(b.values, b.buffers)
    report.weight_bytes = len(weights)

    source = emitter.module_source(sources)
    manifest = manifest_of(g, order, b.buffers, plan.arena_bytes, report.stats())
    if cuda:
        out_bytes = [nbytes(Buffer("", g.type(r).shape, g.type(r).dtype.value, "output")) for r in g.outputs]
        source += cuda_run_function(order, b.buffers, b.copies, plan.arena_bytes, len(weights), out_bytes)
        manifest.update(target="cuda")
    elif steps is None and not b.regions:
        source += c_run_function(order, b.buffers, b.copies)
    elif steps is None:
        segments: list[dict[str, Any]] = []
        for k, kernel in enumerate(order):
            if kernel.name in b.regions:
                segments.append({"step": k})
            elif not segments or "entry" not in segments[-1]:
                segments.append({"entry": f"taso_seg{len(segments)}", "kernels": [k]})
            else:
                segments[-1]["kernels"].append(k)
        for seg in segments:
            if "entry" in seg:
                source += c_run_function([order[k] for k in seg["kernels"]], b.buffers, {}, seg["entry"])
        manifest.update(entry=None, segments=segments, steps=region_steps(order, b.regions),
                        copies={str(i): key for i, key in b.copies.items()})
    else:
        manifest.update(target="accel", entry=None, steps=steps,
                        copies={str(i): key for i, key in b.copies.items()})
    report.regions = len(b.regions)
    manifest["stats"] = report.stats()

    def write_regions(stage: Path) -> None:
        assert write_region is not None or not b.regions
        for name, sub in b.regions.items():
            write_region(sub, stage / f"{name}.onnx")

    clock = time.perf_counter()
    write_directory(out_dir, {"model.cu" if cuda else "model.c": source, "kernels.ir": "\n".join(loops)}, weights,
                    manifest, write_onnx, write_regions)
    report.seconds["gcc"] = time.perf_counter() - clock
