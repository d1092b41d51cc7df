"""The graph compiler: a taso-py graph -> one compiled module per model, in a self-describing directory.

Passes, in order: fold batch norms into convolutions, fuse activations into them, fold
weight-only subgraphs (taso_py.graph); partition into fused groups (`partition`); per
group, the operator library's compute definitions and the group's schedule, lowered to one
kernel (identical kernels are emitted once); a static memory plan for the intermediates
(`memory`); one C file whose `taso_model_run` calls the kernels in order, compiled by gcc.

The directory holds `model.so`, its source `model.c`, the lowered loops of each kernel
(`kernels.ir`), `weights.bin`, `manifest.json`
(kernels, buffers, inputs and outputs) and `model.onnx` (the compiled graph, only for
`taso run --check` to compare against ONNX Runtime).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
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
from codegen.graph import layout
from codegen.graph.memory import Lifetime, plan_memory
from codegen.graph.partition import Group, partition
from codegen.lower.ir import PrimFunc
from codegen.lower.lower import lower
from codegen.te.tensor import Tensor, compute, placeholder
from codegen.topi import conv
from codegen.tune.space import Config
from taso_py.graph.fold import fold_constants
from taso_py.graph.ir import Graph, Ref
from taso_py.graph.normalize import fold_batchnorm, fuse_activations
from taso_py.types import TensorType

log = logging.getLogger(__name__)

MANIFEST_VERSION = 1
BLOCK = 16  # channels per block of the NCHW[x]c layout: one AVX-512 vector of floats
# A group's schedule as a tuning template: knobs -> (schedule, kernel arguments)
Template = Callable[[Config], tuple[Any, list[Tensor]]]
ConfigFor = Callable[[str, Template], Config]  # (workload key, template) -> knobs; default: untuned


@dataclass
class Kernel:
    name: str  # the C function
    group: str  # what it computes, e.g. conv2d_add_relu, or a layout transform
    reads: list[str]  # buffer keys
    writes: list[str]
    workload: str

    @property
    def args(self) -> list[str]:
        return self.reads + self.writes


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
    layout_transforms: int = 0
    blocked_groups: int = 0
    accel_layers: int = 0  # layers on the simulated accelerator (--target accel)
    arena_bytes: int = 0
    unshared_bytes: int = 0
    weight_bytes: int = 0
    seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class Hoisted:
    """A weight-only computation (packing a weight, say): the kernel reads `stand_in`, and
    `tensor` is computed once at compile time from the weight placeholders it reads."""

    key: str  # buffer key of the computed value
    tensor: Tensor
    stand_in: Tensor


@dataclass
class Lowered:
    func: PrimFunc
    kernel: Kernel
    hoisted: list[Hoisted]
    weight_args: dict[str, Tensor]  # buffer key -> placeholder, of the weights `hoisted` read


def compile_graph(graph: Graph, out_dir: Path, target: str = "cpu", config_for: ConfigFor | None = None,
                  write_onnx: Callable[[Path], None] | None = None, progress: Callable[[int, int], None] | None = None,
                  block: int = BLOCK) -> CompileReport:
    """Compile `graph` into `out_dir` (created, or replaced if it holds an earlier compile);
    `block` 0 keeps every tensor in NCHW (no layout transforms)."""
    if target == "accel":
        from codegen.graph.accel import compile_accel
        return compile_accel(graph, out_dir, write_onnx, progress)
    if target == "cuda":
        import codegen.topi.cuda  # noqa: F401  (registers the GPU schedules)
        block = layout.PLAIN  # NCHW16c is a CPU layout
    elif target != "cpu":
        raise CodegenError(f"unknown target {target!r} (available: cpu, cuda, accel)")
    report = CompileReport()
    clock = time.perf_counter()
    g = prepare(graph)
    groups = partition(g)
    layouts = layout.choose(g, groups, block)
    report.groups, report.blocked_groups = len(groups), sum(1 for b in layouts if b)
    report.seconds["passes"] = time.perf_counter() - clock

    clock = time.perf_counter()
    b = _Builder(g, config_for, target)
    for k, (group, lay) in enumerate(zip(groups, layouts)):
        b.group(group, lay)
        if progress:
            progress(k + 1, len(groups))
    b.finish()
    report.seconds["lower"] = time.perf_counter() - clock
    publish_module(g, b, [lw.kernel for lw in b.steps], report, out_dir, write_onnx)
    return report


def prepare(graph: Graph) -> Graph:
    """A copy with batch norms folded into convolutions, activations fused, weight-only subgraphs folded."""
    g = graph.copy()
    fold_batchnorm(g)
    fuse_activations(g)
    fold_constants(g)
    g.remove_unused()
    return g


def publish_module(g: Graph, b: _Builder, order: list[Kernel], report: CompileReport, out_dir: Path,
                   write_onnx: Callable[[Path], None] | None, steps: list[dict[str, Any]] | None = None) -> None:
    """Emit the kernels (each distinct one once), pre-pack weights, plan the arena and write the
    directory. `order` is every step of a run; with `steps` (steps the host does not run as one C
    call, the accelerator's layers) the manifest lists them and the module has no run function."""
    clock = time.perf_counter()
    cuda = b.target == "cuda"
    emitter: CEmitter = _cuda().CudaEmitter() if cuda else CEmitter()
    bodies: dict[str, str] = {}  # C body without its name -> function name
    sources: list[str] = []
    loops: list[str] = []  # the lowered loop IR of each distinct kernel, for people to read
    for lw in b.steps:
        text = emitter.function(lw.func)
        key = hashlib.sha1(re.sub(rf"\b{lw.func.name}\b", "NAME", text).encode()).hexdigest()
        if key not in bodies:
            bodies[key] = lw.func.name
            sources.append(text)
            loops.append(f"# {lw.kernel.group}\n{lw.func}\n")
        lw.kernel.name = bodies[key]
    report.kernels, report.unique_kernels = len(b.steps), len(bodies)
    report.layout_transforms = sum(1 for k in order if k.group.startswith("layout_"))
    report.seconds["emit"] = time.perf_counter() - clock

    clock = time.perf_counter()
    for key, value in _prepack(b.steps, b.values).items():
        b.values[key] = value
        b.buffers[key] = Buffer(key, value.shape, value.dtype.name, "weight")
    read = {key for k in order for key in k.reads} | set(b.copies.values())
    for key in [k for k, buf in b.buffers.items() if buf.kind == "weight" and k not in read]:
        del b.buffers[key]
    report.seconds["prepack"] = time.perf_counter() - clock
    plan = plan_memory(_lifetimes(order, b.buffers))
    for key, offset in plan.offsets.items():
        b.buffers[key].offset = offset
    report.arena_bytes, report.unshared_bytes = plan.arena_bytes, plan.unshared_bytes
    weights = _weight_blob(b.values, b.buffers)
    report.weight_bytes = len(weights)

    source = emitter.module_source(sources)
    manifest = _manifest(g, order, b.buffers, plan.arena_bytes, report)
    if cuda:
        out_bytes = [_nbytes(Buffer("", g.type(r).shape, g.type(r).dtype.value, "output")) for r in g.outputs]
        source += _cuda_run_function(order, b.buffers, b.copies, plan.arena_bytes, len(weights), out_bytes)
        manifest.update(target="cuda")
    elif steps is None:
        source += _run_function(order, b.buffers, b.copies)
    else:
        manifest.update(target="accel", entry=None, steps=steps,
                        copies={str(i): key for i, key in b.copies.items()})
    clock = time.perf_counter()
    _publish(out_dir, {"model.cu" if cuda else "model.c": source, "kernels.ir": "\n".join(loops)}, weights,
             manifest, write_onnx)
    report.seconds["gcc"] = time.perf_counter() - clock


class _Builder:
    """Lowers groups in order, tracking the layout each tensor was produced in and the buffers."""

    def __init__(self, g: Graph, config_for: ConfigFor | None, target: str = "cpu") -> None:
        self.g = g
        self.config_for = config_for
        self.target = target
        self.buffers: dict[str, Buffer] = {}
        self.values: dict[str, np.ndarray] = {}
        self.produced: dict[Ref, int] = {n.outputs[0]: layout.PLAIN for n in g.inputs}
        self.steps: list[Lowered] = []
        self.copies: dict[int, str] = {}  # graph output index -> buffer key no kernel writes there
        self.outputs = {r: i for i, r in reversed(list(enumerate(g.outputs)))}

    # ---- buffers ---------------------------------------------------------------------------

    def key(self, ref: Ref, lay: int) -> str:
        """The buffer holding `ref` in layout `lay` (registered on first use)."""
        g = self.g
        name = g.name_of(ref)
        key = name if lay == layout.PLAIN else f"{name}@nchw{lay}c"
        if key not in self.buffers:
            t = g.type(ref)
            shape = tuple(t.shape) if lay == layout.PLAIN else layout.blocked_shape(t.shape, lay)
            kind, index = "arena", 0
            if lay == layout.PLAIN and ref.node in g.input_ids:
                kind, index = "input", g.input_ids.index(ref.node)
            elif lay == layout.PLAIN and ref in self.outputs:
                kind, index = "output", self.outputs[ref]
            elif g.weight(ref) is not None:
                kind = "weight"
                value = g.weight(ref)
                self.values[key] = value if lay == layout.PLAIN else layout.block_array(value, lay)
            self.buffers[key] = Buffer(key, shape, t.dtype.value, kind, index=index)
        return key

    def data(self, ref: Ref, lay: int) -> str:
        """`ref` in layout `lay`, inserting a layout transform kernel where it was produced in another."""
        have = self.produced[ref]
        key = self.key(ref, lay)
        if have != lay and not any(key in s.kernel.writes for s in self.steps):
            self.transform(ref, have, lay)
        return key

    # ---- kernels ---------------------------------------------------------------------------

    def transform(self, ref: Ref, src: int, dst: int) -> None:
        t = self.g.type(ref)
        shape = tuple(t.shape) if src == layout.PLAIN else layout.blocked_shape(t.shape, src)
        x = placeholder(shape, t.dtype.value, "in0")
        y = conv.pack_data(x, dst) if dst != layout.PLAIN else conv.unpack_data(x, t.shape[1])
        name = f"layout_nchw{dst}c" if dst != layout.PLAIN else "layout_nchw"
        kernel = Kernel("", name, [self.key(ref, src)], [self.key(ref, dst)], f"{name}{shape}")
        self.steps.append(self._lower(kernel, [x], [y], {}, []))

    def group(self, group: Group, lay: int) -> None:
        g = self.g
        tensors: dict[tuple[Ref, int], Tensor] = {}  # (ref, layout) -> te tensor
        args: list[Tensor] = []
        reads: list[str] = []
        hoisted: list[Hoisted] = []
        weight_args: dict[str, Tensor] = {}
        name = f"k{len(self.steps)}"

        def arg(ref: Ref, form: int) -> Tensor:
            if (ref, form) not in tensors:
                key = self.key(ref, form) if g.weight(ref) is not None else self.data(ref, form)
                buf = self.buffers[key]
                tensors[(ref, form)] = placeholder(buf.shape, buf.dtype, f"in{len(args)}")  # positional names
                args.append(tensors[(ref, form)])
                reads.append(key)
            return tensors[(ref, form)]

        def packed_weight(ref: Ref, groups: int) -> Tensor:
            w = placeholder(g.type(ref).shape, g.type(ref).dtype.value, "w")
            key = self.key(ref, layout.PLAIN)
            weight_args[key] = w
            packed = conv.pack_weight(w, lay, lay, groups)
            stand_in = placeholder(packed.shape, packed.dtype, f"pre{len(hoisted)}")
            hoisted.append(Hoisted(f"{name}.{key}.packed", packed, stand_in))
            return stand_in

        computed: dict[Ref, Tensor] = {}
        for node in group.nodes:
            def operand(ref: Ref, form: int) -> Tensor:
                return computed[ref] if ref in computed else arg(ref, form)
            empty = next((t for t in node.types if t.shape is not None and 0 in t.shape), None)
            if empty is not None:
                raise CodegenError(f"{node.op.name} {g.name_of(node.outputs[0])!r} has an empty output "
                                   f"{tuple(empty.shape)}: the code generator needs at least one element")
            if lay != layout.PLAIN and node.op.name == "conv2d":
                data, w, *bias = node.inputs
                outs: tuple[Tensor, ...] = (conv.conv2d_nchwc(operand(data, lay), packed_weight(w, node.attrs.groups),
                                                              operand(bias[0], layout.PLAIN) if bias else None,
                                                              node.attrs, node.types[0].shape[1]),)
            elif lay != layout.PLAIN:
                types = [TensorType(layout.blocked_shape(t.shape, lay), t.dtype) for t in node.types]
                outs = topi.compute(node.op.name, [operand(r, lay) for r in node.inputs],
                                    layout.blocked_attrs(node, lay), types)
            else:
                outs = topi.compute(node.op.name, [operand(r, lay) for r in node.inputs], node.attrs, node.types)
            computed.update(zip(node.outputs, outs))
        outputs: list[Tensor] = []
        writes: list[str] = []
        for ref in group.outputs:
            t = computed[ref]
            if t.op in {o.op for o in outputs}:  # the same tensor twice: copy it out
                t = compute(t.shape, lambda *i, src=t: src[i], name="copy", tag="injective")
            outputs.append(t)
            writes.append(self.key(ref, lay))
            self.produced[ref] = lay
        kernel = Kernel("", group.name, reads, writes, _workload(g, group, lay))
        self.steps.append(self._lower(kernel, args, outputs, weight_args, hoisted))

    def finish(self) -> None:
        """Graph outputs in NCHW: a transform where the last kernel wrote them blocked; a copy where
        no kernel writes them (an input or a weight, or the same tensor twice)."""
        for i, ref in enumerate(self.g.outputs):
            if self.produced.get(ref, layout.PLAIN) != layout.PLAIN and not any(
                    self.key(ref, layout.PLAIN) in s.kernel.writes for s in self.steps):
                self.transform(ref, self.produced[ref], layout.PLAIN)
            key = self.key(ref, layout.PLAIN)
            buf = self.buffers[key]
            if buf.kind != "output" or buf.index != i:
                self.copies[i] = key

    def _lower(self, kernel: Kernel, args: list[Tensor], outputs: list[Tensor], weight_args: dict[str, Tensor],
               hoisted: list[Hoisted]) -> Lowered:
        name = f"k{len(self.steps)}"

        def template(cfg: Config) -> tuple[Any, list[Tensor]]:
            return topi.schedule_group(outputs, cfg, self.target), args + [h.stand_in for h in hoisted] + outputs

        try:
            cfg = self.config_for(kernel.workload, template) if self.config_for else Config()
            sched, _ = template(cfg)
            keys = dict(zip([a.op for a in args], kernel.reads))
            weights = {a.op for a in args if self.buffers[keys[a.op]].kind == "weight"}
            more = _hoist_weight_stages(sched, weights, name)
            if more:  # weights packed by the schedule: computed from the kernel's weight arguments
                weight_args.update({keys[a.op]: a for a in args if a.op in weights})
            read = {t.op for st in sched.stages for t in st.reads()}
            sched.placeholders = [p for p in sched.placeholders if p.op in read]
            kept = [a for a in args if a.op in read]  # a packed weight replaces its original
            stand_ins = [h.stand_in for h in hoisted + more]
            func = lower(sched, kept + stand_ins + outputs, name)
        except CodegenError as e:
            raise CodegenError(f"kernel {name} ({kernel.group}): {e}") from None
        kernel.reads = [keys[a.op] for a in kept] + [h.key for h in hoisted + more]
        return Lowered(func, kernel, hoisted + more, weight_args)


# ---- buffers -----------------------------------------------------------------------------

def _lifetimes(kernels: list[Kernel], buffers: dict[str, Buffer]) -> list[Lifetime]:
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for k, kernel in enumerate(kernels):
        for key in kernel.writes:
            first.setdefault(key, k)
        for key in kernel.reads:
            last[key] = k
    return [Lifetime(key, _nbytes(b), first[key], last.get(key, first[key]))
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
        stand_in = placeholder(st.op.shape, st.op.dtype, f"pre_s{len(out)}")
        out.append(Hoisted(f"{kernel}.{st.name}", st.tensor, stand_in))
    for h in out:
        sched.stages.remove(sched.stage_map.pop(h.tensor.op))
        sched.placeholders.append(h.stand_in)
        for reader in sched.stages:
            reader.body = replace_reads(reader.body, h.tensor, h.stand_in)
    return out


def _prepack(steps: list[Lowered], weight_values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Compute every hoisted tensor on the weights with one compiled module (plain loops suffice)."""
    from codegen.backends.c.build import build
    from codegen.schedule.schedule import create_schedule
    jobs = []
    for k, lw in enumerate(steps):
        if not lw.hoisted:
            continue
        outs = [h.tensor for h in lw.hoisted]
        sched = create_schedule(outs)
        ins = [(key, t) for key, t in lw.weight_args.items() if t.op in {p.op for p in sched.placeholders}]
        jobs.append((lower(sched, [t for _, t in ins] + outs, f"prepack{k}"), ins, lw.hoisted))
    if not jobs:
        return {}
    module = build([f for f, _, _ in jobs])
    values: dict[str, np.ndarray] = {}
    for func, ins, hoisted in jobs:
        results = [np.empty(h.tensor.shape, h.tensor.dtype) for h in hoisted]
        module[func.name](*[np.ascontiguousarray(weight_values[key]) for key, _ in ins], *results)
        values.update({h.key: r for h, r in zip(hoisted, results)})
    return values


def _workload(g: Graph, group: Group, lay: int) -> str:
    """What tuning records are keyed by: the group's operators, attributes, shapes and layout."""
    parts = [f"{n.op.name}{n.attrs!r}" for n in group.nodes]
    shapes = [str(g.type(r).shape) for r in group.inputs]
    text = "|".join(parts) + "|" + ",".join(shapes) + f"|{lay}"
    return hashlib.sha1(text.encode()).hexdigest()[:16] + ":" + group.name


def _cuda() -> Any:
    from codegen.backends import cuda
    return cuda


def _cuda_run_function(kernels: list[Kernel], buffers: dict[str, Buffer], copies: dict[int, str], arena: int,
                       weight_bytes: int, out_bytes: list[int]) -> str:
    """`taso_model_run` on the GPU: weights copied to the device once, inputs in, every kernel's
    launch on device pointers, outputs back; returns 0 or a status (see taso_cuda_error_string)."""
    ins = sorted((b for b in buffers.values() if b.kind == "input"), key=lambda b: b.index)

    def ptr(key: str) -> str:
        return _pointer(buffers[key], "d_in", "d_out", "d_weights", "d_arena")

    lines = ["", 'extern "C" int taso_model_run(void** inputs, void** outputs, char* weights, char* arena) {',
             "  static char* d_weights = 0; static char* d_arena = 0;",
             f"  static void* d_in[{max(len(ins), 1)}]; static void* d_out[{max(len(out_bytes), 1)}];",
             "  int devices = 0; cudaError_t e;",
             "  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return -1;",
             "  if (!d_arena) {",
             f"    if ((e = cudaMalloc((void**)&d_weights, {max(weight_bytes, 1)}))) return e;",
             f"    if ((e = cudaMemcpy(d_weights, weights, {weight_bytes}, cudaMemcpyHostToDevice))) return e;",
             f"    if ((e = cudaMalloc((void**)&d_arena, {max(arena, 1)}))) return e;"]
    lines += [f"    if ((e = cudaMalloc(&d_in[{b.index}], {_nbytes(b)}))) return e;" for b in ins]
    lines += [f"    if ((e = cudaMalloc(&d_out[{i}], {n}))) return e;" for i, n in enumerate(out_bytes)]
    lines.append("  }")
    lines += [f"  if ((e = cudaMemcpy(d_in[{b.index}], inputs[{b.index}], {_nbytes(b)}, cudaMemcpyHostToDevice))) "
              "return e;" for b in ins]
    lines.append("  int status;")
    for k in kernels:
        lines.append(f"  if ((status = {k.name}_launch({', '.join(ptr(a) for a in k.args)}))) return status;")
    for i, key in copies.items():
        lines.append(f"  if ((e = cudaMemcpy(d_out[{i}], {ptr(key)}, {_nbytes(buffers[key])}, "
                     "cudaMemcpyDeviceToDevice))) return e;")
    lines.append("  if ((e = cudaDeviceSynchronize())) return e;")
    lines += [f"  if ((e = cudaMemcpy(outputs[{i}], d_out[{i}], {n}, cudaMemcpyDeviceToHost))) return e;"
              for i, n in enumerate(out_bytes)]
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


def _nbytes(b: Buffer) -> int:
    return int(np.prod(b.shape, dtype=np.int64)) * np.dtype(b.dtype).itemsize


def _pointer(b: Buffer, inputs: str, outputs: str, weights: str, arena: str) -> str:
    """A C expression for buffer `b`'s address, given the names of the run function's bases."""
    from codegen.backends.c.emit import C_TYPES
    base = {"input": f"{inputs}[{b.index}]", "output": f"{outputs}[{b.index}]",
            "weight": f"({weights} + {b.offset})", "arena": f"({arena} + {b.offset})"}[b.kind]
    return f"({C_TYPES[b.dtype]}*)({base})"


def _run_function(kernels: list[Kernel], buffers: dict[str, Buffer], copies: dict[int, str]) -> str:
    def ptr(key: str) -> str:
        return _pointer(buffers[key], "inputs", "outputs", "weights", "arena")

    lines = ["", "void taso_model_run(void** inputs, void** outputs, char* weights, char* arena) {"]
    for k in kernels:
        lines.append(f"  {k.name}({', '.join(ptr(a) for a in k.args)});")
    for i, key in copies.items():  # outputs that no kernel writes: an input, a weight, a repeat
        lines.append(f"  memcpy(outputs[{i}], {ptr(key)}, {_nbytes(buffers[key])});")
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
        "kernels": [{"name": k.name, "group": k.group, "args": k.args, "writes": len(k.writes),
                     "workload": k.workload} for k in kernels],
        "buffers": [{"key": b.key, "shape": list(b.shape), "dtype": b.dtype, "kind": b.kind, "offset": b.offset,
                     "index": b.index} for b in buffers.values()],
        "stats": {"groups": report.groups, "kernels": report.kernels, "unique_kernels": report.unique_kernels,
                  "layout_transforms": report.layout_transforms, "blocked_groups": report.blocked_groups,
                  "arena_bytes": report.arena_bytes, "unshared_bytes": report.unshared_bytes},
    }


def _publish(out_dir: Path, texts: dict[str, str], weights: bytes, manifest: dict[str, Any],
             write_onnx: Callable[[Path], None] | None) -> None:
    """Build everything in a staging directory beside `out_dir`, then swap it in."""
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir())
                                                      and not (out_dir / "manifest.json").exists())):
        raise CodegenError(f"{out_dir} exists and is not a taso-py compiled model; choose another -o")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        for name, text in texts.items():
            (stage / name).write_text(text)
        if "model.cu" in texts:
            _cuda().compile_cuda(texts["model.cu"], stage / "model.so")
        else:
            compile_shared(texts["model.c"], stage / "model.so")
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
