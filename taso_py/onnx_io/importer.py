"""ONNX -> graph IR.

Nodes are taken in dependency order (whatever order the file lists them in). A node is
- folded, when all its inputs are constants (initializers, Constant nodes, shapes of
  static tensors...): it runs alone in ONNX Runtime, so weight subgraphs such as
  ConstantOfShape or Shape->Gather->Concat->Reshape vanish at import;
- passed through, for Identity and inference-time Dropout;
- translated by the op table's ONNX mapping, when its op type is in the algebra;
- otherwise kept opaque: byte for byte, exported back unchanged.
Algebra nodes left with only weights as inputs (Gemm's transposed B, say) are folded last, and an
operator's definition written out (x * Sigmoid(x) for silu, see `OpDef.defined_as`) becomes that operator.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from taso_py import ops
from taso_py.errors import InputError, TasoError, Unsupported, first_line
from taso_py.graph import Graph, Ref, fold_constants, validate
from taso_py.match.definitions import collapse_definitions
from taso_py.onnx_io.model import OnnxModel, OnnxOrigin
from taso_py.onnx_io.names import avoid_names, model_names
from taso_py.onnx_io.reader import Prepared, default_opset, prepare, read_initializer
from taso_py.onnx_io.scopes import node_label, outer_names, subgraphs
from taso_py.ops.structural import OpaqueAttrs, single_node_model
from taso_py.ort import run_anywhere
from taso_py.types import DType, TensorType

log = logging.getLogger("taso_py.onnx_io")

DEFAULT_DOMAINS = ("", "ai.onnx")
RANDOM_OPS = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                        "Multinomial", "Bernoulli"})
FOLD_LIMIT = 1 << 28  # bytes: larger constant results stay as graph nodes


def load_model(source: str | Path | onnx.ModelProto,
               input_shapes: Mapping[str, Sequence[int]] | None = None) -> OnnxModel:
    """Import an ONNX model (a path or a proto) into the graph IR."""
    try:
        prepared = prepare(source, input_shapes)
        translator = _Translator(prepared)
        graph = translator.run()
    except UnicodeDecodeError as e:  # protobuf decodes a string field when it is read, wherever that is
        raise InputError(f"the model holds a name or string that is not UTF-8 ({e.reason} at byte {e.start}): "
                         "a damaged file?") from None
    path = prepared.path
    origin = _origin(prepared.skeleton, translator.names, prepared.external)
    return OnnxModel(graph, origin, str(path) if path else None, translator.notes)


def dtype_of(elem_type: int, what: str) -> DType:
    try:
        return DType.of(helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, InputError, TypeError):
        name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in onnx.TensorProto.DataType.values() \
            else str(elem_type)
        raise InputError(f"{what} has element type {name}, which taso-py does not support") from None


def type_of(value: onnx.ValueInfoProto | onnx.TypeProto) -> TensorType:
    """The IR type of an ONNX value; unknown parts stay None (only opaque nodes have those)."""
    proto = value.type if isinstance(value, onnx.ValueInfoProto) else value
    t = proto.tensor_type if proto.HasField("tensor_type") else None
    if t is None or not t.elem_type:
        return TensorType(None, None)
    try:
        dtype: DType | None = dtype_of(t.elem_type, "a tensor")
    except InputError:
        dtype = None
    dims = [d.dim_value if d.HasField("dim_value") else -1 for d in t.shape.dim]
    shape = tuple(dims) if t.HasField("shape") and all(d >= 0 for d in dims) else None
    return TensorType(shape, dtype)


def _origin(model: onnx.ModelProto, names: frozenset[str], external: bool) -> OnnxOrigin:
    return OnnxOrigin(
        opsets={o.domain if o.domain != "ai.onnx" else "": o.version for o in model.opset_import},
        ir_version=model.ir_version, producer_name=model.producer_name,
        producer_version=model.producer_version, domain=model.domain, model_version=model.model_version,
        doc_string=model.doc_string, metadata={p.key: p.value for p in model.metadata_props},
        functions=tuple(f.SerializeToString() for f in model.functions), names=names, external_data=external,
    )


class _Translator:
    """One pass over the ONNX graph, building the IR."""

    def __init__(self, prepared: Prepared) -> None:
        self.prepared = prepared
        self.model = model = prepared.skeleton
        self.opset = default_opset(model)
        self.opsets = tuple((o.domain, o.version) for o in model.opset_import)
        self.graph = Graph(model.graph.name or "main")
        self.names = frozenset(model_names(model.graph))
        avoid_names(self.graph, self.names)  # nothing the import or the optimizer makes up is a name of the model
        self.refs: dict[str, Ref] = {}
        self.consts: dict[str, np.ndarray] = {t.name: read_initializer(t) for t in model.graph.initializer}
        self.consts.update(prepared.weights)
        g, inferred = model.graph, prepared.inferred.graph
        self.types = {v.name: type_of(v) for v in [*inferred.value_info, *inferred.input, *inferred.output]}
        self.used = {n for node in g.node for n in [*node.input, *outer_names(node)] if n} | {o.name for o in g.output}
        self.importers = ops.onnx_importers()
        self.notes: list[str] = []

    def run(self) -> Graph:
        for value in self.prepared.real_inputs():
            t = type_of(value)
            if t.dtype is None:
                dtype_of(value.type.tensor_type.elem_type, f"input {value.name!r}")
            self.refs[value.name] = self.graph.add_input(value.name, t)
        opaque: Counter[str] = Counter()
        for node in self.model.graph.node:
            try:
                kept_opaque = self._translate(node)
            except TasoError as e:
                raise type(e)(f"{node_label(node)}: {e}") from None
            if kept_opaque:
                opaque[node.op_type if node.domain in DEFAULT_DOMAINS else f"{node.domain}::{node.op_type}"] += 1
        outputs = [o.name for o in self.model.graph.output]
        self.graph.set_outputs([self._ref(name) for name in outputs], outputs)
        fold_constants(self.graph)
        collapse_definitions(self.graph)
        self.graph.remove_unused()
        if opaque:
            log.warning("kept %d node(s) outside the algebra as opaque: %s", sum(opaque.values()),
                        ", ".join(f"{k} x{v}" for k, v in sorted(opaque.items())))
        return validate(self.graph)

    def _ref(self, name: str) -> Ref:
        """The IR tensor for an ONNX name; constants become weight nodes when first read."""
        if name not in self.refs:
            if name not in self.consts:
                raise InputError(f"tensor {name!r} is not defined")
            self.refs[name] = self.graph.add_weight(self.consts[name], name)
        return self.refs[name]

    def _type(self, name: str) -> TensorType:
        if name in self.consts:
            return TensorType.of(self.consts[name])
        if name in self.refs:
            return self.graph.type(self.refs[name])
        return self.types.get(name, TensorType(None, None))

    def _translate(self, node: onnx.NodeProto) -> bool:
        """Translate one node; True when it had to stay opaque."""
        default = node.domain in DEFAULT_DOMAINS
        if default and self._fold(node):
            return False
        if default and self._pass_through(node):
            return False
        if default and node.op_type in self.importers:
            try:
                ctx = _NodeContext(self, node)
                refs = self.importers[node.op_type](ctx)
            except Unsupported as e:
                self.notes.append(f"{node_label(node)} kept opaque: {e}")
            else:
                self._bind(node, refs, ctx.created)
                return False
        self._add_opaque(node)
        return True

    def _fold(self, node: onnx.NodeProto) -> bool:
        """Evaluate a node whose inputs are all known now (constants, or shapes of static tensors)."""
        if node.op_type in RANDOM_OPS or subgraphs(node):
            return False
        if node.op_type in ("Shape", "Size") and node.input[0] not in self.consts:
            t = self._type(node.input[0])
            if t.shape is None:
                return False
            shape = np.array(t.shape, np.int64)
            if node.op_type == "Shape":
                start, end = self._attr(node, "start", 0), self._attr(node, "end", None)
                value = shape[start:end]
            else:
                value = np.array(int(np.prod(shape)), np.int64)
            self.consts[node.output[0]] = value
            return True
        names = [n for n in node.input if n]
        if not all(n in self.consts for n in names):
            return False
        if node.op_type not in ("Constant",) and sum(self.consts[n].nbytes for n in names) > FOLD_LIMIT:
            return False
        try:
            feeds = {n: self.consts[n] for n in names}
            values = run_anywhere(single_node_model(node, feeds, self.opsets), feeds)
        except Exception as e:
            log.debug("could not fold %s: %s", node_label(node), first_line(e))
            return False
        for name, value in zip([o for o in node.output if o], values):
            self.consts[name] = np.asarray(value)
        return True

    def _pass_through(self, node: onnx.NodeProto) -> bool:
        """Identity, and Dropout at inference time, forward their input."""
        if node.op_type == "Dropout":
            training = node.input[2] if len(node.input) > 2 and node.input[2] else None
            if (training and not (training in self.consts and not self.consts[training].any())) \
                    or (len(node.output) > 1 and node.output[1] in self.used):
                return False
        elif node.op_type != "Identity":
            return False
        self.refs[node.output[0]] = self._ref(node.input[0])
        return True

    def _bind(self, node: onnx.NodeProto, refs: Sequence[Ref], created: set[int]) -> None:
        """Record the IR tensors of the node's outputs, naming new ones as ONNX did."""
        for name, ref in zip(node.output, refs):
            if not name:
                continue
            if ref.node in created:
                self.graph.rename(ref, name)
            self.refs[name] = ref

    def _add_opaque(self, node: onnx.NodeProto) -> None:
        outer = outer_names(node)
        inputs = [self._ref(n) for n in node.input if n] + [self._ref(n) for n in outer]
        self.graph.reserve_names(outer)  # no later node may take a name the subgraphs read
        outs = [o for o in node.output if o]
        attrs = OpaqueAttrs(node.op_type, node.domain, node.SerializeToString(), tuple(node.input), tuple(outer),
                            self.opsets, self._opaque_types(node, outs))
        made = self.graph.add_node(ops.get("opaque"), inputs, attrs, attrs.types, outs)
        for name, ref in zip(outs, made.outputs):
            self.refs[name] = ref

    def _opaque_types(self, node: onnx.NodeProto, outs: list[str]) -> tuple[TensorType, ...]:
        """Output types from the model's shape inference, or, where that left them unknown
        (a shape it could not propagate but the import folded), inferred again for this node
        from the input types known now."""
        types = tuple(self._type(o) for o in outs)
        if all(t.is_known for t in types):
            return types
        known = {n: self._type(n) for n in node.input if n}
        if not all(t.is_known for t in known.values()):
            return types
        versions = dict(self.opsets)
        try:
            schema = onnx.defs.get_schema(node.op_type, versions.get(node.domain, 1), node.domain)
            inferred = onnx.shape_inference.infer_node_outputs(
                schema, node,
                {n: helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(t.dtype.numpy), t.shape)
                 for n, t in known.items()},
                {n: numpy_helper.from_array(self.consts[n], n) for n in known if n in self.consts},
                opset_imports=[helper.make_opsetid(d, v) for d, v in self.opsets])
        except Exception as e:
            log.debug("no output types for %s: %s", node_label(node), first_line(e))
            return types
        return tuple(t if t.is_known or o not in inferred else type_of(inferred[o]) for o, t in zip(outs, types))

    @staticmethod
    def _attr(node: onnx.NodeProto, name: str, default: Any) -> Any:
        for a in node.attribute:
            if a.name == name:
                value = helper.get_attribute_value(a)
                if not isinstance(value, bytes):
                    return value
                try:
                    return value.decode()
                except UnicodeDecodeError:
                    raise InputError(f"{node.op_type} node {node.name or node.output[0]!r}: attribute {name!r} "
                                     f"is not a UTF-8 string") from None
        return default


