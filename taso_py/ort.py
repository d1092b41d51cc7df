"""ONNX Runtime, the one place sessions are made: spinning off, the CPU provider, one-line errors.

A leaf module (onnx, onnxruntime and `errors` only; it knows nothing of the graph IR), so the op
table's opaque nodes, the importer's constant folding, the cost model, the runtime checks and
compiled modules all get the same sessions without importing each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import onnx

from taso_py.errors import InputError, first_line


def session(model: onnx.ModelProto | str | Path, threads: int = 0) -> object:
    """An ORT CPU session; thread spinning is off so two sessions timed in turn don't fight."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    try:
        return ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])
    except Exception as e:  # ORT raises its own exception types
        raise InputError(f"ONNX Runtime cannot load the model: {first_line(e)}") from None


def run_anywhere(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """All outputs of `model`: from ONNX Runtime, or from onnx's reference evaluator where ORT cannot
    load the model (an op it lacks). Either raises its own error types when the model cannot run."""
    try:
        loaded = session(model, threads=1)
    except InputError:
        from onnx.reference import ReferenceEvaluator

        return tuple(np.asarray(o) for o in ReferenceEvaluator(model).run(None, dict(feeds)))
    return tuple(np.asarray(o) for o in loaded.run(None, dict(feeds)))
