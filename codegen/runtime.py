"""Running a compiled model directory: the manifest, the weights and one call into `model.so`.

Nothing here reads ONNX: the directory describes itself (see codegen.graph.compiler).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import mmap
import os
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from taso_py.codegen import isa
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.target import Target
from taso_py.errors import InputError, first_line
from taso_py.runtime import Latency, in_turn, random_arrays

MANIFEST_VERSION = 1
ORT_DEVICE = "cpu"  # where ONNX Runtime's IOBinding finds a region's buffers: this process's memory


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...] | None  # None: known only when ONNX Runtime computes it (graph.fallback)
    dtype: str | None

    @classmethod
    def of(cls, doc: dict[str, Any]) -> TensorSpec:
        return cls(doc["name"], None if doc["shape"] is None else tuple(doc["shape"]), doc["dtype"])

    def empty(self) -> np.ndarray | None:
        """The array a run writes this output into (None: ONNX Runtime hands over its own)."""
        return None if self.shape is None or self.dtype is None else np.empty(self.shape, self.dtype)


@dataclass(frozen=True)
class KernelTime:
    kernel: str
    group: str
    ms: float
    flops: int = 0  # what the kernel computes and the bytes it must move (from the manifest)
    bytes: int = 0

    @property
    def gflops(self) -> float:
        return self.flops / (self.ms * 1e6) if self.ms > 0 else 0.0

    @property
    def gbytes(self) -> float:
        return self.bytes / (self.ms * 1e6) if self.ms > 0 else 0.0


HUGE_PAGE = 2 << 20


def _aligned_empty(nbytes: int) -> np.ndarray:
    """`nbytes` of memory for the weights or the arena: page-aligned, and backed by 2 MiB pages
    where the kernel allows it (transparent huge pages in madvise mode): a model streams its
    weights once per run, and 4 KiB pages cost a TLB miss every 64 cache lines (VGG-19's first FC
    layer: 100,000 of them)."""
    if nbytes >= HUGE_PAGE:
        region = mmap.mmap(-1, nbytes + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        with contextlib.suppress(AttributeError, OSError):
            region.madvise(mmap.MADV_HUGEPAGE)
        raw = np.frombuffer(region, np.uint8)
        start = -raw.ctypes.data % HUGE_PAGE
        return raw[start:start + nbytes]
    raw = np.empty(nbytes + 64, np.uint8)
    start = -raw.ctypes.data % 64
    return raw[start:start + nbytes]


class CompiledModel:
    """A compiled model loaded from its directory; `run(feeds)` returns the outputs by name."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        manifest_path = self.directory / "manifest.json"
        if not manifest_path.is_file():
            raise InputError(f"{directory} is not a compiled model (no manifest.json); make one with taso compile")
        try:
            self.manifest: dict[str, Any] = json.loads(manifest_path.read_text())
        except json.JSONDecodeError as e:
            raise InputError(f"{manifest_path}: not valid JSON ({e.msg}, line {e.lineno})") from None
        if self.manifest.get("version") != MANIFEST_VERSION:
            raise InputError(f"{manifest_path}: manifest version {self.manifest.get('version')!r}, "
                             f"this taso-py reads version {MANIFEST_VERSION}; compile the model again")
        built_for = self.manifest.get("cpu", {}).get("isa")
        if built_for in isa.LEVELS and isa.LEVELS.index(built_for) > isa.LEVELS.index(isa.host().level):
            raise InputError(f"{directory} was compiled for {built_for} ({self.manifest['cpu'].get('model')}); "
                             f"this CPU ({isa.host().model}) has {isa.host().level}: compile the model again here")
        try:
            self.target = Target.parse(self.manifest["target"])
        except CodegenError as e:
            raise InputError(f"{manifest_path}: {e}") from None
        self.inputs = [TensorSpec.of(t) for t in self.manifest["inputs"]]
        self.outputs = [TensorSpec.of(t) for t in self.manifest["outputs"]]
        blob = (self.directory / self.manifest["weights"]).read_bytes()
        self.weights = _aligned_empty(max(len(blob), 1))
        self.weights[:len(blob)] = np.frombuffer(blob, np.uint8)
        try:
            self.arena = _aligned_empty(max(int(self.manifest["arena_bytes"]), 1))
        except (OSError, MemoryError):
            raise InputError(f"{directory}: its intermediates need {int(self.manifest['arena_bytes']) / 2**30:,.1f} "
                             "GiB, more memory than this process can have") from None
        try:
            self.lib = ctypes.CDLL(str((self.directory / self.manifest["library"]).resolve()))
        except OSError as e:
            raise CodegenError(f"cannot load {self.manifest['library']} from {directory}: {e}") from None
        self.bases = (self.weights.ctypes.data, self.arena.ctypes.data)  # addresses: numpy's .ctypes costs a us
        self.buffers = {b["key"]: b for b in self.manifest["buffers"]}
        self.fixed: dict[str, np.ndarray] = {}  # views of the weights and the arena by buffer key (`_view`)
        self.stats: list[Any] = []  # the accelerator's cycle counts of the last run, per offloaded layer
        self.entry = None
        if self.manifest.get("entry"):
            self.entry = self._function(self.manifest["entry"])
        # a model with regions run by ONNX Runtime (codegen.graph.fallback): C segments between them
        self.segments = [(self._function(seg["entry"]) if "entry" in seg else None, seg)
                         for seg in self.manifest.get("segments", [])]
        self.regions = {k: self._region_run(step)
                        for k, step in enumerate(self.manifest.get("steps") or []) if step["kind"] == "ort"}
        self.dynamic: dict[str, np.ndarray] = {}  # values of the last run that only ONNX Runtime shapes

    def _function(self, name: str) -> Any:
        """A run function of model.so (the whole model, or a segment between regions); a device's
        reports a status."""
        fn = getattr(self.lib, name)
        fn.restype = ctypes.c_int if self.target.device_memory else None
        fn.argtypes = [ctypes.POINTER(ctypes.c_void_p)] * 2 + [ctypes.c_void_p] * 2
        return fn

    def _call(self, fn: Any, in_ptrs: Any, out_ptrs: Any) -> None:
        status = fn(in_ptrs, out_ptrs, self.bases[0], self.bases[1])
        if status:  # the cuda target's run functions report CUDA errors
            describe = self.lib.taso_cuda_error_string
            describe.restype = ctypes.c_char_p
            raise CodegenError(f"{self.directory}: {describe(status).decode()}")

    def _inputs(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        arrays = []
        for spec in self.inputs:
            if spec.name not in feeds:
                names = ", ".join(s.name for s in self.inputs)
                raise InputError(f"missing input {spec.name!r} (the model takes {names})")
            a = np.asarray(feeds[spec.name], dtype=spec.dtype, order="C")  # ascontiguousarray makes 0-d 1-d
            if a.shape != spec.shape:
                raise InputError(f"input {spec.name!r} needs shape {spec.shape}, got {a.shape}")
            arrays.append(a)
        return arrays

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        arrays = self._inputs(feeds)
        outs = [s.empty() for s in self.outputs]
        in_ptrs = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        out_ptrs = (ctypes.c_void_p * max(len(outs), 1))(*[0 if o is None else o.ctypes.data for o in outs])
        if self.entry is not None:  # the whole model is one C call
            self._call(self.entry, in_ptrs, out_ptrs)
            return {s.name: o for s, o in zip(self.outputs, outs)}
        self.stats, self.dynamic = [], {}
        if self.segments:
            for fn, seg in self.segments:
                if fn is not None:
                    self._call(fn, in_ptrs, out_ptrs)
                else:
                    self._region(self.manifest["steps"][seg["step"]], arrays, outs)
        else:
            for _, call in self._calls(arrays, outs):
                call()
        for i, key in self.manifest.get("copies", {}).items():
            if self.buffers[key]["kind"] == "dynamic":
                outs[int(i)] = self.dynamic[key]
            else:
                outs[int(i)][...] = self._view(key, arrays, outs)
        return {s.name: o for s, o in zip(self.outputs, outs)}

    def _region_run(self, step: dict) -> RegionRun:
        """A region's session and IOBinding, with the arena's and the weights' buffers bound once
        (they never move; building the binding each run cost 25 us of a 33 us LSTM region)."""
        kernel = self.manifest["kernels"][step["kernel"]]
        run = RegionRun(_region_session(self.directory / step["model"]), step["model"])
        run.binding = run.session.io_binding()
        split = len(kernel["args"]) - kernel["writes"]
        reads, written = kernel["args"][:split], kernel["args"][split:]
        for key in reads:
            if self.buffers[key]["kind"] in ("arena", "weight"):
                a = self._view(key, [], [])
                run.binding.bind_input(key, ORT_DEVICE, 0, a.dtype, a.shape, a.ctypes.data)
            else:
                run.inputs.append(key)
        for key in written:
            if self.buffers[key]["kind"] == "arena":
                v = self._view(key, [], [])
                run.binding.bind_output(key, ORT_DEVICE, 0, v.dtype, v.shape, v.ctypes.data)
            else:
                run.outputs.append(key)
        run.order = [k for k in written if k not in run.outputs] + run.outputs  # the binding's output order
        return run

    def _region(self, step: dict, arrays: list[np.ndarray], outs: list[np.ndarray]) -> None:
        """Run a region in ONNX Runtime on the buffers in place: its inputs are read where kernels
        wrote them and its outputs written where kernels will read them (values of a shape only
        ORT knows are kept in `dynamic`)."""
        run = self.regions[step["kernel"]]
        binding = run.binding
        for key in run.inputs:
            a = self.dynamic[key] if self.buffers[key]["kind"] == "dynamic" else self._view(key, arrays, outs)
            binding.bind_input(key, ORT_DEVICE, 0, a.dtype, a.shape, a.ctypes.data)
        dynamic = []
        for key in run.outputs:
            if self.buffers[key]["kind"] == "dynamic":
                binding.bind_output(key, ORT_DEVICE)
                dynamic.append(key)
            else:
                v = self._view(key, arrays, outs)
                binding.bind_output(key, ORT_DEVICE, 0, v.dtype, v.shape, v.ctypes.data)
        try:
            run.session.run_with_iobinding(binding)
        except Exception as e:  # ORT raises its own exception types
            raise CodegenError(f"{self.directory}: ONNX Runtime failed on {run.model}: {first_line(e)}") from None
        if dynamic:
            values = binding.get_outputs()
            for key in dynamic:
                self.dynamic[key] = values[run.order.index(key)].numpy()

    def _view(self, key: str, arrays: list[np.ndarray], outs: list[np.ndarray]) -> np.ndarray:
        """The array a buffer key names during a run: an input, an output, or a slice of the weights or arena."""
        b = self.buffers[key]
        if b["kind"] == "input":
            return arrays[b["index"]]
        if b["kind"] == "output":
            return outs[b["index"]]
        view = self.fixed.get(key)
        if view is None:  # the weights and the arena never move: each slice is made once
            base = self.weights if b["kind"] == "weight" else self.arena
            nbytes = int(np.prod(b["shape"], dtype=np.int64)) * np.dtype(b["dtype"]).itemsize
            view = self.fixed[key] = base[b["offset"]:b["offset"] + nbytes].view(b["dtype"]).reshape(b["shape"])
        return view

    def _calls(self, arrays: list[np.ndarray], outs: list[np.ndarray]) -> list[tuple[dict, Callable[[], None]]]:
        """One callable per step of a run, in order: a kernel of model.so, or an accelerator layer."""
        kernels = self.manifest["kernels"]
        steps = self.manifest.get("steps") or [{"kind": "host", "kernel": k} for k in range(len(kernels))]
        calls = []
        for step in steps:
            k = kernels[step["kernel"]]
            if step["kind"] == "ort":
                calls.append((k, functools.partial(self._region, step, arrays, outs)))
            elif step["kind"] == "host":
                fn = getattr(self.lib, k["name"])
                fn.restype = None
                ptrs = [ctypes.c_void_p(self._view(a, arrays, outs).ctypes.data) for a in k["args"]]
                calls.append((k, functools.partial(fn, *ptrs)))
            else:
                calls.append((k, functools.partial(self._accel_layer, step, k, arrays, outs)))
        return calls

    def _accel_layer(self, step: dict, kernel: dict, arrays: list[np.ndarray], outs: list[np.ndarray]) -> None:
        """Quantize the input, run the layer on the simulated accelerator, dequantize (see codegen.graph.accel)."""
        from taso_py.codegen.backends.accel.quant import LayerAttrs, quantize, run_layer
        x = self._view(kernel["args"][0], arrays, outs)
        s_x = step["input_scale"]
        w = self._view(step["weights"], arrays, outs)
        s_w = self._view(step["scales"], arrays, outs)
        bias = self._view(step["bias"], arrays, outs) if "bias" in step else None
        out = self._view(kernel["args"][-1], arrays, outs)
        if step["op"] == "matmul":
            acc, stats = run_layer("matmul", quantize(x.reshape(-1, x.shape[-1]), s_x), w, bias,
                                   LayerAttrs())
            out[...] = (acc * (s_x * s_w)).reshape(out.shape)
        else:
            acc, stats = run_layer("conv2d", quantize(x, s_x), w, bias,
                                   LayerAttrs(stride=step["stride"], pad=step["pad"], relu=step["relu"]))
            out[...] = acc * (s_x * s_w).reshape(1, -1, 1, 1)
        self.stats.append(stats)

    def profile(self, feeds: Mapping[str, np.ndarray], repeat: int = 5) -> list[KernelTime]:
        """Each step of one run timed on its own (median of `repeat`), in run order."""
        arrays = self._inputs(feeds)
        outs = [s.empty() for s in self.outputs]
        self.dynamic = {}
        times = []
        for k, call in self._calls(arrays, outs):
            samples = []
            for _ in range(repeat):
                t = time.perf_counter()
                call()
                samples.append((time.perf_counter() - t) * 1e3)
            times.append(KernelTime(k["name"], k["group"], statistics.median(samples), k.get("flops", 0),
                                    k.get("bytes", 0)))
        return times

    def latency_ms(self, feeds: Mapping[str, np.ndarray], repeat: int = 10, min_seconds: float = 0.0) -> float:
        """Median wall time of one run (after three warm-up runs: the first runs of a fresh module
        are slower, while OpenMP starts its threads and pages are first touched)."""
        for _ in range(3):
            self.run(feeds)
        samples: list[float] = []
        started = time.perf_counter()
        while len(samples) < repeat or time.perf_counter() - started < min_seconds:
            t = time.perf_counter()
            self.run(feeds)
            samples.append((time.perf_counter() - t) * 1e3)
        return statistics.median(samples)


@dataclass
class RegionRun:
    """What running one region needs: its ORT session, and an IOBinding that holds the buffers that
    never move; `inputs` and `outputs` are bound on each run (the caller's arrays, values only ORT
    shapes), and `order` is the binding's order of outputs."""

    session: Any
    model: str
    binding: Any = None
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list)


def _region_session(path: Path) -> Any:
    """The ORT session of a region: spinning off (our thread pool runs between its calls), as
    many threads as the module's own pool."""
    from taso_py.ort import session
    return session(path, int(os.environ.get("TASO_NUM_THREADS") or 0))


def random_inputs(model: CompiledModel, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for the module and ONNX Runtime alike, drawn as `taso_py.runtime.random_arrays` draws."""
    return random_arrays([(s.name, s.shape, np.dtype(s.dtype)) for s in model.inputs], seed)


def side_by_side(original: CompiledModel, optimized: CompiledModel, runs: int = 10,
                 min_seconds: float = 1.0) -> Latency:
    """Two compiled modules of one model timed in turn on the same inputs (three warm-up runs each,
    then in turn, `taso_py.runtime.in_turn`: medians of at least `runs` each and `min_seconds`)."""
    feeds = random_inputs(original)
    for model in (original, optimized):
        for _ in range(3):
            model.run(feeds)
    return in_turn(lambda: original.run(feeds), lambda: optimized.run(feeds), runs, min_seconds, os.cpu_count() or 1)
