"""The graph compiler: a taso-py graph -> one compiled module per model, in a self-describing directory.

Passes, in order: fold batch norms into convolutions, fuse activations into them, fold
weight-only subgraphs (taso_py.graph); partition into fused groups (`partition`); per
group, the operator library's compute definitions and the group's schedule, lowered to one
kernel (identical kernels are emitted once); a static memory plan for the intermediates
(`memory`); one C file whose `taso_model_run` calls the kernels in order, compiled by gcc.

The directory holds `model.so`, its source `model.c`, `weights.bin`, `manifest.json`
(kernels, buffers, inputs and outputs) and `model.onnx` (the compiled graph, only for
`taso run --check` to compare against ONNX Runtime).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from codegen import topi
from codegen.backends.c.build import compile_shared
from codegen.backends.c.emit import CEmitter
from codegen.errors import CodegenError
from codegen.graph.memory import Lifetime, plan_memory
from codegen.graph.partition import Group, partition
from codegen.lower.ir import PrimFunc
from codegen.lower.lower import lower
from codegen.te.tensor import Tensor, compute, placeholder
from codegen.tune.space import Config
from taso_py.graph.fold import fold_constants
from taso_py.graph.ir import Graph, Ref
from taso_py.graph.normalize import fold_batchnorm, fuse_activations

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1
# A group's schedule as a tuning template: knobs -> (schedule, kernel arguments)
Template = Callable[[Config], tuple[Any, list[Tensor]]]
ConfigFor = Callable[[str, Template], Config]  # (workload key, template) -> knobs; default: untuned


@dataclass
class Kernel:
    name: str  # the C function
    group: str  # what it computes, e.g. conv2d_add_relu
    args: list[str]  # buffer keys, inputs then outputs
    workload: str


@dataclass
class Buffer:
    key: str
    shape: tuple[int, ...]
    dtype: str
    kind: str  # input | output | weight | arena
    offset: int = 0  # in weights.bin or the arena
    index: int = 0  # position among the inputs or outputs


@dataclass
class CompileReport:
    groups: int = 0
    kernels: int = 0
    unique_kernels: int = 0
    arena_bytes: int = 0
    unshared_bytes: int = 0
    weight_bytes: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


def compile_graph(graph: Graph, out_dir: Path, target: str = "cpu", config_for: ConfigFor | None = None,
                  write_onnx: Callable[[Path], None] | None = None, progress: Callable[[int, int], None] | None = None
                  ) -> CompileReport:
    """Compile `graph` into `out_dir` (created, or replaced if it holds an earlier compile)."""
    if target != "cpu":
        raise CodegenError(f"target {target!r} is not built yet (available: cpu)")
    report = CompileReport()
    clock = time.perf_counter()
    g = graph.copy()
    fold_batchnorm(g)
    fuse_activations(g)
    fold_constants(g)
    g.remove_unused()
    groups = partition(g)
    report.groups = len(groups)
    report.seconds["passes"] = time.perf_counter() - clock

    clock = time.perf_counter()
    buffers = _buffers(g, groups)
    emitter = CEmitter()
    kernels: list[Kernel] = []
    lowered: list[LoweredGroup] = []
    bodies: dict[str, str] = {}  # C body without its name -> function name
    sources: list[str] = []
    for k, group in enumerate(groups):
        lg = _lower_group(g, group, f"k{k}", config_for)
        lowered.append(lg)
        text = emitter.function(lg.func)
        key = hashlib.sha1(text.replace(f"void {lg.func.name}(", "void (", 1).encode()).hexdigest()
        if key not in bodies:
            bodies[key] = lg.func.name
            sources.append(text)
        kernels.append(Kernel(bodies[key], group.name, lg.arg_keys, lg.workload))
        if progress:
            progress(k + 1, len(groups))
    report.kernels, report.unique_kernels = len(kernels), len(bodies)
    report.seconds["lower"] = time.perf_counter() - clock

    clock = time.perf_counter()
    values = {_key(g, n.outputs[0]): g.weight(n.outputs[0]) for n in g.nodes.values() if n.op.name == "weight"}
    for key, value in _prepack(lowered, values).items():
        values[key] = value
        buffers[key] = Buffer(key, value.shape, value.dtype.name, "weight")
    read = {key for k in kernels for key in k.args}
    for key in [k for k, b in buffers.items() if b.kind == "weight" and k not in read]:
        del buffers[key]
    report.seconds["prepack"] = time.perf_counter() - clock
    plan = plan_memory(_lifetimes(g, groups, buffers))
    for key, offset in plan.offsets.items():
        buffers[key].offset = offset
    report.arena_bytes, report.unshared_bytes = plan.arena_bytes, plan.unshared_bytes
    weights = _weight_blob(values, buffers)
    report.weight_bytes = len(weights)

    source = emitter.module_source(sources) + _run_function(g, kernels, buffers)
    clock = time.perf_counter()
    _publish(out_dir, source, weights, _manifest(g, kernels, buffers, plan.arena_bytes, report), write_onnx)
    report.seconds["gcc"] = time.perf_counter() - clock
    return report


# ---- buffers -----------------------------------------------------------------------------

def _key(g: Graph, ref: Ref) -> str:
    return g.name_of(ref)


def _buffers(g: Graph, groups: list[Group]) -> dict[str, Buffer]:
    out: dict[str, Buffer] = {}

    def add(ref: Ref, kind: str, index: int = 0) -> None:
        key = _key(g, ref)
        if key not in out:
            t = g.type(ref)
            out[key] = Buffer(key, tuple(t.shape), t.dtype.value, kind, index=index)

    for i, node in enumerate(g.inputs):
        add(node.outputs[0], "input", i)
    for i, ref in enumerate(g.outputs):
        if _key(g, ref) not in out:
            add(ref, "output", i)
    for group in groups:
        for ref in group.inputs:
            add(ref, "weight" if g.weight(ref) is not None else "arena")
        for ref in group.outputs:
            add(ref, "arena")
    return out


def _lifetimes(g: Graph, groups: list[Group], buffers: dict[str, Buffer]) -> list[Lifetime]:
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for k, group in enumerate(groups):
        for ref in group.outputs:
            first.setdefault(_key(g, ref), k)
        for ref in group.inputs:
            last[_key(g, ref)] = k
    nbytes = {b.key: int(np.prod(b.shape, dtype=np.int64)) * np.dtype(b.dtype).itemsize for b in buffers.values()}
    return [Lifetime(key, nbytes[key], first[key], last.get(key, first[key]))
            for key, b in buffers.items() if b.kind == "arena"]


def _weight_blob(values: dict[str, np.ndarray], buffers: dict[str, Buffer]) -> bytes:
    """The weights kernels read, each 64-byte aligned; their offsets go to their buffers."""
    blob = bytearray()
    for key, b in buffers.items():
        if b.kind != "weight":
            continue
        blob += b"\0" * (-len(blob) % 64)
        b.offset = len(blob)
        blob += np.ascontiguousarray(values[key], dtype=b.dtype).tobytes()
    return bytes(blob)


# ---- kernels ------------------------------------------------------------------------------

@dataclass
class Hoisted:
    """A weight-only root stage of a kernel's schedule (packing a weight, say): the kernel reads
    `stand_in` instead, and `tensor` is computed once at compile time from the weights."""

    key: str  # buffer key of the computed value
    tensor: Tensor
    stand_in: Tensor


@dataclass
class LoweredGroup:
    func: PrimFunc
    workload: str
    arg_keys: list[str]  # buffer key per kernel parameter
    hoisted: list[Hoisted]
    weight_args: dict[str, Tensor]  # buffer key -> placeholder, of the weights the group reads


def _lower_group(g: Graph, group: Group, name: str, config_for: ConfigFor | None) -> LoweredGroup:
    tensors: dict[Ref, Tensor] = {}
    args: list[Tensor] = []
    for k, ref in enumerate(group.inputs):
        t = g.type(ref)
        tensors[ref] = placeholder(t.shape, t.dtype.value, f"in{k}")  # positional: equal kernels emit equal C
        args.append(tensors[ref])
    for node in group.nodes:
        outs = topi.compute(node.op.name, [tensors[r] for r in node.inputs], node.attrs, node.types)
        for ref, t in zip(node.outputs, outs):
            tensors[ref] = t
    outputs: list[Tensor] = []
    for ref in group.outputs:
        t = tensors[ref]
        if t.op in {o.op for o in outputs} or t.op in {a.op for a in args}:  # an alias: copy it out
            t = compute(t.shape, lambda *i, src=t: src[i], name=f"copy_{g.name_of(ref)}", tag="injective")
        outputs.append(t)
    workload = _workload(g, group)

    def template(cfg: Config) -> tuple[Any, list[Tensor]]:
        return topi.schedule_group(outputs, cfg), args + outputs

    keys = [_key(g, r) for r in group.inputs]
    weight_args = {k: a for k, a, r in zip(keys, args, group.inputs) if g.weight(r) is not None}
    try:
        cfg = config_for(workload, template) if config_for else Config()
        sched, _ = template(cfg)
        hoisted = _hoist_weight_stages(sched, {a.op for a in weight_args.values()}, name)
        read = {t.op for st in sched.stages for t in st.reads()}
        sched.placeholders = [p for p in sched.placeholders if p.op in read]
        kept = [(k, a) for k, a in zip(keys, args) if a.op in read]  # a packed weight replaces its original
        params = [a for _, a in kept] + [h.stand_in for h in hoisted] + outputs
        func = lower(sched, params, name)
    except CodegenError as e:
        raise CodegenError(f"kernel {name} ({group.name}): {e}") from None
    arg_keys = [k for k, _ in kept] + [h.key for h in hoisted] + [_key(g, r) for r in group.outputs]
    return LoweredGroup(func, workload, arg_keys, hoisted, weight_args)


def _hoist_weight_stages(sched: Any, weights: set[Any], kernel: str) -> list[Hoisted]:
    """Take out of the schedule each root stage that reads only weights (directly or through such
    stages): the kernel gets its value as an argument, so weights are pre-packed once."""
    from codegen.schedule.schedule import replace_reads
    out: list[Hoisted] = []
    constant = set(weights)
    for st in list(sched.stages):
        reads = st.reads()
        if st.is_output or st.attach != "root" or not reads or not all(t.op in constant for t in reads):
            continue
        constant.add(st.op)
        stand_in = placeholder(st.op.shape, st.op.dtype, f"pre{len(out)}")
        out.append(Hoisted(f"{kernel}.{st.name}", st.tensor, stand_in))
    for h in out:
        sched.stages.remove(sched.stage_map.pop(h.tensor.op))
        sched.placeholders.append(h.stand_in)
        for reader in sched.stages:
            reader.body = replace_reads(reader.body, h.tensor, h.stand_in)
    return out


def _prepack(groups: list[LoweredGroup], weight_values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Compute every hoisted stage on the weights with one compiled module (plain loops suffice)."""
    from codegen.backends.c.build import build
    from codegen.schedule.schedule import create_schedule
    jobs = []
    for k, lg in enumerate(groups):
        if not lg.hoisted:
            continue
        outs = [h.tensor for h in lg.hoisted]
        sched = create_schedule(outs)
        ins = [(key, t) for key, t in lg.weight_args.items() if t.op in {p.op for p in sched.placeholders}]
        jobs.append((lower(sched, [t for _, t in ins] + outs, f"prepack{k}"), ins, lg.hoisted))
    if not jobs:
        return {}
    module = build([f for f, _, _ in jobs])
    values: dict[str, np.ndarray] = {}
    for func, ins, hoisted in jobs:
        results = [np.empty(h.tensor.shape, h.tensor.dtype) for h in hoisted]
        module[func.name](*[np.ascontiguousarray(weight_values[key]) for key, _ in ins], *results)
        values.update({h.key: r for h, r in zip(hoisted, results)})
    return values


