"""Running a compiled model directory: the manifest, the weights and one call into `model.so`.

Nothing here reads ONNX: the directory describes itself (see codegen.graph.compiler).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import mmap
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from codegen import isa
from codegen.errors import CodegenError
from taso_py.errors import InputError
from taso_py.runtime import Latency, random_arrays

MANIFEST_VERSION = 1


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]
    dtype: str


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
        self.inputs = [TensorSpec(t["name"], tuple(t["shape"]), t["dtype"]) for t in self.manifest["inputs"]]
        self.outputs = [TensorSpec(t["name"], tuple(t["shape"]), t["dtype"]) for t in self.manifest["outputs"]]
        blob = (self.directory / self.manifest["weights"]).read_bytes()
        self.weights = _aligned_empty(max(len(blob), 1))
        self.weights[:len(blob)] = np.frombuffer(blob, np.uint8)
        self.arena = _aligned_empty(max(int(self.manifest["arena_bytes"]), 1))
        try:
            self.lib = ctypes.CDLL(str((self.directory / self.manifest["library"]).resolve()))
        except OSError as e:
            raise CodegenError(f"cannot load {self.manifest['library']} from {directory}: {e}") from None
        self.buffers = {b["key"]: b for b in self.manifest["buffers"]}
        self.stats: list[Any] = []  # the accelerator's cycle counts of the last run, per offloaded layer
        self.entry = None
        if self.manifest.get("entry"):
            self.entry = getattr(self.lib, self.manifest["entry"])
            self.entry.restype = ctypes.c_int if self.manifest.get("target") == "cuda" else None
            self.entry.argtypes = [ctypes.POINTER(ctypes.c_void_p)] * 2 + [ctypes.c_void_p] * 2

    def _inputs(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        arrays = []
        for spec in self.inputs:
            if spec.name not in feeds:
                names = ", ".join(s.name for s in self.inputs)
                raise InputError(f"missing input {spec.name!r} (the model takes {names})")
            a = np.ascontiguousarray(feeds[spec.name], dtype=spec.dtype)
            if a.shape != spec.shape:
                raise InputError(f"input {spec.name!r} needs shape {spec.shape}, got {a.shape}")
            arrays.append(a)
        return arrays

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        arrays = self._inputs(feeds)
        outs = {s.name: np.empty(s.shape, s.dtype) for s in self.outputs}
        if self.entry is not None:  # the whole model is one C call
            in_ptrs = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
            out_ptrs = (ctypes.c_void_p * max(len(outs), 1))(*[o.ctypes.data for o in outs.values()])
            status = self.entry(in_ptrs, out_ptrs, self.weights.ctypes.data, self.arena.ctypes.data)
            if status:  # the cuda target's run function reports CUDA errors
                describe = self.lib.taso_cuda_error_string
                describe.restype = ctypes.c_char_p
                raise CodegenError(f"{self.directory}: {describe(status).decode()}")
            return outs
        self.stats = []
        for _, call in self._calls(arrays, list(outs.values())):
            call()
        for i, key in self.manifest.get("copies", {}).items():
            list(outs.values())[int(i)][...] = self._view(key, arrays, list(outs.values()))
        return outs

    def _view(self, key: str, arrays: list[np.ndarray], outs: list[np.ndarray]) -> np.ndarray:
        """The array a buffer key names during a run: an input, an output, or a slice of the weights or arena."""
        b = self.buffers[key]
        if b["kind"] == "input":
            return arrays[b["index"]]
        if b["kind"] == "output":
            return outs[b["index"]]
        base = self.weights if b["kind"] == "weight" else self.arena
        nbytes = int(np.prod(b["shape"], dtype=np.int64)) * np.dtype(b["dtype"]).itemsize
        return base[b["offset"]:b["offset"] + nbytes].view(b["dtype"]).reshape(b["shape"])

    def _calls(self, arrays: list[np.ndarray], outs: list[np.ndarray]) -> list[tuple[dict, Callable[[], None]]]:
        """One callable per step of a run, in order: a kernel of model.so, or an accelerator layer."""
        kernels = self.manifest["kernels"]
        steps = self.manifest.get("steps") or [{"kind": "host", "kernel": k} for k in range(len(kernels))]
        calls = []
        for step in steps:
            k = kernels[step["kernel"]]
            if step["kind"] == "host":
                fn = getattr(self.lib, k["name"])
                fn.restype = None
                ptrs = [ctypes.c_void_p(self._view(a, arrays, outs).ctypes.data) for a in k["args"]]
                calls.append((k, functools.partial(fn, *ptrs)))
            else:
                calls.append((k, functools.partial(self._accel_layer, step, k, arrays, outs)))
        return calls

    def _accel_layer(self, step: dict, kernel: dict, arrays: list[np.ndarray], outs: list[np.ndarray]) -> None:
        """Quantize the input, run the layer on the simulated accelerator, dequantize (see codegen.graph.accel)."""
        from codegen.backends.accel.quant import LayerAttrs, quantize, run_layer
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
        outs = [np.empty(s.shape, s.dtype) for s in self.outputs]
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


def random_inputs(model: CompiledModel, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs, the same values taso_py.runtime.random_feeds gives ONNX Runtime for the check."""
    return random_arrays([(s.name, s.shape, np.dtype(s.dtype)) for s in model.inputs], seed)


def side_by_side(original: CompiledModel, optimized: CompiledModel, runs: int = 10,
                 min_seconds: float = 1.0) -> Latency:
    """Two compiled modules of one model timed in turn on the same inputs (three warm-up runs each,
    then interleaved, medians of at least `runs` each and `min_seconds`)."""
    feeds = random_inputs(original)
    for model in (original, optimized):
        for _ in range(3):
            model.run(feeds)
    samples: list[list[float]] = [[], []]
    began = time.perf_counter()
    while len(samples[0]) < runs or time.perf_counter() - began < min_seconds:
        for model, out in zip((original, optimized), samples):
            t = time.perf_counter()
            model.run(feeds)
            out.append((time.perf_counter() - t) * 1e3)
    import os
    return Latency(statistics.median(samples[0]), statistics.median(samples[1]), len(samples[0]), os.cpu_count() or 1)
