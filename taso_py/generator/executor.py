"""Where shards run: one interface, local processes by default, a Dask cluster on request.

A task is a picklable module-level function and a list of argument tuples; `map` yields
`(index, result)` as tasks finish, so the caller can show progress and checkpoint, and sorts
by index when it needs a deterministic order. The same shard functions run everywhere, so a
cluster gives the same library as a laptop.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol
from urllib.parse import urlsplit

from taso_py.errors import InputError


class Executor(Protocol):
    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple]) -> Iterator[tuple[int, Any]]: ...
    def close(self) -> None: ...


def process_pool(workers: int) -> cf.ProcessPoolExecutor:
    """A pool of `spawn`ed workers: a forked one inherits the parent's thread pools (egglog's, ORT's,
    z3's) without their threads and can hang on them, as a worker freeing an inherited e-graph did."""
    return cf.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))


class LocalExecutor:
    """`workers` processes (1: in this process, which keeps tracebacks and profiles simple)."""

    def __init__(self, workers: int | None = None) -> None:
        self.workers = workers or os.cpu_count() or 1
        self._pool: cf.ProcessPoolExecutor | None = None

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        if self.workers == 1:
            for i, args in enumerate(tasks):
                yield i, fn(*args)
            return
        if self._pool is None:
            self._pool = process_pool(self.workers)
        futures = {self._pool.submit(fn, *args): i for i, args in enumerate(tasks)}
        for future in cf.as_completed(futures):
            yield futures[future], future.result()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None


def _refuse_unreachable(address: str) -> None:
    """Fail at once when nothing listens at a `tcp://` address: Dask's client retries for its whole timeout."""
    parts = urlsplit(address)
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number: Client says what is wrong
        return
    if parts.scheme != "tcp" or host is None or port is None:
        return
    try:
        socket.create_connection((host, port), timeout=5).close()
    except OSError as e:
        raise InputError(f"cannot reach the Dask scheduler at {address}: {e.strerror or e}") from None


class DaskExecutor:
    """The same tasks on an existing Dask distributed scheduler (`tcp://host:8786`)."""

    def __init__(self, address: str) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise InputError("--scheduler needs Dask distributed: pip install 'taso-py[dask]'") from None
        _refuse_unreachable(address)
        try:
            self._client = Client(address, timeout="10s")
        except (OSError, ValueError, TypeError) as e:  # unreachable, or not an address at all
            raise InputError(f"cannot reach the Dask scheduler at {address}: {e}") from None

    def map(self, fn: Callable[..., Any], tasks: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        from distributed import as_completed

        futures = [self._client.submit(fn, *args, pure=False) for args in tasks]
        index = {f.key: i for i, f in enumerate(futures)}
        for future in as_completed(futures):
            yield index[future.key], future.result()

    def close(self) -> None:
        self._client.close()


def make_executor(workers: int | None = None, scheduler: str | None = None) -> Executor:
    return DaskExecutor(scheduler) if scheduler else LocalExecutor(workers)
