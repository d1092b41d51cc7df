"""`taso generate-rules`: enumerate → fingerprint → pair → test → prune → verify → generalize → prune.

Every stage that costs real time is a list of independent tasks run through an `Executor`, so
local processes and a Dask cluster produce the same library (results are put back in task
order before anything depends on their order). Verification and generalization results are
appended to a checkpoint file as they arrive; `--resume` reads it and skips what is done.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from taso_py import __version__, ops
from taso_py.generator import candidates as cand
from taso_py.generator import implied
from taso_py.generator.enumerate import Graph, enumerate_shard, shard_count, trivial_graphs
from taso_py.generator.executor import Executor
from taso_py.generator.generalize import attempts, generalize
from taso_py.generator.world import LIBRARY_OPS, WORLDS, World
from taso_py.library.proof import ProofRecord, Status
from taso_py.library.store import Entry, Library
from taso_py.library.syntax import format_rule, parse_rule
from taso_py.library.terms import Rule
from taso_py.verifier.prover import prove

Progress = Callable[[str, int], Callable[[int], None]]  # (stage, total) -> advance(n)


@dataclass
class Settings:
    max_ops: int = 3
    ops: tuple[str, ...] = LIBRARY_OPS
    seed: int = 0
    timeout: float = 10.0  # per proof

    def worlds(self) -> list[World]:
        """The default worlds restricted to the chosen operators (a world left with none, or with none of
        those it exists for, is dropped)."""
        out = []
        for w in WORLDS:
            chosen = tuple(o for o in w.ops if o in self.ops)
            if chosen and (not w.purpose or set(w.purpose) & set(chosen)):
                out.append(replace(w, ops=chosen))
        return out


@dataclass
class Report:
    """Counts after every stage and seconds per stage, in the order they ran."""

    counts: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)


# ---- tasks (module level: they travel to worker processes and cluster workers) ---------------

def task_enumerate(world: World, root: int, max_ops: int, seed: int) -> list[Graph]:
    return enumerate_shard(world, root, max_ops, seed)


def task_canonical(pairs: list[tuple[Graph, Graph]], worlds: dict[str, World]
                   ) -> list[tuple[str, str, dict[str, list[int]], int]]:
    """The canonical form of each pair's rule: (text, world, shapes of its variables, size)."""
    out = []
    for g, rep in pairs:
        renamed, text, names = cand.canonical(cand.rule_of(g, rep))
        shapes = {names[i.name]: list(i.shape) for i in worlds[g.world].inputs if i.name in names}
        out.append((text, g.world, shapes, cand.size(renamed)))
    return out


def task_prune(texts: list[tuple[str, dict[str, list[int]]]], seed: int) -> list[str]:
    """Syntactic pruning of each candidate (TASO's common subgraph, a smaller rule under a common
    context, a product of two rules), then the second numeric test: the stage that drops it, or "kept"."""
    out = []
    for text, shapes in texts:
        rule = parse_rule(text)
        out.append("common-subgraph" if cand.has_common_subgraph(rule)
                   else "context" if cand.in_context(rule, shapes, seed)
                   else "product" if cand.is_product(rule)
                   else "second-test" if not cand.holds(rule, shapes, seed)
                   else "kept")
    return out


def task_prove(texts: list[str], timeout: float, seed: int) -> list[dict[str, Any]]:
    return [prove(parse_rule(t), timeout, seed=seed).to_json() for t in texts]


def task_generalize(texts: list[str], timeout: float, seed: int) -> list[tuple[str, dict[str, Any]] | None]:
    """The most general PROVED parametric form of each rule, with its proof; None if none is."""
    return [_most_general(parse_rule(t), timeout, seed) for t in texts]


def _most_general(rule: Rule, timeout: float, seed: int) -> tuple[str, dict[str, Any]] | None:
    """Every slot at once if that proves; else the union of the attributes that prove one by one,
    else the largest of those."""
    tries = attempts(rule)
    proved: list[tuple[list, Any]] = []
    for k, chosen in enumerate(tries):
        result = prove(generalize(rule, chosen), timeout, seed=seed)
        if result.status is Status.PROVED:
            if k == 0:
                return format_rule(generalize(rule, chosen)), result.to_json()
            proved.append((chosen, result))
    if not proved:
        return None
    if len(proved) > 1:
        union = [s for chosen, _ in proved for s in chosen]
        result = prove(generalize(rule, union), timeout, seed=seed)
        if result.status is Status.PROVED:
            return format_rule(generalize(rule, union)), result.to_json()
    chosen, result = max(proved, key=lambda p: len(p[0]))
    return format_rule(generalize(rule, chosen)), result.to_json()


# ---- checkpoint ------------------------------------------------------------------------------

