"""The measured cost model: each operator application timed alone in ONNX Runtime, on this machine.

An application becomes a one-node ONNX model (constant inputs as initializers, as in the real
model, so ORT can pre-pack them), exported exactly as `taso optimize` will export it. After
warm-up runs, it is timed until both a minimum number of runs and a minimum time have passed;
the median, less ORT's fixed cost per `run` call (see `overhead`), is the cost.

Timings are cached on disk, one file per machine and thread count (CPU model, core count, ONNX
Runtime version), and reused across runs: a model's operators are measured once. What a node
costs inside a model includes ORT's dispatch of one node (about a microsecond), which is why
merging many small operators pays even where their arithmetic does not shrink.

Inside a model an operator's weights are rarely still in the core's L2 cache when it runs: the
other operators' weights went through it since. Timed alone, run after run, weights that fit in L2
stay there. So an application with weights is timed as several copies of its node, each with its
weights of its own, enough of them to overflow the cores' L2 caches (`copies`). NasRNN's 1 MiB
[512, 512] weight matrices, on an Intel Xeon with 2 MiB of L2 a core: one matrix-vector product
timed alone took 25 us at two threads, eight of them with their own weights 42 us each, and one
product with all eight matrices as one 187 us; alone, the eight looked as cheap as the one, and
the search kept them apart in 1 run of 5 (its model then ran 1.71x faster instead of 2.4x).
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import onnx

from taso_py import host
from taso_py.atomic import write_json
from taso_py.cache import cache_root, read_records
from taso_py.cost.analytical import Roofline
from taso_py.cost.model import OpCall
from taso_py.graph.ir import Graph
from taso_py.onnx_io import OnnxModel, OnnxOrigin, to_onnx
from taso_py.ort import session
from taso_py.types import DType, TensorType

WARMUP = 2
MIN_RUNS = 5  # slow operators: five runs are enough for a median, and keep large models quick
# fast operators: as many runs as fit (thousands for a microsecond operator; 50 ms made a cold cache
# cost 51 s on a 70-node LSTM cell, whose e-graph has 991 operators to time)
MIN_SECONDS = 0.01
OVERHEAD_PAIRS = 7  # timings of ORT's fixed cost, whose median is taken (see `overhead`)
HUGE = 1 << 27  # elements: a tensor this large (512 MiB of floats) is priced by the roofline instead
FLOOR_MS = 1e-4
COLD_BYTES = 1 << 15  # weights of fewer bytes cost the same read from any cache: timed as one node
MAX_COPIES = 16


def machine_key(threads: int) -> str:
    """Identifies timings that stay valid: the same CPU (name, family and model: `taso_py.host`), core
    count, ORT version and threads."""
    import onnxruntime as ort

    text = f"{host.cpu().identity}|{os.cpu_count()}|{ort.__version__}|{threads}|weights out of L2"
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


class Measured:
    """Milliseconds per application, timed in ONNX Runtime with `threads` intra-op threads."""

    name = "measured"
    unit = "ms"

    def __init__(self, threads: int = 0, opset: int | None = None, path: Path | None = None) -> None:
        self.threads = threads or os.cpu_count() or 1
        self.opset = opset
        self.path = path or cache_root() / f"costs-{machine_key(self.threads)}-opset{opset or 'default'}.json"
        self.times = read_records(self.path, lambda doc: {str(k): float(v) for k, v in doc.items()})
        self.measured = 0  # applications timed in this process (the rest came from the cache)
        self.seconds = 0.0  # time spent measuring
        self._overhead: float | None = None
        self._by_call: dict[OpCall, float] = {}  # the same, without building the text key
        self._dirty = False

    def cost(self, call: OpCall) -> float:
        known = self._by_call.get(call)
        if known is not None:
            return known
        key = call.key
        if max(t.size for t in (*call.inputs, *call.outputs)) > HUGE:
            # only hopeless rewrites make these (`matmul(a, const_imm(n=25088))`): not worth gigabytes
            return Roofline().cost(call)
        if key not in self.times:
            started = time.perf_counter()
            n = copies(call, self.threads)
            self.times[key] = max((self._time(*_single(call, self.opset, n)) - self.overhead) / n, FLOOR_MS)
            self.seconds += time.perf_counter() - started
            self.measured += 1
            self._dirty = True
        self._by_call[call] = self.times[key]
        return self.times[key]

    def prepare(self, calls: Iterable[OpCall]) -> None:
        for call in calls:
            self.cost(call)
        self.save()

    def save(self) -> None:
        if self._dirty:
            write_json(self.path, self.times)
            self._dirty = False

    @property
    def overhead(self) -> float:
        """ORT's fixed cost per `run` call, without the cost of the node it runs: a chain of two tiny
        relus minus one gives the cost of a node, one minus that the cost of the call. It is
        subtracted from every operator's time, so it is the median of OVERHEAD_PAIRS such estimates
        after a warm-up: one estimate, taken first in a process, ranged 0.2-10 us against a steady
        4.4 us here, and moved every small operator's cost of a cache by as much."""
        if self._overhead is None:
            relus = [_relus(n, self.opset) for n in (1, 2)]
            self._time(*relus[0])
            pairs = [[self._time(*r) for r in relus] for _ in range(OVERHEAD_PAIRS)]
            self._overhead = max(statistics.median(2 * one - two for one, two in pairs), 0.0)
        return self._overhead

    def _time(self, model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> float:
        sess = session(model, self.threads)
        for _ in range(WARMUP):
            sess.run(None, feeds)
        samples: list[float] = []
        started = time.perf_counter()
        while len(samples) < MIN_RUNS or time.perf_counter() - started < MIN_SECONDS:
            t = time.perf_counter()
            sess.run(None, feeds)
            samples.append((time.perf_counter() - t) * 1e3)
        return statistics.median(samples)


def _relus(n: int, opset: int | None) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    g = Graph("relus")
    y = g.add_input("x", TensorType((1,), DType.FLOAT32))
    for _ in range(n):
        (y,) = g.add("relu", [y])
    g.set_outputs([y])
    return to_onnx(OnnxModel(g, _origin(opset))), {"x": np.ones(1, np.float32)}


def _origin(opset: int | None) -> OnnxOrigin:
    return OnnxOrigin() if opset is None else OnnxOrigin(opsets={"": opset})


def copies(call: OpCall, threads: int) -> int:
    """How many nodes of `call`, each with weights of its own, overflow twice over the L2 caches of
    the cores `threads` run on; one where the weights are few (see the module doc)."""
    weights = sum(t.size * t.dtype.numpy.itemsize for t, const in zip(call.inputs, call.constant) if const)
    if weights < COLD_BYTES:
        return 1
    l2 = (host.cache_bytes(2, "Unified") or 1 << 20) * threads
    return max(1, min(MAX_COPIES, -(-2 * l2 // weights)))


def _single(call: OpCall, opset: int | None, n: int = 1) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A model of `n` nodes of `call` (the inputs shared, each its own weights) and inputs for it."""
    g = Graph("op")
    rng = np.random.default_rng(0)
    outputs, feeds, inputs = [], {}, {}
    for copy in range(n):
        refs = []
        for i, (t, const) in enumerate(zip(call.inputs, call.constant)):
            if const:
                refs.append(g.add_weight(_values(rng, t), f"w{i}_{copy}"))
                continue
            if i not in inputs:
                feeds[f"x{i}"] = _values(rng, t)
                inputs[i] = g.add_input(f"x{i}", t)
            refs.append(inputs[i])
        outputs += g.add(call.op, refs, call.attrs)
    g.set_outputs(outputs)
    return to_onnx(OnnxModel(g, _origin(opset))), feeds


def _values(rng: np.random.Generator, t: TensorType) -> np.ndarray:
    """Values for an input of a one-node model: any will do for timing. Floats uniform in
    [-0.5, 0.5), drawn as float32, 3-4x faster than normal float64 values cast: a cold cache's
    Inception-v3 draws 426 inputs, 235 million elements in all (`taso optimize` on it: 20.2 s
    instead of 23.9 s). An array even for a scalar (shape ()): numpy's arithmetic on a 0-d draw gives
    a numpy scalar, which ORT refuses as a feed (two transformer exports failed so on a cold cache)."""
    if t.dtype.is_float:
        return np.asarray(rng.random(t.known_shape, dtype=np.float32) - np.float32(0.5), dtype=t.dtype.numpy)
    return np.asarray(rng.standard_normal(t.known_shape), dtype=t.dtype.numpy)
