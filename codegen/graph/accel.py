"""`--target accel`: convolutions and matmuls on the simulated GEMM accelerator, the rest on the host.

Quantization (the scheme is `codegen.backends.accel.quant`'s): each offloaded layer's weights
are int8 per output channel and its bias int32, quantized at compile time; its input is
quantized to int8 per tensor at run time with a scale calibrated at compile time (max |x| / 127
on seeded random inputs run through the float graph); the accelerator accumulates in int32,
adds the bias and applies ReLU on its ALU; the host dequantizes the int32 result (scale
s_x * s_w[c]) for the operators that follow. Every other operator (pooling, element-wise
ops, softmax, ...) runs on the host as compiled C, in float. The error against float inference
is the int8 rounding of each offloaded layer's input and weights (half a step of each scale),
propagated through the model; `taso run --check` on such a directory compares with that
tolerance (the target's `rtol`).

What is offloaded is the target's `offload` predicate (`codegen.backends.accel.offload`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from taso_py.codegen.backends.accel.quant import quantize_bias, quantize_weights
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.graph import fallback, layout
from taso_py.codegen.graph.fallback import Region, RegionWriter
from taso_py.codegen.graph.kernels import Buffer, Kernel, KernelBuilder
from taso_py.codegen.graph.module import ort_step
from taso_py.codegen.graph.partition import Group, make_group, partition
from taso_py.codegen.graph.stages import CompileReport, prepare, publish_module
from taso_py.codegen.target import Target
from taso_py.graph.evaluate import evaluate
from taso_py.graph.ir import Graph, Node
from taso_py.runtime import random_feeds


def _split_groups(g: Graph, groups: list[Group | Region],
                  offloadable: Callable[[Graph, Node], bool]) -> list[tuple[str, Any]]:
    """Steps in run order: ("offload", node) for an offloaded anchor, ("ort", region) for a region
    without kernels (see graph.fallback), ("host", group) for the rest."""
    users = g.users()
    plan: list[tuple[str, Any]] = []
    for group in groups:
        if isinstance(group, Region):
            plan.append(("ort", group))
            continue
        anchor = group.anchor
        if anchor is None or not offloadable(g, anchor):
            plan.append(("host", group))
            continue
        before = group.nodes[:group.nodes.index(anchor)]
        after = group.nodes[group.nodes.index(anchor) + 1:]
        if before:
            plan.append(("host", make_group(g, before, users)))
        plan.append(("offload", anchor))
        if after:
            plan.append(("host", make_group(g, after, users)))
    return plan


def _calibrate(g: Graph, nodes: list[Node], seed: int) -> dict[int, float]:
    """Per offloaded node: the int8 scale of its input, from the float graph on random inputs."""
    probe = g.copy()
    refs = [n.inputs[0] for n in nodes]
    names = [f"calib_{k}" for k in range(len(refs))]
    probe.set_outputs(refs, names)
    values = evaluate(probe, random_feeds(g, seed))
    return {n.id: float(np.max(np.abs(values[name]))) / 127 or 1.0 for n, name in zip(nodes, names)}


def compile_accel(graph: Graph, out_dir: Path, target: Target, write_onnx: Callable[[Path], None] | None = None,
                  progress: Callable[[int, int], None] | None = None, seed: int = 0,
                  write_region: RegionWriter | None = None) -> CompileReport:
    """Compile `graph` for `target`, whose `offload` picks the layers the accelerator runs."""
    assert target.offload is not None
    report = CompileReport()
    clock = time.perf_counter()
    g = prepare(graph)
    plan = _split_groups(g, fallback.plan(g, partition(g), target) or [fallback.whole(g)], target.offload)
    if write_region is None and any(kind == "ort" for kind, _ in plan):
        raise CodegenError("operators without kernels run through ONNX Runtime, which needs a region writer")
    offloaded = [n for kind, n in plan if kind == "offload"]
    scales = _calibrate(g, offloaded, seed) if offloaded else {}
    report.groups, report.accel_layers = len(plan), len(offloaded)
    report.seconds["passes"] = time.perf_counter() - clock

    clock = time.perf_counter()
    b = KernelBuilder(g, None, target)
    order: list[Kernel] = []
    steps: list[dict[str, Any]] = []
    for k, (kind, item) in enumerate(plan):
        if kind == "ort":
            b.region(item)
            order.append(b.order[-1])
            steps.append(ort_step(len(order) - 1, b.order[-1]))
        elif kind == "host":
            first = len(b.steps)
            b.group(item, layout.PLAIN)
            for lw in b.steps[first:]:  # a group, after any layout transform it needed
                order.append(lw.kernel)
                steps.append({"kind": "host", "kernel": len(order) - 1})
        else:
            kernel, step = _accel_step(g, b, item, scales[item.id], f"accel{len(steps)}")
            order.append(kernel)
            steps.append({**step, "kernel": len(order) - 1})
        if progress:
            progress(k + 1, len(plan))
    first = len(b.steps)
    b.finish()
    for lw in b.steps[first:]:  # graph outputs back to NCHW (none while every tensor is NCHW)
        order.append(lw.kernel)
        steps.append({"kind": "host", "kernel": len(order) - 1})
    report.kernel_nodes = sum(len(item.nodes) if kind == "host" else 1 for kind, item in plan if kind != "ort")
    report.fallback_nodes = sum(len(item.nodes) for kind, item in plan if kind == "ort")
    report.seconds["lower"] = time.perf_counter() - clock
    publish_module(g, b, order, report, out_dir, write_onnx, steps, write_region)
    return report


def _accel_step(g: Graph, b: KernelBuilder, node: Node, s_x: float, name: str) -> tuple[Kernel, dict[str, Any]]:
    """An offloaded layer: its quantized weights (and bias) stored as weights, and the step the runtime runs."""
    w = g.weight(node.inputs[1])
    if node.op.name == "matmul":
        w_q, s_w = quantize_weights(np.ascontiguousarray(w.T))  # per output column
        w_q = np.ascontiguousarray(w_q.T)
    else:
        w_q, s_w = quantize_weights(w)
    consts = {"weights": w_q, "scales": s_w.astype(np.float32)}
    if len(node.inputs) > 2:
        consts["bias"] = quantize_bias(g.weight(node.inputs[2]), s_x, s_w)
    keys = {}
    for what, value in consts.items():
        keys[what] = key = f"{name}.{what}"
        b.values[key] = value
        b.buffers[key] = Buffer(key, value.shape, value.dtype.name, "weight")
    data = b.data(node.inputs[0], layout.PLAIN)
    out = b.key(node.outputs[0], layout.PLAIN)
    b.produced[node.outputs[0]] = layout.PLAIN
    conv = node.op.name == "conv2d"
    step = {"kind": "accel", "op": node.op.name, "input_scale": s_x, "relu": conv and node.attrs.act == "relu",
            "stride": node.attrs.stride[0] if conv else 1, "pad": node.attrs.pad[0] if conv else 0,
            "out_shape": list(g.type(node.outputs[0]).shape), **keys}
    return Kernel(name, f"accel_{node.op.name}", [data, *keys.values()], [out], ""), step
