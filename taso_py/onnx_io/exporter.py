"""Graph IR -> ONNX, at the model's own opset; saving is atomic and checker-clean.

Tensor names from the original model are kept, graph input and output names always.
Opaque nodes are written back byte for byte, with only their tensor names remapped.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from google.protobuf.message import EncodeError
from onnx import helper, numpy_helper

from taso_py.errors import InputError, first_line
from taso_py.graph import Graph, Ref
from taso_py.onnx_io.model import OnnxModel, OnnxOrigin
from taso_py.onnx_io.names import NameSource
from taso_py.ops.onnx_map import ExportNode

EXTERNAL_DATA_BYTES = 1 << 30  # past this, weights go to a side file (protobuf's limit is 2 GB)
EXTERNAL_TENSOR_BYTES = 1024  # in such a model, tensors this large or larger are external
DATA_ALIGNMENT = 4096  # offsets of external tensors, so they can be memory-mapped
PRODUCER = "taso-py"


class _Writer:
    """ExportContext: collects nodes and initializers with fresh, collision-free names."""

    def __init__(self, names: NameSource, opset: int, data_file: str | None) -> None:
        self.opset = opset
        self.names = names
        self.outer: dict[str, str] = {}  # outer-scope names an Identity has restored, and from what
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.external: list[tuple[int, np.ndarray]] = []  # (offset in data_file, value)
        self._data_file = data_file
        self._data_size = 0
        self._consts: dict[tuple, str] = {}

    def fresh(self, hint: str) -> str:
        return self.names.fresh(hint)

    def emit(self, op_type: str, inputs: Sequence[str], outputs: Sequence[str] | int = 1, **attrs: Any) -> list[str]:
        outs = [self.fresh(op_type.lower()) for _ in range(outputs)] if isinstance(outputs, int) else list(outputs)
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, **attrs))
        return outs

    def const(self, value: np.ndarray, hint: str = "const") -> str:
        """An initializer; small equal constants are shared."""
        value = np.asarray(value)
        key = (value.dtype.str, value.shape, value.tobytes()) if value.size <= 64 else None
        if key is not None and key in self._consts:
            return self._consts[key]
        name = self.fresh(hint)
        self.add_initializer(value, name)
        if key is not None:
            self._consts[key] = name
        return name

    def add_initializer(self, value: np.ndarray, name: str) -> None:
        """Inline, or, for a model written with external data, a reference into `data_file`
        (the weight itself is written by save_model: no protobuf ever holds it)."""
        value = np.asarray(value)
        if self._data_file is None or value.nbytes < EXTERNAL_TENSOR_BYTES:
            self.initializers.append(numpy_helper.from_array(value, name))
            return
        self.initializers.append(external_tensor(name, value, self._data_file, self._data_size))
        self.external.append((self._data_size, value))
        self._data_size += -(-value.nbytes // DATA_ALIGNMENT) * DATA_ALIGNMENT


def external_tensor(name: str, value: np.ndarray, location: str, offset: int) -> onnx.TensorProto:
    """A TensorProto whose data lies in `location` at `offset` (written separately)."""
    tensor = onnx.TensorProto(name=name, dims=value.shape, data_type=helper.np_dtype_to_tensor_dtype(value.dtype),
                              data_location=onnx.TensorProto.EXTERNAL)
    for key, v in (("location", location), ("offset", str(offset)), ("length", str(value.nbytes))):
        tensor.external_data.add(key=key, value=v)
    return tensor


def _final_names(graph: Graph, live: set[int], model_names: frozenset[str]
                 ) -> tuple[dict[Ref, str], list[tuple[str, str]], NameSource]:
    """Tensor names to write, with outputs renamed to the graph's output names where that is
    possible, the (source, output) pairs that need an Identity node instead, and the source of
    fresh names for the rest of the export (it avoids these and every name of the source model).

    A tensor that is not an output but holds an output's name (possible in graphs built by hand)
    is renamed, so that the Identity writing that output cannot produce a name twice."""
    names = {r: n.names[r.index] for n in graph.nodes.values() if n.id in live for r in n.outputs}
    source = NameSource(set(names.values()) | set(graph.output_names) | model_names)
    wanted = dict(zip(graph.output_names, graph.outputs))
    for ref, name in names.items():
        if name in wanted and wanted[name] != ref and graph.node(ref).op.name != "input":
            names[ref] = source.fresh(graph.node(ref).op.name)
    taken = set(names.values())
    identities: list[tuple[str, str]] = []
    renamed: set[Ref] = set()  # renamed to an earlier output's name: a second output gets an Identity
    for ref, out in zip(graph.outputs, graph.output_names):
        if names[ref] == out:
            renamed.add(ref)
            continue
        if ref not in renamed and out not in taken and graph.node(ref).op.name != "input":
            taken.discard(names[ref])
            names[ref] = out
            taken.add(out)
            renamed.add(ref)
        else:
            identities.append((names[ref], out))
    return names, identities, source


def _value_info(name: str, t: Any) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(t.dtype.numpy), list(t.shape))


def _output_info(name: str, t: Any) -> onnx.ValueInfoProto:
    """A graph output's type; one whose shape only the data decides (NonZero) is left empty here
    and filled in by `_infer_open_outputs`."""
    return _value_info(name, t) if t.is_known else helper.make_empty_tensor_value_info(name)


def _infer_open_outputs(proto: onnx.ModelProto) -> None:
    """Graph outputs with unknown shapes get the rank and element type onnx's shape inference
    finds (e.g. NonZero: int64 [2, ?]); the checker refuses a graph output without a shape."""
    open_outputs = [o for o in proto.graph.output if not o.type.tensor_type.HasField("shape")]
    if not open_outputs:
        return
    try:
        inferred = onnx.shape_inference.infer_shapes(proto)
    except (onnx.shape_inference.InferenceError, ValueError):
        return
    found = {v.name: v.type for v in [*inferred.graph.value_info, *inferred.graph.output]
             if v.type.tensor_type.HasField("shape")}
    for o in open_outputs:
        if o.name in found:
            o.type.CopyFrom(found[o.name])


def weight_bytes(graph: Graph) -> int:
    live = graph.live_ids()
    return sum(n.attrs.value.nbytes for n in graph.nodes.values() if n.op.name == "weight" and n.id in live)


def to_onnx(model: OnnxModel | Graph) -> onnx.ModelProto:
    """The ONNX model of a graph, at its origin's opset (or the default one for new graphs).

    Models whose weights pass EXTERNAL_DATA_BYTES cannot be one protobuf: save them with save_model.
    """
    model = model if isinstance(model, OnnxModel) else OnnxModel(model)
    if weight_bytes(model.graph) > EXTERNAL_DATA_BYTES:
        raise InputError(f"model weights exceed {EXTERNAL_DATA_BYTES >> 20} MiB: write it with save_model, "
                         "which keeps them in an external data file")
    return _export(model, None)[0]


def _export(model: OnnxModel, data_file: str | None) -> tuple[onnx.ModelProto, list[tuple[int, np.ndarray]]]:
    """The model proto, and with `data_file` the large weights to write there at their offsets."""
    graph, origin = model.graph, model.origin
    live = graph.live_ids() | set(graph.input_ids)
    names, identities, fresh = _final_names(graph, live, origin.names)
    w = _Writer(fresh, model.opset, data_file)
    inputs = []
    for node in graph.topo_order():
        if node.id not in live:
            continue
        ins = [names[r] for r in node.inputs]
        outs = [names[r] for r in node.outputs]
        kind = node.op.name
        if kind == "input":
            inputs.append(_value_info(outs[0], node.attrs.type))
        elif kind == "weight":
            w.add_initializer(node.attrs.value, outs[0])
        elif kind == "opaque":
            _write_opaque(w, node.attrs, ins, outs)
        else:
            node.op.onnx.export(w, ExportNode(ins, outs, node.attrs, [graph.type(r) for r in node.inputs],
                                              node.types))
    for source, out in identities:
        if w.outer.get(out) != source:  # not already restored for a subgraph that reads it by that name
            w.emit("Identity", [source], [out])
    outputs = [_output_info(n, graph.type(r)) for r, n in zip(graph.outputs, graph.output_names)]
    proto = helper.make_graph(w.nodes, graph.name, inputs, outputs, w.initializers)
    model_proto = _model(proto, origin)
    _infer_open_outputs(model_proto)
    return model_proto, w.external


def _write_opaque(w: _Writer, a: Any, ins: list[str], outs: list[str]) -> None:
    """The original node with its tensor names remapped; outer-scope names its subgraphs read
    are kept alive with an Identity where the tensor now has another name."""
    node = a.proto()
    explicit = iter(ins[: len(ins) - len(a.outer)])
    node.ClearField("input")
    node.input.extend(next(explicit) if n else "" for n in a.inputs)
    out_iter = iter(outs)
    renamed = [next(out_iter) if n else "" for n in node.output]
    node.ClearField("output")
    node.output.extend(renamed)
    for name, current in zip(a.outer, ins[len(ins) - len(a.outer):]):
        if name != current and name not in w.outer:  # once, however many nodes read it
            w.outer[name] = current
            w.emit("Identity", [current], [name])
    w.nodes.append(node)


def _model(graph: onnx.GraphProto, origin: OnnxOrigin) -> onnx.ModelProto:
    opsets = [helper.make_opsetid(d, v) for d, v in origin.opsets.items()]
    model = helper.make_model(graph, opset_imports=opsets, producer_name=PRODUCER,
                              functions=[onnx.FunctionProto.FromString(f) for f in origin.functions])
    # IR 4 lets initializers stay out of the graph inputs; never go below what the opsets need.
    model.ir_version = max(origin.ir_version, 4, helper.find_min_ir_version_for(opsets, ignore_unknown=True))
    model.domain, model.model_version, model.doc_string = origin.domain, origin.model_version, origin.doc_string
    helper.set_model_props(model, origin.metadata)
    return model


def check(model: onnx.ModelProto | str | Path) -> None:
    """onnx's full check (strict shape inference included); an InputError on failure."""
    try:
        onnx.checker.check_model(model if isinstance(model, onnx.ModelProto) else str(model), full_check=True)
    except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError, ValueError) as e:
        raise InputError(f"exported model fails onnx's checker: {first_line(e)}") from None


