"""Feeding and running corpus models with ONNX Runtime (reused by round-trip tests)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import numpy as np
import onnx
from onnx.external_data_helper import uses_external_data

ModelSource = onnx.ModelProto | str | os.PathLike[str]


def graph_feed_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that need a feed (IR < 4 models list initializers as inputs too)."""
    initializers = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in initializers]


def input_shape(value: onnx.ValueInfoProto, overrides: Mapping[str, tuple[int, ...]]) -> tuple[int, ...]:
    """Concrete shape of a graph input, taking dynamic dims from ``overrides``."""
    if value.name in overrides:
        return tuple(overrides[value.name])
    dims = value.type.tensor_type.shape.dim
    if not all(d.HasField("dim_value") for d in dims):
        raise ValueError(
            f"input {value.name!r} has dynamic dims {[d.dim_param or '?' for d in dims]}; pass input_shapes"
        )
    return tuple(d.dim_value for d in dims)


def random_array(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
    """Seeded values valid for the dtype: normals, small non-negative ints, coin flips.

    Ints stay in [0, 4) because int inputs are usually indices or counts.
    """
    # 0-d draws come back as numpy scalars, hence the final asarray
    if dtype == np.bool_:
        values = rng.random(shape) < 0.5
    elif np.issubdtype(dtype, np.integer):
        values = rng.integers(0, 4, size=shape)
    else:
        values = rng.standard_normal(shape)
    return np.asarray(values, dtype=dtype)


def random_feeds(
    model: onnx.ModelProto,
    input_shapes: Mapping[str, tuple[int, ...]] | None = None,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Seeded random feeds for every non-initializer graph input of ``model``."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in graph_feed_inputs(model):
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
        feeds[value.name] = random_array(rng, dtype, input_shape(value, input_shapes or {}))
    return feeds


def run_ort(model: ModelSource, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Run a model (proto, or path for external-data models) on ORT CPU, 1 thread.

    A proto is serialized to bytes, so ORT never sees a stale file; a proto
    whose tensors live in external files cannot be run that way (ORT would
    resolve them against its working directory), hence the path form.
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if isinstance(model, onnx.ModelProto):
        if any(uses_external_data(t) for t in _tensors(model.graph)):
            raise ValueError("model has external data: save() it and pass the path")
        source: bytes | str = model.SerializeToString()
    else:
        source = os.fspath(model)
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    return session.run(None, dict(feeds))


def _tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    """Initializers and tensor attributes of ``graph`` and of every nested subgraph."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                yield attr.t
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
                yield from _tensors(sub)


def save(model: onnx.ModelProto, path: str | os.PathLike[str], *, external_data: bool = False) -> Path:
    """Write ``model`` to ``path``; ``external_data`` puts tensors in ``<name>.data``.

    Works on a copy because onnx's external-data conversion empties the
    tensors of the proto it is given.
    """
    path = Path(path)
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    onnx.save_model(
        copy,
        path,
        save_as_external_data=external_data,
        all_tensors_to_one_file=True,
        location=f"{path.name}.data",
        size_threshold=0,
    )
    return path