def _workload(g: Graph, group: Group) -> str:
    """What tuning records are keyed by: the group's operators, attributes and shapes."""
    parts = [f"{n.op.name}{n.attrs!r}" for n in group.nodes]
    shapes = [str(g.type(r).shape) for r in group.inputs]
    return hashlib.sha1(("|".join(parts) + "|" + ",".join(shapes)).encode()).hexdigest()[:16] + ":" + group.name


def _run_function(g: Graph, kernels: list[Kernel], buffers: dict[str, Buffer]) -> str:
    def ptr(key: str) -> str:
        b = buffers[key]
        ctype = {"float32": "float", "int64": "int64_t", "int32": "int32_t", "bool": "bool"}.get(b.dtype, "float")
        base = {"input": f"inputs[{b.index}]", "output": f"outputs[{b.index}]",
                "weight": f"(weights + {b.offset})", "arena": f"(arena + {b.offset})"}[b.kind]
        return f"({ctype}*)({base})"

    lines = ["", "void taso_model_run(void** inputs, void** outputs, char* weights, char* arena) {"]
    for k in kernels:
        lines.append(f"  {k.name}({', '.join(ptr(a) for a in k.args)});")
    for i, ref in enumerate(g.outputs):  # outputs that no kernel writes: an input, a weight, a repeat
        b = buffers[_key(g, ref)]
        if b.kind != "output" or b.index != i:
            nbytes = int(np.prod(b.shape, dtype=np.int64)) * np.dtype(b.dtype).itemsize
            lines.append(f"  memcpy(outputs[{i}], {ptr(b.key)}, {nbytes});")
    lines.append("}")
    return "\n".join(lines) + "\n"


