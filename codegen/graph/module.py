"""The compiled module and its directory: the arena's lifetimes, the weights blob, the run
function (C or CUDA) that calls every kernel in order, the manifest, and the atomic write.

The directory holds `model.so`, its source (`model.c` or `model.cu`), the lowered loops of each
kernel (`kernels.ir`), `weights.bin`, `manifest.json` (kernels, buffers, inputs and outputs) and
`model.onnx` (the compiled graph, only for `taso run --check` to compare against ONNX Runtime).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from taso_py.codegen import isa
from taso_py.codegen.errors import CodegenError
from taso_py.codegen.graph.kernels import Buffer, Kernel
from taso_py.codegen.graph.memory import Lifetime
from taso_py.codegen.runtime import MANIFEST_VERSION
from taso_py.graph.ir import Graph, Ref


def lifetimes(kernels: list[Kernel], buffers: dict[str, Buffer]) -> list[Lifetime]:
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for k, kernel in enumerate(kernels):
        for key in kernel.writes + kernel.workspace:
            first.setdefault(key, k)
        for key in kernel.reads + kernel.workspace:
            last[key] = k
    return [Lifetime(key, nbytes(b), first[key], last.get(key, first[key]))
            for key, b in buffers.items() if b.kind == "arena"]


def weight_blob(values: dict[str, np.ndarray], buffers: dict[str, Buffer]) -> bytes:
    """The weights kernels read, each 64-byte aligned; their offsets go to their buffers."""
    blob = bytearray()
    for key, b in buffers.items():
        if b.kind != "weight":
            continue
        blob += b"\0" * (-len(blob) % 64)
        b.offset = len(blob)
        blob += np.ascontiguousarray(values[key], dtype=b.dtype).tobytes()
    return bytes(blob)


def cuda_run_functions(order: list[Kernel], buffers: dict[str, Buffer], copies: dict[int, str], arena: int,
                       weight_bytes: int, out_bytes: list[int], segments: list[dict[str, Any]] | None = None) -> str:
    """The CUDA module's entry points. Weights, inputs, outputs and the arena live on the device,
    allocated on the first call (the arena at the same offsets as the runtime's host arena), and
    each entry returns 0 or a status (see taso_cuda_error_string). Without `segments` the whole
    model is `taso_model_run`: inputs in, every launch, outputs out. With them (regions ONNX
    Runtime runs on the host between runs of kernels, graph.fallback) each run of kernels is its
    segment's entry: it uploads what the host wrote since the device last had it (an input, a
    region's output), launches, and downloads what the host reads later (a graph output, a
    region's input, an output copied from it)."""
    ins = sorted((b for b in buffers.values() if b.kind == "input"), key=lambda b: b.index)
    # indexed by the graph input's position: inputs no kernel reads leave holes, not a shorter array
    in_slots = max((b.index for b in ins), default=0) + 1
    lines = ["", "static char* d_weights = 0; static char* d_arena = 0; static int d_ready = 0;",
             f"static void* d_in[{in_slots}]; static void* d_out[{max(len(out_bytes), 1)}];",
             "static int taso_cuda_setup(const char* weights) {",
             "  int devices = 0; cudaError_t e;",
             "  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return -1;",
             "  if (d_ready) return 0;",
             f"  if ((e = cudaMalloc((void**)&d_weights, {max(weight_bytes, 1)}))) return e;",
             f"  if ((e = cudaMemcpy(d_weights, weights, {weight_bytes}, cudaMemcpyHostToDevice))) return e;",
             f"  if ((e = cudaMalloc((void**)&d_arena, {max(arena, 1)}))) return e;"]
    lines += [f"  if ((e = cudaMalloc(&d_in[{b.index}], {nbytes(b)}))) return e;" for b in ins]
    lines += [f"  if ((e = cudaMalloc(&d_out[{i}], {n}))) return e;" for i, n in enumerate(out_bytes) if n]
    lines += ["  d_ready = 1;", "  return 0;", "}"]
    if segments is None:
        uploads = [b.key for b in ins]
        return "\n".join(lines) + _cuda_entry("taso_model_run", order, buffers, uploads, [], copies, out_bytes)
    for seg, (uploads, downloads) in zip([s for s in segments if "entry" in s], transfers(order, segments, buffers,
                                                                                          copies)):
        lines.append(_cuda_entry(seg["entry"], [order[k] for k in seg["kernels"]], buffers, uploads, downloads,
                                 {}, []))
    return "\n".join(lines) + "\n"


def transfers(order: list[Kernel], segments: list[dict[str, Any]], buffers: dict[str, Buffer],
              copies: dict[int, str]) -> list[tuple[list[str], list[str]]]:
    """For each segment of kernels (in order): the buffers it uploads before its launches (read by
    its kernels, last written on the host) and downloads after them (written by its kernels, read
    on the host later: by a region, as a graph output, or copied to one)."""
    host_only = {key for key, b in buffers.items() if b.kind == "input"}  # the device has no copy yet
    region_reads = [set(order[s["step"]].reads) if "step" in s else set() for s in segments]
    result = []
    for k, seg in enumerate(segments):
        if "step" in seg:
            host_only.update(order[seg["step"]].writes)
            continue
        kernels = [order[i] for i in seg["kernels"]]
        uploads = [key for key in dict.fromkeys(key for kn in kernels for key in kn.reads) if key in host_only]
        written = list(dict.fromkeys(key for kn in kernels for key in kn.writes))
        host_reads = set(copies.values()).union(*region_reads[k + 1:])
        downloads = [key for key in written if buffers[key].kind == "output" or key in host_reads]
        host_only.difference_update(uploads + written)
        result.append((uploads, downloads))
    return result


def _cuda_entry(name: str, kernels: list[Kernel], buffers: dict[str, Buffer], uploads: list[str],
                downloads: list[str], copies: dict[int, str], out_bytes: list[int]) -> str:
    """One entry point: set up, upload, launch `kernels`, copy outputs no kernel writes (`copies`)
    on the device, wait, download (`downloads`, then every output of `out_bytes`' sizes)."""
    def device(key: str) -> str:
        return _pointer(buffers[key], "d_in", "d_out", "d_weights", "d_arena")

    def host(key: str) -> str:
        return _pointer(buffers[key], "inputs", "outputs", "weights", "arena")

    lines = ["", f'extern "C" int {name}(void** inputs, void** outputs, char* weights, char* arena) {{',
             "  int status; cudaError_t e;",
             "  if ((status = taso_cuda_setup(weights))) return status;"]
    lines += [f"  if ((e = cudaMemcpy({device(key)}, {host(key)}, {nbytes(buffers[key])}, cudaMemcpyHostToDevice))) "
              "return e;" for key in uploads]
    for k in kernels:
        lines.append(f"  if ((status = {k.name}_launch({', '.join(device(a) for a in k.args)}))) return status;")
    for i, key in copies.items():
        lines.append(f"  if ((e = cudaMemcpy(d_out[{i}], {device(key)}, {nbytes(buffers[key])}, "
                     "cudaMemcpyDeviceToDevice))) return e;")
    lines.append("  if ((e = cudaDeviceSynchronize())) return e;")
    lines += [f"  if ((e = cudaMemcpy({host(key)}, {device(key)}, {nbytes(buffers[key])}, cudaMemcpyDeviceToHost))) "
              "return e;" for key in downloads]
    lines += [f"  if ((e = cudaMemcpy(outputs[{i}], d_out[{i}], {n}, cudaMemcpyDeviceToHost))) return e;"
              for i, n in enumerate(out_bytes)]
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


def nbytes(b: Buffer) -> int:
    return int(np.prod(b.shape, dtype=np.int64)) * np.dtype(b.dtype).itemsize


def _pointer(b: Buffer, inputs: str, outputs: str, weights: str, arena: str) -> str:
    """A C expression for buffer `b`'s address, given the names of the run function's bases."""
    from taso_py.codegen.backends.c.emit import C_TYPES
    base = {"input": f"{inputs}[{b.index}]", "output": f"{outputs}[{b.index}]",
            "weight": f"({weights} + {b.offset})", "arena": f"({arena} + {b.offset})"}[b.kind]
    return f"({C_TYPES.get(b.dtype, 'char')}*)({base})"  # a type C has no name for is only ever copied


def c_run_function(kernels: list[Kernel], buffers: dict[str, Buffer], copies: dict[int, str],
                   name: str = "taso_model_run") -> str:
    """A C function calling `kernels` in order (the whole model, or a segment between regions)."""
    def ptr(key: str) -> str:
        return _pointer(buffers[key], "inputs", "outputs", "weights", "arena")

    lines = ["", f"void {name}(void** inputs, void** outputs, char* weights, char* arena) {{"]
    for k in kernels:
        lines.append(f"  {k.name}({', '.join(ptr(a) for a in k.args)});")
    for i, key in copies.items():  # outputs that no kernel writes: an input, a weight, a repeat
        lines.append(f"  memcpy(outputs[{i}], {ptr(key)}, {nbytes(buffers[key])});")
    lines.append("}")
    return "\n".join(lines) + "\n"


def region_steps(order: list[Kernel], regions: dict[str, Any]) -> list[dict[str, Any]]:
    """Every step of a run for the runtime: a kernel of model.so, or a region ONNX Runtime runs
    from `<name>.onnx` (its tensors are named as the buffers in NCHW it reads and writes)."""
    return [ort_step(k, kernel) if kernel.name in regions else {"kind": "host", "kernel": k}
            for k, kernel in enumerate(order)]


def segments_of(order: list[Kernel], regions: dict[str, Any]) -> list[dict[str, Any]]:
    """A run cut at the regions ONNX Runtime runs: `{"step": k}` for the region that is the k-th step,
    `{"entry": name, "kernels": [k, ...]}` for each run of kernels between them (one function of model.so)."""
    segments: list[dict[str, Any]] = []
    for k, kernel in enumerate(order):
        if kernel.name in regions:
            segments.append({"step": k})
        elif not segments or "entry" not in segments[-1]:
            segments.append({"entry": f"taso_seg{len(segments)}", "kernels": [k]})
        else:
            segments[-1]["kernels"].append(k)
    return segments


def ort_step(k: int, kernel: Kernel) -> dict[str, Any]:
    """The runtime's step for the region `kernel`, the k-th of a run."""
    return {"kind": "ort", "kernel": k, "model": f"{kernel.name}.onnx"}


# ---- the directory --------------------------------------------------------------------------

def manifest_of(g: Graph, target: str, kernels: list[Kernel], buffers: dict[str, Buffer], arena: int,
                stats: dict[str, int]) -> dict[str, Any]:
    """The manifest; `target` is the target's name (read back with `codegen.target.Target.parse`)."""
    def tensor(ref: Ref) -> dict[str, Any]:
        t = g.type(ref)
        return {"name": g.name_of(ref), "shape": None if t.shape is None else list(t.shape),
                "dtype": t.dtype.value if t.dtype else None}

    return {
        "format": "taso-py compiled model", "version": MANIFEST_VERSION, "target": target,
        "cpu": {"model": isa.host().model, "isa": isa.host().level},
        "entry": "taso_model_run", "library": "model.so", "weights": "weights.bin", "arena_bytes": arena,
        "inputs": [tensor(n.outputs[0]) for n in g.inputs],
        "outputs": [dict(tensor(r), name=name) for r, name in zip(g.outputs, g.output_names)],
        "kernels": [{"name": k.name, "group": k.group, "args": k.args, "writes": len(k.writes),
                     "workload": k.workload, "flops": k.flops, "bytes": k.bytes} for k in kernels],
        "buffers": [{"key": b.key, "shape": list(b.shape), "dtype": b.dtype, "kind": b.kind, "offset": b.offset,
                     "index": b.index} for b in buffers.values()],
        "stats": stats,
    }


def check_destination(out_dir: Path) -> None:
    """A compile may only replace an empty directory or an earlier compiled model."""
    if out_dir.exists() and (not out_dir.is_dir() or (any(out_dir.iterdir())
                                                      and not (out_dir / "manifest.json").exists())):
        raise CodegenError(f"{out_dir} exists and is not a taso-py compiled model; choose another -o")


def publish(stage: Path, out_dir: Path) -> None:
    """Swap the built directory `stage` (on the same file system) in as `out_dir`."""
    check_destination(out_dir)
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old-{os.getpid()}")
        os.replace(out_dir, old)
        os.replace(stage, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(stage, out_dir)


def write_directory(out_dir: Path, texts: dict[str, str], source: str, build: Callable[[str, Path], Path],
                    weights: bytes, manifest: dict[str, Any], write_onnx: Callable[[Path], None] | None,
                    write_more: Callable[[Path], None] | None = None) -> None:
    """Build everything in a staging directory beside `out_dir`, then swap it in: `texts[source]`
    is built into `model.so` by the target's `build`; `write_more` writes further files into the
    staging directory (the regions ONNX Runtime runs)."""
    out_dir = Path(out_dir)
    check_destination(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        for name, text in texts.items():
            (stage / name).write_text(text)
        build(texts[source], stage / "model.so")
        (stage / "weights.bin").write_bytes(weights)
        if write_more is not None:
            write_more(stage)
        if write_onnx is not None:
            write_onnx(stage / "model.onnx")
        (stage / "manifest.json").write_text(json.dumps(manifest, indent=1))
        publish(stage, out_dir)
    finally:
        if stage.exists():
            shutil.rmtree(stage, ignore_errors=True)
