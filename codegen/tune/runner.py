"""Timing candidates in a child process, so a bad one cannot take the tuner down with it.

A candidate that writes out of bounds crashes its process, and one that runs for minutes
cannot be stopped inside it; in a child, the first is recorded as a crash and the second is
killed at the time limit, and the next candidate gets a fresh child. The child is a plain
`python -c '...serve()'` speaking pickles over its stdin and stdout (not
multiprocessing, whose spawn re-imports the caller's main script). It also keeps the
kernels' OpenMP threads out of the tuner's own process.
"""

from __future__ import annotations

import ctypes
import math
import os
import pickle
import select
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import taso_py

MIN_SAMPLE_S = 1e-3


@dataclass
class Measurement:
    seconds: float | None  # median of the timed runs; None when the candidate failed
    error: str | None = None
    outputs: list[np.ndarray] = field(default_factory=list)


class Runner:
    """A child process that loads compiled kernels and times them on the arrays it is sent."""

    def __init__(self, startup_s: float = 30.0) -> None:
        self.startup_s = startup_s  # what a child may take to start on a loaded machine, beyond the run limit
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def run(self, library: Path, name: str, arrays: list[np.ndarray], outputs: list[int], repeat: int,
            timeout: float) -> Measurement:
        """Call `name` from `library` once, then up to `repeat` more times within `timeout` seconds a run;
        the outputs (arrays at positions `outputs`) are those of the first run."""
        if self.proc is None or self.proc.poll() is not None:
            self.close()
            # the folder this process imported taso_py from (a checkout under pytest, or site-packages)
            root = str(Path(taso_py.__file__).resolve().parents[1])
            path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
            serve = "from taso_py.codegen.tune.runner import serve; serve()"
            self.proc = subprocess.Popen([sys.executable, "-c", serve],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         env={**os.environ, "PYTHONPATH": path})
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            pickle.dump((str(library), name, arrays, outputs, repeat, timeout), self.proc.stdin)
            self.proc.stdin.flush()
        except BrokenPipeError:
            return self._lost("crashed before it ran")
        limit = timeout * (repeat + 1) + self.startup_s
        ready, _, _ = select.select([self.proc.stdout], [], [], limit)
        if not ready:
            self.close()
            return Measurement(None, f"timed out: killed after {limit:.3g} s")
        try:
            seconds, error, outs = pickle.load(self.proc.stdout)
        except (EOFError, pickle.UnpicklingError):
            return self._lost("crashed")
        return Measurement(seconds, error, outs)

    def _lost(self, what: str) -> Measurement:
        assert self.proc is not None
        code = self.proc.wait()
        self.proc = None
        return Measurement(None, f"{what} (exit status {code})")

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    pipe.close()
            self.proc = None


def _time(library: str, name: str, arrays: list[np.ndarray], outputs: list[int], repeat: int,
          timeout: float) -> tuple[float | None, str | None, list[np.ndarray]]:
    fn = getattr(ctypes.CDLL(library), name)
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p] * len(arrays)
    ptrs = [a.ctypes.data for a in arrays]
    start = time.perf_counter()
    fn(*ptrs)
    first = time.perf_counter() - start
    if first > timeout:
        return None, f"timed out: one run took {first:.3g} s (limit {timeout:g} s)", []
    outs = [arrays[k].copy() for k in outputs]
    start = time.perf_counter()
    fn(*ptrs)
    once = time.perf_counter() - start
    # a sample of `number` calls lasts at least MIN_SAMPLE_S: a microsecond kernel timed call by call
    # would be measured mostly as the clock's and the call's own overhead
    number = max(1, min(10_000, math.ceil(MIN_SAMPLE_S / max(once, 1e-9))))
    samples = []
    for _ in range(max(1, min(repeat, int(timeout / max(once * number, 1e-9))))):
        start = time.perf_counter()
        for _ in range(number):
            fn(*ptrs)
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples), None, outs


def serve() -> None:
    """The child's loop: a job from stdin, its measurement to stdout, until stdin closes."""
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing else may write to the reply pipe
    while True:
        try:
            job = pickle.load(requests)
        except EOFError:
            return
        pickle.dump(_time(*job), replies)
        replies.flush()
