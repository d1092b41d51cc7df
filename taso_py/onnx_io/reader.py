"""Reading an ONNX file into a checked, shape-inferred ModelProto with static input shapes.

Everything that can be wrong with the input file is caught here and becomes a one-line
InputError: missing, truncated or non-ONNX files, invalid models, opsets older than 7 that
the version converter cannot lift, and dynamic input dimensions without an override.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import helper, numpy_helper, shape_inference, version_converter

from taso_py.errors import InputError, first_line
from taso_py.onnx_io.scopes import node_label, outer_names, subgraphs

log = logging.getLogger("taso_py.onnx_io")

MIN_OPSET = 7


def parse_input_shapes(specs: Sequence[str]) -> dict[str, tuple[int, ...]]:
    """`NAME=1,3,224,224` strings (as given to --input-shape) to a dict."""
    shapes: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        m = re.fullmatch(r"\s*([^=\s]+)\s*=\s*(\d+(?:\s*[,x]\s*\d+)*)\s*", spec)
        if not m:
            raise InputError(f"bad --input-shape {spec!r}: expected NAME=D1,D2,... e.g. input=1,3,224,224")
        shapes[m.group(1)] = tuple(int(d) for d in re.split(r"\s*[,x]\s*", m.group(2)))
    return shapes


def read_model(source: str | Path | onnx.ModelProto) -> tuple[onnx.ModelProto, Path | None]:
    """The ModelProto, with external data not yet loaded, and the path it came from."""
    if isinstance(source, onnx.ModelProto):
        return source, None
    path = Path(source)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if not path.is_file():
        raise InputError(f"{path}: not a file")
    if path.stat().st_size == 0:
        raise InputError(f"{path}: empty file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise InputError(f"{path}: not an ONNX model ({first_line(e)})") from None
    if (not model.graph.node and not model.graph.output) or not model.opset_import:
        raise InputError(f"{path}: not an ONNX model (no graph or opset)")
    return model, path


def external_data(source: str | Path | onnx.ModelProto) -> bool:
    """Whether any tensor of the model (subgraphs and node attributes included) keeps its data in a
    file beside it: such a model cannot be handed back as one file's bytes."""
    model, _ = read_model(source)
    stack = [model.graph]
    while stack:
        g = stack.pop()
        tensors = [*g.initializer, *(t for s in g.sparse_initializer for t in (s.values, s.indices))]
        for node in g.node:
            for a in node.attribute:
                tensors.extend([a.t, *a.tensors])  # an unset `t` is an empty tensor, not external
            stack.extend(subgraphs(node))
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in tensors):
            return True
    return False


def check_model(model: onnx.ModelProto) -> None:
    """onnx's checker on the skeleton model (weights left out, so any size fits and it is fast)."""
    try:
        onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as e:
        raise InputError(f"invalid ONNX model: {first_line(e)}") from None


def default_opset(model: onnx.ModelProto) -> int:
    for op in model.opset_import:
        if op.domain in ("", "ai.onnx"):
            return op.version
    raise InputError("model imports no default-domain opset")


def check_opset(model: onnx.ModelProto) -> None:
    """Refuse a default-domain opset newer than onnx here knows: its operators' meaning (and
    whether ONNX Runtime loads them) is not defined yet, so nothing about the model can be trusted."""
    opset, newest = default_opset(model), onnx.defs.onnx_opset_version()
    if opset > newest:
        raise InputError(f"the model imports opset {opset} of the default ONNX domain, newer than the newest this "
                         f"installation knows (opset {newest}, onnx {onnx.__version__}); export it at opset "
                         f"{newest} or older")


def upgrade(model: onnx.ModelProto) -> onnx.ModelProto:
    """Models older than opset 7 are lifted with onnx's version converter."""
    opset = default_opset(model)
    try:
        upgraded = version_converter.convert_version(model, MIN_OPSET)
    except Exception as e:  # the converter raises RuntimeError and more
        raise InputError(f"opset {opset} is older than {MIN_OPSET} and could not be upgraded: "
                         f"{first_line(e)}") from None
    log.warning("upgraded the model from opset %d to %d with onnx's version converter", opset, MIN_OPSET)
    return upgraded


