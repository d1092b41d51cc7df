"""Lowering fused groups to kernels: compute definitions, layouts, schedules and pre-packed weights.

`KernelBuilder` walks the groups in order. For each it builds the tensor expressions of its
nodes in the group's layout (inserting a layout transform kernel where an input was produced
in the other one), schedules them (the group's template, with knobs from tuning records), takes
weight-only stages out as compile-time work (`Hoisted`), and lowers the result; the buffers
each kernel reads and writes are tracked by key.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from taso_py.codegen import topi
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.graph import fallback, layout
from taso_py.codegen.graph.fallback import Region
from taso_py.codegen.graph.partition import Group
from taso_py.codegen.lower.ir import Allocate, PrimFunc
from taso_py.codegen.lower.lower import lower
from taso_py.codegen.target import CPU, Target
from taso_py.codegen.te.tensor import Tensor, compute, placeholder
from taso_py.codegen.topi import conv, winograd
from taso_py.codegen.topi import layout as topi_layout
from taso_py.codegen.tune.space import Config
from taso_py.graph.ir import Graph, Node, Ref
from taso_py.types import TensorType

# A kernel estimated shorter than this on one core runs on one (its loops' `threads` knob, unless a
# tuning record sets it): waking the pool's other threads and waiting for them costs 2-4 us, more than
# such a kernel gains (ViT's 17-wide softmax took 9 us on two threads and 3 us on one). The estimate is
# a lower bound from single-core rates any CPU this runs on reaches: FLOPs at 50 GFLOP/s, bytes at
# 20 GB/s. Measured on an AVX-512 Zen 4, two threads, against always parallel: GPT-2, BERT and
# MobileNetV2 of the test corpus 1.7-2.5x faster, EfficientNet-B0 1.45x; 5 us gained less, 50 us cost
# NASNet-A 2%; SqueezeNet, NASNet-A and BERT of the suite unchanged at 20.
SERIAL_US = 20.0


def single_thread_us(kernel: Kernel) -> float:
    """A rough lower bound on `kernel`'s time on one core, in microseconds."""
    return kernel.flops / 50e3 + kernel.bytes / 20e3


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
    flops: int = 0  # what it computes, and the bytes it must move at least (inputs, weights, outputs once):
    bytes: int = 0  # the kernel's place on a roofline
    workspace: list[str] = field(default_factory=list)  # arena buffers it uses while it runs (padded inputs, ...)

    @property
    def args(self) -> list[str]:
        return self.reads + self.writes + self.workspace


@dataclass
class Buffer:
    key: str
    shape: tuple[int, ...]
    dtype: str
    kind: str  # input | output | weight | arena | dynamic (a value ONNX Runtime returns, see graph.fallback)
    offset: int = 0  # in weights.bin or the arena
    index: int = 0  # position among the inputs or outputs


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


