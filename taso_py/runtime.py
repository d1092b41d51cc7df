"""Running models in ONNX Runtime: random inputs, and the equivalence check every rewrite
must pass before taso-py writes a model."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import onnx

from taso_py.errors import InputError
from taso_py.graph import Graph
from taso_py.onnx_io.reader import first_line


def random_feeds(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input (see random_arrays)."""
    return random_arrays([(n.attrs.name, n.attrs.type.shape, n.attrs.type.dtype.numpy) for n in graph.inputs], seed)


def random_arrays(specs: Iterable[tuple[str, Sequence[int], np.dtype]], seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded arrays by name: normal floats, small non-negative ints (safe as indices), random bools."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, shape, dtype in specs:
        dtype = np.dtype(dtype)
        if dtype.kind == "f":
            value = rng.standard_normal(tuple(shape))
        elif dtype.kind == "b":
            value = rng.random(tuple(shape)) < 0.5
        else:
            value = rng.integers(0, 2, tuple(shape))
        feeds[name] = np.asarray(value, dtype)
    return feeds


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


def run(model: onnx.ModelProto | str | Path, feeds: Mapping[str, np.ndarray], threads: int = 0
        ) -> dict[str, np.ndarray]:
    sess = session(model, threads)
    names = [o.name for o in sess.get_outputs()]
    try:
        return dict(zip(names, sess.run(names, dict(feeds))))
    except Exception as e:  # ORT raises its own exception types
        raise InputError(f"ONNX Runtime failed to run the model: {first_line(e)}") from None


@dataclass(frozen=True)
class Latency:
    """Median milliseconds of an original and an optimized model, timed in turn in one process."""

    original_ms: float
    optimized_ms: float
    runs: int
    threads: int

    @property
    def speedup(self) -> float:
        return self.original_ms / self.optimized_ms

    def to_json(self) -> dict:
        return {**asdict(self), "speedup": self.speedup}


def latency(original: onnx.ModelProto | str | Path, optimized: onnx.ModelProto | str | Path,
            feeds: Mapping[str, np.ndarray], threads: int = 0, runs: int = 10, min_seconds: float = 1.0,
            warmup: int = 3) -> Latency:
    """Both models on the same inputs, runs interleaved (original, optimized, original, ...) so
    that both see the same machine; thread spinning is off (see `session`), so neither session's
    idle threads steal the other's cores. At least `runs` each, and more until `min_seconds` have
    passed: ten runs of a model of a tenth of a millisecond are noise (0.94x to 1.94x, measured)."""
    sessions = [session(original, threads), session(optimized, threads)]
    for s in sessions:
        for _ in range(warmup):
            s.run(None, dict(feeds))
    samples: list[list[float]] = [[], []]
    began = time.perf_counter()
    while len(samples[0]) < runs or time.perf_counter() - began < min_seconds:
        for s, out in zip(sessions, samples):
            started = time.perf_counter()
            s.run(None, dict(feeds))
            out.append((time.perf_counter() - started) * 1e3)
    return Latency(statistics.median(samples[0]), statistics.median(samples[1]), len(samples[0]),
                   threads or os.cpu_count() or 1)


@dataclass(frozen=True)
class Comparison:
    """Largest errors of a candidate's outputs against a reference's (same names)."""

    max_abs: float
    max_rel: float
    ok: bool
    worst_output: str

    def to_json(self) -> dict:
        return {"max_abs_error": self.max_abs, "max_rel_error": self.max_rel, "ok": self.ok,
                "worst_output": self.worst_output}


def compare_outputs(reference: Mapping[str, np.ndarray], candidate: Mapping[str, np.ndarray],
                    rtol: float = 1e-4, atol: float = 1e-5) -> Comparison:
    """`ok` when every element satisfies |a - b| <= atol + rtol * |a|; rel error is max|a-b| / max|a|."""
    worst = ("", 0.0, 0.0)
    ok = True
    for name, a in reference.items():
        if name not in candidate:
            raise InputError(f"output {name!r} is missing from the rewritten model")
        b = candidate[name]
        if a.shape != b.shape:
            return Comparison(float("inf"), float("inf"), False, name)
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        diff = np.abs(a64 - b64)
        nan_mismatch = np.isnan(a64) != np.isnan(b64)
        diff = np.where(np.isnan(a64) & np.isnan(b64), 0.0, diff)
        abs_err = float(diff.max(initial=0.0)) if not nan_mismatch.any() else float("inf")
        rel_err = abs_err / max(float(np.abs(np.nan_to_num(a64)).max(initial=0.0)), 1e-30)
        ok = ok and not nan_mismatch.any() and bool(np.all(diff <= atol + rtol * np.abs(np.nan_to_num(a64))))
        if rel_err >= worst[2]:
            worst = (name, abs_err, rel_err)
    return Comparison(worst[1], worst[2], ok, worst[0])


def compare_models(reference: onnx.ModelProto | str | Path, candidate: onnx.ModelProto | str | Path,
                   feeds: Mapping[str, np.ndarray], rtol: float = 1e-4, atol: float = 1e-5,
                   outputs: Sequence[str] | None = None) -> Comparison:
    """Run both models in ONNX Runtime on the same inputs and compare their outputs."""
    want = run(reference, feeds)
    got = run(candidate, feeds)
    if outputs is not None:
        want = {k: v for k, v in want.items() if k in outputs}
    return compare_outputs(want, got, rtol, atol)