class _NodeContext:
    """ImportContext for one ONNX node (see taso_py.ops.onnx_map)."""

    def __init__(self, tr: _Translator, node: onnx.NodeProto) -> None:
        self.tr, self.node = tr, node
        self.opset, self.op_type = tr.opset, node.op_type
        self.created: set[int] = set()
        for name in node.input:
            if name and tr._type(name).shape is None:
                raise Unsupported(f"input {name!r} has an unknown shape")

    @property
    def n_inputs(self) -> int:
        return len(self.node.input)

    @property
    def n_outputs(self) -> int:
        return len(self.node.output)

    def _name(self, i: int) -> str | None:
        return self.node.input[i] if i < len(self.node.input) and self.node.input[i] else None

    def input(self, i: int) -> Ref | None:
        name = self._name(i)
        return self.tr._ref(name) if name else None

    def type(self, i: int) -> TensorType:
        name = self._name(i)
        if name is None:
            raise InputError(f"input {i} is missing")
        return self.tr._type(name)

    def const(self, i: int) -> np.ndarray | None:
        name = self._name(i)
        return self.tr.consts.get(name) if name else None

    def attr(self, name: str, default: Any = None) -> Any:
        return self.tr._attr(self.node, name, default)

    def output_used(self, i: int) -> bool:
        return i < len(self.node.output) and self.node.output[i] in self.tr.used

    def add(self, op: str, inputs: Sequence[Ref], **attrs: Any) -> tuple[Ref, ...]:
        refs = self.tr.graph.add(op, inputs, **attrs)
        self.created.update(r.node for r in refs)
        return refs
