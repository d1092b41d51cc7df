"""The graph compiler: a taso-py graph -> one compiled module per model, in a self-describing directory.

Passes, in order: fold batch norms into convolutions, fuse activations into them, fold
weight-only subgraphs (taso_py.graph); partition into fused groups (`partition`); choose each
group's layout (`layout`); lower each group to a kernel (`kernels`); emit every distinct kernel
once, pre-pack weights, plan the arena (`memory`) and write the directory (`module`); the first
and last of these are `stages`, which the accelerator's compile (`accel`) shares.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from taso_py.codegen.errors import CodegenError
from taso_py.codegen.graph import fallback, layout
from taso_py.codegen.graph.accel import compile_accel
from taso_py.codegen.graph.fallback import Region, RegionWriter
from taso_py.codegen.graph.kernels import ConfigFor, KernelBuilder
from taso_py.codegen.graph.partition import Group, partition
from taso_py.codegen.graph.stages import CompileReport, prepare, publish_module
from taso_py.codegen.target import CPU, Target
from taso_py.graph.ir import Graph

BLOCK = 16  # channels per block of the NCHW[x]c layout: one AVX-512 vector of floats


def compile_graph(graph: Graph, out_dir: Path, target: Target = CPU, config_for: ConfigFor | None = None,
                  write_onnx: Callable[[Path], None] | None = None, progress: Callable[[int, int], None] | None = None,
                  block: int = BLOCK, write_region: RegionWriter | None = None) -> CompileReport:
    """Compile `graph` into `out_dir` (created, or replaced if it holds an earlier compile);
    `block` 0 keeps every tensor in NCHW (no layout transforms). Nodes without a kernel run in
    ONNX Runtime (see graph.fallback), written as ONNX by `write_region`, where the target allows it.
    A target that offloads layers to the accelerator compiles through `accel.compile_accel`."""
    if target.offload is not None:
        return compile_accel(graph, out_dir, target, write_onnx, progress, write_region=write_region)
    if not target.blocked_layouts:
        block = layout.PLAIN
    clock = time.perf_counter()
    g = prepare(graph)
    groups = partition(g)
    can_fall_back = target.regions and write_region is not None
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


def _build(g: Graph, all_groups: list[Group], forced: set[int], can_fall_back: bool, target: Target,
           config_for: ConfigFor | None, block: int, progress: Callable[[int, int], None] | None, clock: float,
           failures: list[str]) -> tuple[CompileReport, KernelBuilder, Group | None]:
    """Lower every group and region in run order; the group whose kernel failed to build is
    returned (to run in ORT on the next try) when regions are possible, else its error raised."""
    report = CompileReport()
    steps = fallback.plan(g, all_groups, target, forced)
    if steps is None:  # regions that cannot be cut cleanly; no steps at all (outputs are inputs) is fine
        steps = [fallback.whole(g)]
    groups = [s for s in steps if isinstance(s, Group)]
    if len(groups) < len(steps) and not can_fall_back:
        node = next(n for s in steps if isinstance(s, Region) for n in s.nodes if fallback.unsupported(g, n, target))
        where = "without a region writer" if target.regions else f"on --target {target.name}"
        raise CodegenError(f"no kernel for {fallback.unsupported(g, node, target)} {g.name_of(node.outputs[0])!r}, and "
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