# ---- the directory --------------------------------------------------------------------------

def _manifest(g: Graph, kernels: list[Kernel], buffers: dict[str, Buffer], arena: int,
              report: CompileReport) -> dict[str, Any]:
    def tensor(ref: Ref) -> dict[str, Any]:
        t = g.type(ref)
        return {"name": g.name_of(ref), "shape": list(t.shape), "dtype": t.dtype.value}

    return {
        "format": "taso-py compiled model", "version": MANIFEST_VERSION, "target": "cpu",
        "entry": "taso_model_run", "library": "model.so", "weights": "weights.bin", "arena_bytes": arena,
        "inputs": [tensor(n.outputs[0]) for n in g.inputs],
        "outputs": [dict(tensor(r), name=name) for r, name in zip(g.outputs, g.output_names)],
        "kernels": [{"name": k.name, "group": k.group, "args": k.args, "workload": k.workload} for k in kernels],
        "buffers": [{"key": b.key, "shape": list(b.shape), "dtype": b.dtype, "kind": b.kind, "offset": b.offset}
                    for b in buffers.values()],
        "stats": {"groups": report.groups, "kernels": report.kernels, "unique_kernels": report.unique_kernels,
                  "arena_bytes": report.arena_bytes, "unshared_bytes": report.unshared_bytes},
    }


def _publish(out_dir: Path, source: str, weights: bytes, manifest: dict[str, Any],
             write_onnx: Callable[[Path], None] | None) -> None:
    """Build everything in a staging directory beside `out_dir`, then swap it in."""
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir())
                                                      and not (out_dir / "manifest.json").exists())):
        raise CodegenError(f"{out_dir} exists and is not a taso-py compiled model; choose another -o")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        (stage / "model.c").write_text(source)
        compile_shared(source, stage / "model.so")
        (stage / "weights.bin").write_bytes(weights)
        if write_onnx is not None:
            write_onnx(stage / "model.onnx")
        (stage / "manifest.json").write_text(json.dumps(manifest, indent=1))
        if out_dir.exists():
            old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
            os.replace(out_dir, old)
            os.replace(stage, out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(stage, out_dir)
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)