class KernelBuilder:
    """Lowers groups in order, tracking the layout each tensor was produced in and the buffers."""

    def __init__(self, g: Graph, config_for: ConfigFor | None, target: Target = CPU,
                 segments: dict[Ref, layout.Segments] | None = None) -> None:
        self.g = g
        self.segments = segments or {}  # of each blocked tensor (see graph.layout)
        self.config_for = config_for
        self.target = target
        self.buffers: dict[str, Buffer] = {}
        self.values: dict[str, np.ndarray] = {}
        self.produced: dict[Ref, int] = {n.outputs[0]: layout.PLAIN for n in g.inputs}
        self.steps: list[Lowered] = []
        self.order: list[Kernel] = []  # every step of a run: the kernels, and the regions ORT runs
        self.regions: dict[str, Graph] = {}  # a region's kernel name -> its graph (see graph.fallback)
        self.copies: dict[int, str] = {}  # graph output index -> buffer key no kernel writes there
        self.outputs = {r: i for i, r in reversed(list(enumerate(g.outputs)))}

    # ---- buffers ---------------------------------------------------------------------------

    def seg(self, ref: Ref) -> layout.Segments:
        """The segments of `ref` when blocked (a tensor packed from NCHW is one)."""
        return self.segments.get(ref) or (self.g.type(ref).shape[1],)

    def key(self, ref: Ref, lay: int) -> str:
        """The buffer holding the data tensor `ref` in layout `lay` (registered on first use)."""
        g = self.g
        name = g.name_of(ref)
        key = name if lay == layout.PLAIN else f"{name}@nchw{lay}c"
        if key not in self.buffers:
            t = g.type(ref)
            # a region's output: the runtime holds it (a weight is no region's, even when empty: fuzz 110820)
            if not fallback.held_in_arena(t) and ref.node not in g.input_ids and g.weight(ref) is None:
                self.buffers[key] = Buffer(key, (), t.dtype.value if t.dtype else "", "dynamic")
                return key
            shape = tuple(t.shape) if lay == layout.PLAIN else layout.blocked_shape(t.shape, lay,
                                                                                   segments=self.seg(ref))
            kind, index = "arena", 0
            if g.weight(ref) is not None:  # a weight that is also a graph output is copied there (`finish`)
                kind = "weight"
                self.values[key] = g.weight(ref)
            elif lay == layout.PLAIN and ref.node in g.input_ids:
                kind, index = "input", g.input_ids.index(ref.node)
            elif lay == layout.PLAIN and ref in self.outputs:
                kind, index = "output", self.outputs[ref]
            self.buffers[key] = Buffer(key, shape, t.dtype.value, kind, index=index)
        return key

    def weight(self, ref: Ref, tag: str = "", form: Callable[[np.ndarray], np.ndarray] | None = None) -> str:
        """The weight `ref`, or `form` of it (a blocked or zero-padded copy) under the name tag."""
        if not tag:
            return self.key(ref, layout.PLAIN)
        key = f"{self.g.name_of(ref)}@{tag}"
        if key not in self.buffers:
            assert form is not None
            value = np.ascontiguousarray(form(self.g.weight(ref)))
            self.values[key] = value
            self.buffers[key] = Buffer(key, value.shape, value.dtype.name, "weight")
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
        segs = self.seg(ref)
        shape = tuple(t.shape) if src == layout.PLAIN else layout.blocked_shape(t.shape, src, segments=segs)
        x = placeholder(shape, t.dtype.value, "in0")
        y = conv.pack_data(x, dst) if dst != layout.PLAIN else conv.unpack_data(x, t.shape[1], segs)
        name = f"layout_nchw{dst}c" if dst != layout.PLAIN else "layout_nchw"
        kernel = Kernel("", name, [self.key(ref, src)], [self.key(ref, dst)], f"{name}{shape}",
                        bytes=2 * t.size * t.dtype.numpy.itemsize)
        self._add(self._lower(kernel, [x], [y], {}, []))

    def region(self, region: Region) -> None:
        """A run of groups the code generator cannot compile, as one step ONNX Runtime runs: it
        reads its inputs in NCHW from the buffers kernels wrote and writes its outputs in place."""
        reads = [self.data(r, layout.PLAIN) for r in region.inputs]
        writes = [self.key(r, layout.PLAIN) for r in region.outputs]
        self.produced.update((r, layout.PLAIN) for r in region.outputs)
        name = f"ort{len(self.regions)}"
        self.regions[name] = fallback.subgraph(self.g, region)
        self.order.append(Kernel(name, f"onnxruntime:{region.label}", reads, writes, ""))

    def _add(self, lowered: Lowered) -> None:
        self.steps.append(lowered)
        self.order.append(lowered.kernel)

    def group(self, group: Group, lay: int) -> None:
        g = self.g
        tensors: dict[tuple[Ref, int], Tensor] = {}  # (ref, layout) -> te tensor
        args: list[Tensor] = []
        reads: list[str] = []
        hoisted: list[Hoisted] = []
        weight_args: dict[str, Tensor] = {}
        name = f"k{len(self.steps)}"

        def arg(ref: Ref, form: int, key: str | None = None) -> Tensor:
            """A kernel argument: the data `ref` in layout `form`, or the weight buffer `key`."""
            key = key or (self.weight(ref) if g.weight(ref) is not None else self.data(ref, form))
            if key not in tensors:
                buf = self.buffers[key]
                tensors[key] = placeholder(buf.shape, buf.dtype, f"in{len(args)}",  # positional names
                                           constant=buf.kind == "weight")
                args.append(tensors[key])
                reads.append(key)
            return tensors[key]

        def packed_weight(key: str, groups: int, in_block: int) -> Tensor:
            buf = self.buffers[key]
            w = placeholder(buf.shape, buf.dtype, "w", constant=True)
            weight_args[key] = w
            packed = conv.pack_weight(w, in_block, lay, groups)
            stand_in = placeholder(packed.shape, packed.dtype, f"pre{len(hoisted)}", constant=True)
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
            if lay == layout.PLAIN:
                outs = topi.compute(node.op, [operand(r, lay) for r in node.inputs], node.attrs, node.types)
            else:
                outs = self._blocked(node, lay, operand, arg, packed_weight)
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
        flops = sum(n.op.count_flops([g.type(r) for r in n.inputs], n.types, n.attrs) for n in group.nodes)
        moved = sum(g.type(r).size * g.type(r).dtype.numpy.itemsize for r in [*group.inputs, *group.outputs])
        kernel = Kernel("", group.name, reads, writes, _workload(g, group, lay), flops, moved)
        self._add(self._lower(kernel, args, outputs, weight_args, hoisted))

    def _blocked(self, node: Node, lay: int, operand: Callable[[Ref, int], Tensor],
                 arg: Callable[..., Tensor], packed_weight: Callable[[str, int, int], Tensor]) -> tuple[Tensor, ...]:
        """`node`'s te outputs on blocked tensors (weights padded or spread to match their segments)."""
        g = self.g
        name = node.op.name
        if name == "conv2d":
            return (self._conv(node, lay, operand, arg, packed_weight),)
        if name == "concat":
            return (topi_layout.concat_blocks([operand(r, lay) for r in node.inputs]),)
        if name == "split":
            x, segs = operand(node.inputs[0], lay), self.seg(node.inputs[0])
            parts = layout.split_aligned(segs, node.attrs.sizes)
            if parts is not None:
                return topi_layout.split_blocks(x, [layout.blocks(p, lay) for p in parts])
            return topi_layout.split_lanes(x, segs, node.attrs.sizes)
        out_segs = self.seg(node.outputs[0])
        types = [TensorType(layout.blocked_shape(t.shape, lay, segments=out_segs), t.dtype) for t in node.types]

        def blocked_operand(r: Ref) -> Tensor:
            if g.weight(r) is None:
                return operand(r, lay)
            return arg(r, lay, self.weight(r, f"nchw{lay}c:{out_segs}", lambda a: layout.block_array(a, lay, out_segs)))

        return topi.compute(node.op, [blocked_operand(r) for r in node.inputs], layout.blocked_attrs(node, lay), types)

    def _conv(self, node: Node, lay: int, operand: Callable[[Ref, int], Tensor], arg: Callable[..., Tensor],
              packed_weight: Callable[[str, int, int], Tensor]) -> Tensor:
        """A convolution on blocked tensors: Winograd where it pays (3x3, stride 1), else direct, with
        its weights packed, padded or spread to the input's segments, and its bias zero-padded."""
        g = self.g
        data, w, *bias = node.inputs
        segs, shape = self.seg(data), g.type(w).shape
        depthwise = node.attrs.groups == shape[0] and shape[1] == 1
        out_segs = segs if depthwise else (node.types[0].shape[1],)
        b = None
        if bias and g.weight(bias[0]) is not None:  # zero in the padding lanes, so they stay zero
            b = arg(bias[0], lay, self.weight(bias[0], f"spread0:{out_segs}/{lay}",
                                               lambda a: layout.spread(a.ravel(), 0, out_segs, lay)))
        elif bias:
            b = operand(bias[0], layout.PLAIN)
        groups = node.attrs.groups
        if groups == 1 and segs[0] < lay and self.produced.get(data) == layout.PLAIN:
            # a few input channels (an image): read NCHW as blocks of one channel, nothing padded
            plain = operand(data, layout.PLAIN)
            x = compute((*plain.shape, 1), lambda *i, t=plain: t[i[:-1]], name="data_c1", tag="injective")
            return conv.conv2d_nchwc(x, packed_weight(self.weight(w), 1, 1), b, node.attrs, node.types[0].shape[1])
        x = operand(data, lay)
        m = winograd.tile_size(node.types[0].shape, segs, lay) if winograd.applies(node.attrs, shape) else 0
        if m:
            u = arg(w, lay, self.weight(w, f"winograd{m}:{segs}/{lay}", lambda a: winograd.weight_transform(
                a, m, lay, layout.positions(segs, lay))))
            return winograd.conv2d_winograd(x, u, b, node.attrs, m, layout.blocked_shape(node.types[0].shape, lay))
        if not depthwise and conv.small_groups(groups, shape, lay):  # block-diagonal weights
            key = self.weight(w, f"dense/{lay}", lambda a: conv.densify(a, node.attrs.groups, lay))
            groups = g.type(data).shape[1] // lay
        elif depthwise or len(segs) > 1:  # weights onto the padded channels of the segments
            axis = 0 if depthwise else 1
            key = self.weight(w, f"spread{axis}:{segs}/{lay}", lambda a: layout.spread(a, axis, segs, lay))
            groups = self.buffers[key].shape[0] if depthwise else groups
        else:
            key = self.weight(w)
        attrs = replace(node.attrs, groups=groups)
        return conv.conv2d_nchwc(x, packed_weight(key, groups, lay), b, attrs, layout.blocks(out_segs, lay) * lay)

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
            if "threads" not in cfg.values and single_thread_us(kernel) < SERIAL_US:
                cfg = Config({**cfg.values, "threads": 1})
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
            func = _workspace_params(lower(sched, kept + stand_ins + outputs, name))
        except CodegenError as e:
            raise CodegenError(f"kernel {name} ({kernel.group}): {e}") from None
        kernel.reads = [keys[a.op] for a in kept] + [h.key for h in hoisted + more]
        for buf in func.params[len(kept) + len(stand_ins) + len(outputs):]:
            key = f"{name}.{buf.name}"
            self.buffers[key] = Buffer(key, buf.shape, buf.dtype, "arena")
            kernel.workspace.append(key)
        return Lowered(func, kernel, hoisted + more, weight_args)