def fix_input_shapes(real_inputs: Sequence[onnx.ValueInfoProto], overrides: Mapping[str, Sequence[int]]) -> None:
    """Apply --input-shape overrides; every input must end with only static dimensions."""
    inputs = {i.name: i for i in real_inputs}
    for name in overrides:
        if name not in inputs:
            raise InputError(f"--input-shape names {name!r}, but the inputs are: {', '.join(inputs) or 'none'}")
    for name, value in inputs.items():
        if not value.type.HasField("tensor_type"):
            raise InputError(f"input {name!r} is not a tensor (sequences and maps are not supported)")
        shape = value.type.tensor_type.shape
        if name in overrides:
            dims = list(overrides[name])
            if shape.dim and len(shape.dim) != len(dims):
                raise InputError(f"--input-shape {name} has {len(dims)} dims, the input has rank {len(shape.dim)}")
            for axis, (dim, want) in enumerate(zip(shape.dim, dims)):
                if dim.HasField("dim_value") and dim.dim_value != want:
                    raise InputError(f"input {name!r} has fixed size {dim.dim_value} on axis {axis}, not {want}")
            value.type.tensor_type.ClearField("shape")
            value.type.tensor_type.shape.dim.extend(onnx.TensorShapeProto.Dimension(dim_value=d) for d in dims)
            continue
        if not value.type.tensor_type.HasField("shape"):
            raise InputError(f"input {name!r} has no shape: give one with --input-shape {name}=D1,D2,...")
        dynamic = [f"axis {i}" + (f" ({d.dim_param!r})" if d.dim_param else "")
                   for i, d in enumerate(shape.dim) if not d.HasField("dim_value") or d.dim_value <= 0]
        if dynamic:
            raise InputError(f"input {name!r} has dynamic dimensions ({', '.join(dynamic)}): "
                             f"give a shape with --input-shape {name}=D1,D2,...")
    for name, value in inputs.items():
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if math.prod(dims) > MAX_INPUT_ELEMENTS:
            raise InputError(f"input {name!r} has shape {tuple(dims)}: {math.prod(dims):,} elements, more than "
                             f"taso-py runs ({MAX_INPUT_ELEMENTS:,}); give a smaller one with --input-shape")


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnx's shape inference, with data propagation so shapes computed from shapes resolve."""
    try:
        return shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except (shape_inference.InferenceError, onnx.checker.ValidationError, ValueError) as e:
        raise InputError(f"shape inference failed: {first_line(e)}") from None