class Checkpoint:
    """Append-only JSON lines `{"stage", "key", "value"}`; with resume, earlier lines are reused."""

    def __init__(self, path: Path, resume: bool) -> None:
        self.path = path
        self.done: dict[tuple[str, str], Any] = {}
        if resume and path.exists():
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                    self.done[(row["stage"], row["key"])] = row["value"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue  # a line cut short by an interruption
        elif path.exists():
            path.unlink()
        self._file = path.open("a")

    def put(self, stage: str, key: str, value: Any) -> None:
        self.done[(stage, key)] = value
        self._file.write(json.dumps({"stage": stage, "key": key, "value": value}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


# ---- the pipeline ----------------------------------------------------------------------------

def _run(executor: Executor, fn: Callable, tasks: Sequence[tuple], advance: Callable[[int], None],
         weight: Callable[[tuple], int] = lambda _t: 1) -> list[Any]:
    results: list[Any] = [None] * len(tasks)
    for i, result in executor.map(fn, tasks):
        results[i] = result
        advance(weight(tasks[i]))
    return results


def _chunks(items: Sequence[Any], size: int) -> list[list[Any]]:
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def generate(settings: Settings, executor: Executor, checkpoint: Checkpoint, progress: Progress) -> Library:
    report = Report()
    worlds = settings.worlds()
    by_name = {w.name: w for w in worlds}

    def stage(name: str, started: float, count: int) -> None:
        report.counts[name] = count
        report.seconds[name] = round(time.perf_counter() - started, 2)

    # 1. enumerate and fingerprint
    t = time.perf_counter()
    shards = [(w, r, settings.max_ops + w.extra_ops, settings.seed)
              for w in worlds for r in range(shard_count(w, settings.seed))]
    advance = progress("enumerate", len(shards))
    graphs: list[Graph] = [g for w in worlds for g in trivial_graphs(w, settings.seed)]
    for found in _run(executor, task_enumerate, shards, advance):
        graphs += found
    stage("graphs", t, len(graphs))

    # 2. pair graphs with equal fingerprints; one canonical text per rule up to renaming
    t = time.perf_counter()
    pairs = list(cand.pair(graphs))
    report.counts["pairs"] = len(pairs)
    del graphs
    advance = progress("canonical", len(pairs))
    unique: dict[str, tuple[str, dict, int]] = {}
    for found in _run(executor, task_canonical, [(c, by_name) for c in _chunks(pairs, 500)], advance,
                      lambda task: len(task[0])):
        for text, world, shapes, size in found:
            unique.setdefault(text, (world, shapes, size))
    del pairs
    stage("renaming", t, len(unique))

    # 3. syntactic pruning, then a second numeric test (float64, the numpy semantics) of what is left
    t = time.perf_counter()
    texts = list(unique)
    advance = progress("prune", len(texts))
    verdicts = [v for vs in _run(executor, task_prune,
                                 [([(k, unique[k][1]) for k in c], settings.seed + 1) for c in _chunks(texts, 1000)],
                                 advance, lambda task: len(task[0])) for v in vs]
    left = len(texts)
    for name, verdict in (("common-subgraph", "common-subgraph"), ("context", "context"), ("products", "product")):
        left -= sum(v == verdict for v in verdicts)
        report.counts[name] = left
    kept = {k: unique[k] for k, v in zip(texts, verdicts) if v == "kept"}
    del unique
    stage("candidates", t, len(kept))

    # 4. verify and generalize in waves of growing size: a candidate that the rules kept so far
    # already imply is never sent to Z3 (most large candidates are small rules in a context)
    t = time.perf_counter()
    advance = progress("verify", len(kept))
    rules: dict[str, tuple[dict, dict]] = {}  # kept text -> (proof, info)
    statuses: dict[str, str] = {}
    skipped: list[str] = []
    for size in sorted({v[2] for v in kept.values()}):
        wave = sorted(k for k, v in kept.items() if v[2] == size)
        implied_now = set(_redundant(executor, wave, _ordered(rules), {k: kept[k][1] for k in wave}))
        advance(len(implied_now))
        skipped += sorted(implied_now)
        wave = [k for k in wave if k not in implied_now]
        _prove(executor, checkpoint, settings, wave, kept, rules, statuses, advance)
    report.counts["implied-before-proof"] = len(skipped)
    for status in Status:  # only PROVED rules are ever kept
        report.counts[status.value.lower()] = sum(Status(v) is status for v in statuses.values())
    stage("parametric", t, len(rules))

    # 5. rules implied by smaller (or equally small, more general) ones
    t = time.perf_counter()
    order = _ordered(rules)
    advance = progress("implied", len(order))
    shapes_of = {k: rules[k][1]["shapes"] for k in order}
    tasks = [(chunk, order, {k: shapes_of[k] for k in chunk}) for chunk in _chunks(order, 25)]
    derivable = {k for found in _run(executor, implied.task_derivable, tasks, advance,
                                     lambda task: len(task[0])) for k in found}
    final = [k for k in order if k not in derivable]
    stage("implied", t, len(final))

    # 6. both pruning passes judged each rule against rules that may themselves have gone since:
    # whatever the final rules do not imply comes back (proved first, if it was skipped before)
    t = time.perf_counter()
    restored = _restore(executor, [k for k in order if k in derivable], final, shapes_of)
    missing = _restore(executor, skipped, final, {k: kept[k][1] for k in skipped}, keep_all=True)
    before = dict(rules)
    _prove(executor, checkpoint, settings, missing, kept, rules, statuses, lambda _n: None)
    added = [k for k in _ordered(rules) if k not in before]
    final = _ordered({k: rules[k] for k in [*final, *restored, *added]})
    report.counts["restored"] = len(restored) + len(added)
    stage("final", t, len(final))

    entries = [Entry(parse_rule(k), ProofRecord.from_json(rules[k][0]), "generated", _info(rules[k][1]))
               for k in final]
    generator = {"version": __version__, "max_ops": settings.max_ops, "ops": list(settings.ops),
                 "seed": settings.seed, "proof_timeout": settings.timeout,
                 "worlds": [_world_json(w) for w in worlds],
                 "counts": report.counts, "seconds": report.seconds,
                 "total_seconds": round(sum(report.seconds.values()), 2)}
    axioms = {"count": len(ops.AXIOMS), "names": sorted(ops.AXIOMS),
              "validation": "taso axioms validate --full checks each against the operators' semantics"}
    return Library(entries, generator, axioms)


def _redundant(executor: Executor, texts: list[str], rules: list[str], shapes: dict[str, dict]) -> list[str]:
    """The texts that `rules` imply (see `implied.task_implied`), in parallel chunks."""
    if not rules or not texts:
        return []
    tasks = [(chunk, rules, {k: shapes[k] for k in chunk}) for chunk in _chunks(texts, 25)]
    return [k for found in _run(executor, implied.task_implied, tasks, lambda _n: None) for k in found]


def _restore(executor: Executor, texts: list[str], final: list[str], shapes: dict[str, dict],
             keep_all: bool = False) -> list[str]:
    """The texts that `final` does not imply, in order. Unless `keep_all`, they are added to
    `final` one at a time, smallest first, each judged against the rules restored before it: one
    restored rule often implies its neighbours again. (Judging each survivor once, in order, is
    what re-checking all of them after each restored rule amounted to, at one check apiece.)"""
    implied_now = set(_redundant(executor, texts, final, shapes))
    texts = [k for k in texts if k not in implied_now]
    if keep_all:
        return texts
    restored: list[str] = []
    for k in texts:
        if restored and implied.task_implied([k], final, {k: shapes[k]}):
            continue
        final.append(k)
        restored.append(k)
    return restored


def _prove(executor: Executor, checkpoint: Checkpoint, settings: Settings, texts: list[str],
           kept: dict[str, tuple[str, dict, int]], rules: dict[str, tuple[dict, dict]],
           statuses: dict[str, str], advance: Callable[[int], None]) -> None:
    """Prove `texts`, generalize the proved ones and add them to `rules` (their most general form)."""
    proofs = _checkpointed(executor, checkpoint, "prove", task_prove, texts, settings, advance)
    statuses.update({k: p["status"] for k, p in proofs.items()})
    proved = [k for k in texts if Status(proofs[k]["status"]) is Status.PROVED]
    general = _checkpointed(executor, checkpoint, "generalize", task_generalize, proved, settings, lambda _n: None)
    for k in proved:
        world, shapes, size = kept[k]
        g = general[k]
        info = {"world": world, "shapes": shapes, "size": size, "parametric": g is not None}
        text, proof = (k, proofs[k]) if g is None else (cand.canonical(parse_rule(g[0]))[1], g[1])
        rules.setdefault(text, (proof, info))


def _ordered(rules: dict[str, tuple[dict, dict]]) -> list[str]:
    """Smaller first; at equal size the more general (more distinct variables) first."""
    return sorted(rules, key=lambda k: (rules[k][1]["size"], -len(rules[k][1]["shapes"]), k))


def _checkpointed(executor: Executor, checkpoint: Checkpoint, stage: str, fn: Callable, texts: list[str],
                  settings: Settings, advance: Callable[[int], None]) -> dict[str, Any]:
    """fn over `texts` in chunks, skipping and recording results in the checkpoint."""
    todo = [k for k in texts if (stage, k) not in checkpoint.done]
    advance(len(texts) - len(todo))
    tasks = [(c, settings.timeout, settings.seed) for c in _chunks(todo, 4)]
    for i, results in executor.map(fn, tasks):
        for text, result in zip(tasks[i][0], results):
            checkpoint.put(stage, text, result)
        advance(len(results))
    return {k: checkpoint.done[(stage, k)] for k in texts}


def _info(info: dict[str, Any]) -> dict[str, Any]:
    return {"world": info["world"], "parametric": info["parametric"]}


def _world_json(w: World) -> dict[str, Any]:
    return {"name": w.name, "ops": list(w.ops), "extra_ops": w.extra_ops, "weight_ops": w.weight_ops,
            "data_ops": w.data_ops, "narrow_above": w.narrow_above, "narrow_ops": list(w.narrow_ops),
            "inputs": [{"name": i.name, "shape": list(i.shape), "weight": i.weight} for i in w.inputs]}