def save_model(model: OnnxModel | Graph, path: str | Path, *,
               before_publish: Callable[[Path], None] | None = None) -> Path:
    """Write atomically (a temp file, then rename), weights beside the model when large.

    Nothing is left at `path` unless the whole model was written, passed onnx's full check,
    and `before_publish` (given the staged file) did not raise.
    """
    path = Path(path)
    data_name = path.name + ".data"
    with _staging(path) as staged:
        try:
            large = _stage(model, staged, data_name)
        except (OSError, ValueError, EncodeError) as e:
            raise InputError(f"{path}: cannot write ({first_line(e)})") from None
        check(staged)
        if before_publish is not None:
            before_publish(staged)
        if large:
            os.replace(staged.parent / data_name, path.parent / data_name)
        os.replace(staged, path)
    return path


def save_copy(source: Path, path: str | Path, *, before_publish: Callable[[Path], None] | None = None) -> Path:
    """The source file's bytes at `path`, published as `save_model` publishes: a model that no rewrite
    changed goes back to its user as it came (its dynamic dimensions, names and node order kept), not
    re-exported. The caller makes sure no external data file comes with it (`OnnxOrigin.external_data`)."""
    path = Path(path)
    with _staging(path) as staged:
        try:
            shutil.copyfile(source, staged)
        except OSError as e:
            raise InputError(f"{path}: cannot write ({first_line(e)})") from None
        if before_publish is not None:
            before_publish(staged)
        os.replace(staged, path)
    return path