def sorted_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes in dependency order (files may list them in any order); a clear error
    for a cycle or for a node that reads a tensor nothing provides."""
    nodes = list(graph.node)
    producer = {out: i for i, n in enumerate(nodes) for out in n.output if out}
    available = {t.name for t in graph.initializer} | {i.name for i in graph.input}
    deps = []
    for n in nodes:
        reads = [x for x in [*n.input, *outer_names(n)] if x]
        for x in reads:
            if x not in producer and x not in available:
                raise InputError(f"{node_label(n)} reads {x!r}, which no node, input or initializer provides")
        deps.append(sorted({producer[x] for x in reads if x in producer and x not in available}))
    order: list[onnx.NodeProto] = []
    state = [0] * len(nodes)  # 0 unvisited, 1 on the path, 2 placed
    for start in range(len(nodes)):
        if state[start]:
            continue
        state[start] = 1
        stack = [(start, iter(deps[start]))]
        while stack:
            i, pending = stack[-1]
            nxt = next(pending, None)
            if nxt is None:
                stack.pop()
                state[i] = 2
                order.append(nodes[i])
            elif state[nxt] == 1:
                raise InputError(f"graph has a cycle through {node_label(nodes[nxt])}")
            elif state[nxt] == 0:
                state[nxt] = 1
                stack.append((nxt, iter(deps[nxt])))
    return order


MAX_INPUT_ELEMENTS = 1 << 31  # 8 GiB of float32: more is a malformed model, not a workload
SMALL_CONSTANT = 1024  # elements: constants this small stay in the skeleton (shape inference reads them)


@dataclass
class Prepared:
    """A checked, shape-inferred skeleton of the model and its large weights as arrays.

    The skeleton is the model with every large initializer replaced by a typed graph input
    of the same name: the checker and shape inference then never serialize the weights.
    """

    skeleton: onnx.ModelProto  # nodes as read: shape inference does not annotate their subgraphs
    weights: dict[str, np.ndarray]
    path: Path | None
    external: bool = False  # some tensor's data was in a file beside the model (`external_data`)
    inferred: onnx.ModelProto | None = None  # the skeleton after shape inference: its value types

    def real_inputs(self) -> list[onnx.ValueInfoProto]:
        constants = set(self.weights) | {t.name for t in self.skeleton.graph.initializer}
        return [i for i in self.skeleton.graph.input if i.name not in constants]


def read_initializer(t: onnx.TensorProto, base_dir: str = "") -> np.ndarray:
    """An initializer's value; a clear error for one whose type or data does not make a tensor."""
    try:
        return numpy_helper.to_array(t, base_dir=base_dir)
    except (OSError, ValueError, TypeError, KeyError, MemoryError) as e:
        reason = first_line(e) if str(e) else type(e).__name__
        if isinstance(e, KeyError):
            reason = f"unknown element type {t.data_type}"
        raise InputError(f"initializer {t.name!r} cannot be read ({reason})") from None


def split_weights(model: onnx.ModelProto, path: Path | None) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """The skeleton and the large weights (read from external data files where they live)."""
    skeleton = onnx.ModelProto()
    for field_name in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        setattr(skeleton, field_name, getattr(model, field_name))
    skeleton.opset_import.extend(model.opset_import)
    skeleton.metadata_props.extend(model.metadata_props)
    skeleton.functions.extend(model.functions)
    g, sg = model.graph, skeleton.graph
    sg.name, sg.doc_string = g.name, g.doc_string
    for part in ("input", "output", "value_info", "sparse_initializer"):
        getattr(sg, part).extend(getattr(g, part))
    sg.node.extend(sorted_nodes(g))
    listed = {i.name for i in g.input}
    weights = {}
    base = str(path.parent) if path else ""
    for t in g.initializer:
        if int(np.prod(t.dims, dtype=np.int64)) <= SMALL_CONSTANT and t.data_location != onnx.TensorProto.EXTERNAL:
            sg.initializer.append(t)
            continue
        weights[t.name] = read_initializer(t, base)
        if t.name not in listed:
            sg.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return skeleton, weights


def check_names(graph: onnx.GraphProto) -> None:
    """Every tensor name a str: protobuf hands a name that is not UTF-8 over as bytes (a damaged
    file), which would surface later as an internal error wherever the name is printed or joined."""
    values = [*graph.input, *graph.output, *graph.value_info]
    names = [*(v.name for v in values), *(t.name for t in graph.initializer),
             *(n for node in graph.node for n in (*node.input, *node.output))]
    bad = next((n for n in names if not isinstance(n, str)), None)
    if bad is not None:
        raise InputError(f"tensor name {bad!r} is not UTF-8: a damaged file?")


def prepare(source: str | Path | onnx.ModelProto, input_shapes: Mapping[str, Sequence[int]] | None = None
            ) -> Prepared:
    """Read, check, upgrade and shape-infer a model; the input (file or proto) is never modified."""
    model, path = read_model(source)
    check_names(model.graph)
    check_opset(model)
    external = external_data(model)  # of the model as read: the upgrade makes a new proto
    if default_opset(model) < MIN_OPSET:
        model = upgrade(model)
    skeleton, weights = split_weights(model, path)
    check_model(skeleton)
    prepared = Prepared(skeleton, weights, path, external)
    fix_input_shapes(prepared.real_inputs(), input_shapes or {})
    prepared.inferred = infer_shapes(skeleton)
    return prepared