# ---- kernels ------------------------------------------------------------------------------

def _workspace_params(func: PrimFunc) -> PrimFunc:
    """The kernel's whole-kernel temporaries (a padded input, Winograd's transformed tiles) as
    parameters after the others: the graph compiler places them in the arena, so a run neither
    allocates nor touches fresh pages."""
    body, temps = func.body, []
    while isinstance(body, Allocate) and body.buffer.scope == "global":
        temps.append(body.buffer)
        body = body.body
    return PrimFunc(func.name, [*func.params, *temps], body)


def _hoist_weight_stages(sched: Any, weights: set[Any], kernel: str) -> list[Hoisted]:
    """Take out of the schedule each root stage that reads only weights (directly or through such
    stages): the kernel gets its value as an argument, so weights are pre-packed once."""
    from taso_py.codegen.schedule.schedule import replace_reads
    out: list[Hoisted] = []
    constant = set(weights)
    for st in list(sched.stages):
        reads = st.reads()
        if st.is_output or st.attach != "root" or not reads or not all(t.op in constant for t in reads):
            continue
        constant.add(st.op)
        stand_in = placeholder(st.op.shape, st.op.dtype, f"pre_s{len(out)}", constant=True)
        out.append(Hoisted(f"{kernel}.{st.name}", st.tensor, stand_in))
    for h in out:
        sched.stages.remove(sched.stage_map.pop(h.tensor.op))
        sched.placeholders.append(h.stand_in)
        for reader in sched.stages:
            reader.body = replace_reads(reader.body, h.tensor, h.stand_in)
    return out


def prepack(steps: list[Lowered], weight_values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Compute every hoisted tensor on the weights with one compiled module (plain loops suffice)."""
    from taso_py.codegen.backends.c.build import build
    from taso_py.codegen.schedule.schedule import create_schedule
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