@contextmanager
def _staging(path: Path) -> Iterator[Path]:
    """Where to stage `path`: a file named like it in a temporary folder beside it (one file system,
    so publishing is a rename); the folder goes, with whatever was not published, on the way out."""
    if not path.parent.is_dir():
        raise InputError(f"{path.parent}: no such directory")
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".taso-") as tmp:
        yield Path(tmp) / path.name


def _stage(model: OnnxModel | Graph, staged: Path, data_name: str) -> bool:
    """Write the model (and its data file when large) to `staged`; True when there is a data file."""
    model = model if isinstance(model, OnnxModel) else OnnxModel(model)
    large = weight_bytes(model.graph) > EXTERNAL_DATA_BYTES
    proto, external = _export(model, data_name if large else None)
    if large:
        with open(staged.parent / data_name, "wb") as f:
            for offset, value in external:
                f.seek(offset)
                f.write(np.ascontiguousarray(value, value.dtype.newbyteorder("<")).data)
    onnx.save_model(proto, str(staged))
    return large


def region_writer(origin: OnnxOrigin) -> Callable[[Graph, Path], None]:
    """Writes a part of a model (a region the compiled module runs in ONNX Runtime) as a model of
    its own, at the opsets and with the local functions of the model it came from."""
    return lambda graph, path: save_model(OnnxModel(graph, origin), path)
