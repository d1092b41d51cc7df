"""The rule generator's parts: concolic shapes, fingerprints, enumeration, pruning, generalization."""

from __future__ import annotations

import gc
from dataclasses import replace

import numpy as np
import pytest

from taso_py import ops
from taso_py.generator import candidates as cand
from taso_py.generator import fingerprint, implied, pipeline
from taso_py.generator.concolic import CONCOLIC, CDim
from taso_py.generator.enumerate import enumerate_shard, shard_count, trivial_graphs
from taso_py.generator.executor import LocalExecutor
from taso_py.generator.generalize import attempts, generalize, slots
from taso_py.generator.implied import derivable
from taso_py.generator.pipeline import Checkpoint, Settings, generate
from taso_py.generator.world import WORLDS, Input, World
from taso_py.library.syntax import format_expr, format_rule, format_term, parse_rule
from taso_py.library.terms import Apply, term_names, walk
from taso_py.verifier.prover import prove

MATRIX = {"a": [4, 4], "b": [4, 4], "c": [4, 4]}


def test_concolic_dims_keep_their_expressions():
    a, b = CDim.of("a", 1, 4), CDim.of("b", 1, 3)
    total = a + b
    assert total.value == 7 and format_expr(total.expr()) == "dim(a, 1) + dim(b, 1)"
    assert total == 7 and total > b  # comparisons answer concretely
    assert format_expr((a * 2).expr()) == "2 * dim(a, 1)"


def test_same_padding_window_cancels_to_the_input_size():
    x = CDim.of("x", 2, 5)
    out, conds = ops.get("conv2d").sym_shape(
        [(CDim.of("x", 0, 1), CDim.of("x", 1, 2), x, CDim.of("x", 3, 5)), (2, 2, 3, 3)],
        ops.get("conv2d").make_attrs(pad=(1, 1, 1, 1)), CONCOLIC)
    assert all(conds)
    assert format_expr(out[0][2].expr()) == "dim(x, 2)"


def test_concat_size_is_the_sum_in_argument_order():
    (out,), _ = ops.get("concat").sym_shape([(CDim.of("a", 0, 2),), (CDim.of("b", 0, 3),)],
                                            ops.get("concat").make_attrs(axis=0), CONCOLIC)
    assert format_expr(out[0].expr()) == "dim(a, 0) + dim(b, 0)"


def _run(op: str, *args: np.ndarray, **attrs: object) -> np.ndarray:
    return fingerprint.run(op, list(args), ops.get(op).make_attrs(**attrs))[0]


def test_fingerprints_are_exact_for_polynomial_identities():
    rng = np.random.default_rng(0)
    a, b, c = (fingerprint.random_input((3, 3), rng) for _ in range(3))
    left = _run("matmul", _run("matmul", a, b), c)
    right = _run("matmul", a, _run("matmul", b, c))
    assert fingerprint.digest(left) == fingerprint.digest(right)
    assert fingerprint.digest(_run("matmul", a, b)) != fingerprint.digest(_run("matmul", b, a))


def test_non_polynomial_functions_cannot_create_identities():
    rng = np.random.default_rng(1)
    a, b = (fingerprint.random_input((4,), rng) for _ in range(2))
    relu_sum = _run("relu", _run("add", a, b))
    sum_relu = _run("add", _run("relu", a), _run("relu", b))
    assert fingerprint.digest(relu_sum) != fingerprint.digest(sum_relu)
    # but a function in the same place on both sides is the same function
    assert np.array_equal(_run("relu", a), _run("relu", a.copy()))


SMALL = World("small", (Input("a", (3, 3)), Input("b", (3, 3))), ("matmul", "add", "transpose", "concat", "split"))


def test_shards_are_disjoint_and_cover_every_graph():
    shards = [enumerate_shard(SMALL, r, 2, 0) for r in range(shard_count(SMALL, 0))]
    graphs = [g for s in shards for g in s]
    keys = [(g.outputs, g.prints) for g in graphs]
    assert len(keys) == len(set(keys)) > 50
    # every one-operator graph over the inputs is there, e.g. both matmuls and the transpose
    texts = {cand._text(g.outputs) for g in graphs}
    assert {"matmul(a, b)", "matmul(b, a)", "transpose(a, perm=[1, 0])"} <= texts


def test_split_cuts_where_a_concat_joined():
    graphs = [g for r in range(shard_count(SMALL, 0)) for g in enumerate_shard(SMALL, r, 3, 0)]
    outputs = {frozenset(map(format_term, g.outputs)) for g in graphs}
    split = "split(matmul(a, concat(a, b, axis=1)), axis=1, sizes=[dim(a, 1), dim(b, 1)])"
    assert frozenset({f"{split}[0]", f"{split}[1]"}) in outputs
    assert not any("split(concat(" in t for out in outputs for t in out)  # not enumerated


def test_pairs_include_the_multi_output_matmul_merge():
    graphs = trivial_graphs(SMALL, 0)
    graphs += [g for r in range(shard_count(SMALL, 0)) for g in enumerate_shard(SMALL, r, 3, 0)]
    rules = {cand.canonical(cand.rule_of(g, rep))[1] for g, rep in cand.pair(graphs)}
    merge = ("(split(matmul(a, concat(a, b, axis=1)), axis=1, sizes=[dim(a, 1), dim(b, 1)])[0], "
             "split(matmul(a, concat(a, b, axis=1)), axis=1, sizes=[dim(a, 1), dim(b, 1)])[1]) == "
             "(matmul(a, a), matmul(a, b))")
    assert merge in rules


# a narrow world as the shipped conv-bias one, with 1x1 kernels only so that it enumerates quickly
BIASED = World("biased", (Input("x", (1, 3, 4, 4)), Input("w", (2, 3, 1, 1), weight=True),
                          Input("v", (2, 3, 1, 1), weight=True), Input("p", (2,), weight=True),
                          Input("q", (2,), weight=True)),
               ("conv2d", "concat", "split"), extra_ops=1, weight_ops=("concat",), data_ops=("conv2d", "split"))


def test_a_narrow_world_pairs_the_merge_of_two_convolutions_with_biases():
    graphs = [g for r in range(shard_count(BIASED, 0)) for g in enumerate_shard(BIASED, r, 4, 0)]
    rules = {cand.canonical(cand.rule_of(g, rep))[1] for g, rep in cand.pair(graphs)}
    conv = "stride=[1, 1], pad=[0, 0, 0, 0], groups=1, act=none"
    merged = (f"split(conv2d(a, concat(b, c, axis=0), concat(d, e, axis=0), {conv}), axis=1, "
              "sizes=[dim(b, 0), dim(c, 0)])")
    assert f"({merged}[0], {merged}[1]) == (conv2d(a, b, d, {conv}), conv2d(a, c, e, {conv}))" in rules
    outputs = [t for g in graphs for t in g.outputs]
    assert all(("tensor", "x") in set(term_names(t)) for t in outputs)  # weights alone would be folded away
    texts = [format_term(t) for t in outputs]
    assert not any(t.startswith("concat(conv2d") or "conv2d(conv2d" in t for t in texts)  # data_ops


def test_worlds_keep_their_depth_and_roles_when_operators_are_chosen():
    (biased,) = [w for w in Settings(ops=("conv2d", "split")).worlds() if w.name == "conv-bias"]
    assert biased.ops == ("conv2d", "split") and biased.extra_ops == 1 and biased.weight_ops == ("concat", "enlarge")
    assert biased.may_apply("concat", weights_only=True) and not biased.may_apply("concat", weights_only=False)


def test_second_test_rejects_a_wrong_rule():
    world = WORLDS[0]
    assert cand.second_test(parse_rule("matmul(matmul(a, b), c) == matmul(a, matmul(b, c))"), world, 0)
    assert not cand.second_test(parse_rule("matmul(a, b) == matmul(b, a)"), world, 0)


def test_canonical_form_ignores_variable_names_and_output_order():
    one = parse_rule("(matmul(x, w), matmul(x, v)) == (relu(x), add(w, v))")
    renamed = parse_rule("(matmul(p, r), matmul(p, q)) == (relu(p), add(r, q))")
    reordered = parse_rule("(matmul(x, v), matmul(x, w)) == (add(w, v), relu(x))")
    assert len({cand.canonical(r)[1] for r in (one, renamed, reordered)}) == 1
    other = parse_rule("(matmul(x, w), matmul(x, v)) == (relu(x), add(v, w))")  # commuted, not renamed
    assert cand.canonical(other)[1] != cand.canonical(one)[1]


def test_common_subgraph_and_products_are_pruned():
    assert cand.has_common_subgraph(parse_rule("add(relu(a), b) == add(b, relu(a))"))
    assert not cand.has_common_subgraph(parse_rule("add(a, b) == add(b, a)"))
    assert cand.is_product(parse_rule("(relu(a), matmul(a, b)) == (relu(a), matmul(a, b))"))
    assert not cand.is_product(parse_rule(
        "(matmul(a, b), matmul(a, c)) == (split(matmul(a, concat(b, c, axis=1)), axis=1, "
        "sizes=[dim(b, 1), dim(c, 1)])[0], split(matmul(a, concat(b, c, axis=1)), axis=1, "
        "sizes=[dim(b, 1), dim(c, 1)])[1])"))


MERGE = "split(matmul(a, concat(b, c, axis=1)), axis=1, sizes=[dim(b, 1), dim(c, 1)])"


def test_a_smaller_rule_under_a_common_context_is_pruned():
    # relu on top of both sides: matmul associativity under a relu
    rule = parse_rule("relu(matmul(matmul(a, b), c)) == relu(matmul(a, matmul(b, c)))")
    assert format_rule(cand.context(rule)) == "matmul(matmul(a, b), c) == matmul(a, matmul(b, c))"
    assert cand.in_context(rule, MATRIX, 0)
    # the same operator with two arguments that differ: two smaller rules, each of which holds
    two = parse_rule("add(transpose(transpose(a, perm=[1, 0]), perm=[1, 0]), matmul(matmul(a, b), c)) == "
                     "add(a, matmul(a, matmul(b, c)))")
    assert len(cand.context(two).src) == 2 and cand.in_context(two, MATRIX, 0)
    # a merge under a relu on each output is the merge: one pair per output
    merged = parse_rule(f"(relu(matmul(a, b)), relu(matmul(a, c))) == (relu({MERGE}[0]), relu({MERGE}[1]))")
    assert cand.in_context(merged, MATRIX, 0)
    assert format_rule(cand.context(merged)) == f"(matmul(a, b), matmul(a, c)) == ({MERGE}[0], {MERGE}[1])"
    # two outputs over the same smaller rule are that rule
    shared = parse_rule("(relu(matmul(matmul(a, b), c)), transpose(matmul(matmul(a, b), c), perm=[1, 0])) == "
                        "(relu(matmul(a, matmul(b, c))), transpose(matmul(a, matmul(b, c)), perm=[1, 0]))")
    assert len(cand.context(shared).src) == 1 and cand.in_context(shared, MATRIX, 0)
    # three differing pairs would make a smaller rule of three outputs, which no library holds
    three = parse_rule("(add(relu(a), relu(b)), relu(c)) == (add(relu(relu(a)), relu(relu(b))), relu(relu(c)))")
    assert cand.context(three) is None


def test_rules_that_are_not_a_smaller_rule_in_a_context_are_kept():
    # different operators or attributes on top: the rule itself is the smallest form
    assert cand.context(parse_rule("relu(conv2d(a, b, stride=[1, 1], pad=[1, 1, 1, 1], groups=1, act=none)) == "
                                   "conv2d(a, b, stride=[1, 1], pad=[1, 1, 1, 1], groups=1, act=relu)")) is None
    assert cand.context(parse_rule("concat(a, b, axis=0) == concat(a, b, axis=1)")) is None
    # the merge with its relu fused after the matmul: a split on one side, relus on the other
    fused = parse_rule("(relu(matmul(a, b)), relu(matmul(a, c))) == "
                       "(split(relu(matmul(a, concat(b, c, axis=1))), axis=1, sizes=[dim(b, 1), dim(c, 1)])[0], "
                       "split(relu(matmul(a, concat(b, c, axis=1))), axis=1, sizes=[dim(b, 1), dim(c, 1)])[1])")
    assert cand.context(fused) is None and not cand.in_context(fused, MATRIX, 0)
    # the same top, but the arguments are not equal on their own: commutativity is no smaller rule
    commuted = parse_rule("matmul(transpose(b, perm=[1, 0]), transpose(a, perm=[1, 0])) == "
                          "transpose(matmul(a, b), perm=[1, 0])")
    assert cand.context(commuted) is None
    swapped = parse_rule("add(matmul(a, b), c) == add(c, matmul(a, b))")
    assert cand.context(swapped) is not None and not cand.in_context(swapped, MATRIX, 0)


def test_a_narrow_world_keeps_its_larger_graphs_to_the_narrow_operators():
    world = World("m", (Input("a", (2, 2)), Input("b", (2, 2))), ("matmul", "add", "relu", "transpose"),
                  narrow_above=2, narrow_ops=("matmul", "relu"))
    graphs = [g for r in range(shard_count(world, 0)) for g in enumerate_shard(world, r, 3, 0)]
    whole = replace(world, narrow_above=None)
    wide = [g for r in range(shard_count(whole, 0)) for g in enumerate_shard(whole, r, 3, 0)]
    ops_of = [{t.op for out in g.outputs for t in walk(out) if isinstance(t, Apply)} for g in graphs]
    assert all(o <= {"matmul", "relu"} for g, o in zip(graphs, ops_of) if g.size == 3)
    assert any("add" in o for g, o in zip(graphs, ops_of) if g.size == 2)
    small = {(g.outputs, g.prints) for g in wide if g.size <= 2}
    assert small == {(g.outputs, g.prints) for g in graphs if g.size <= 2}  # smaller graphs all there
    assert len(graphs) < len(wide)
    assert not world.narrow(2) and world.narrow(3) and not replace(world, narrow_above=None).narrow(9)


CONV_RELU = ("relu(conv2d(a, b, stride=[1, 1], pad=[1, 1, 1, 1], groups=1, act=none)) == "
             "conv2d(a, b, stride=[1, 1], pad=[1, 1, 1, 1], groups=1, act=relu)")


def test_generalization_quantifies_over_stride_and_padding():
    rule = parse_rule(CONV_RELU)
    assert {s.attr for s in slots(rule)} == {"stride", "pad"}  # act differs between sides: not a slot
    general = generalize(rule, attempts(rule)[0])
    assert "?" in format_rule(general)
    assert prove(general).status == "PROVED"


def _world_rules(name: str, max_ops: int) -> set[str]:
    """Canonical candidate texts of one default world, enumerated to `max_ops` operators."""
    (world,) = [w for w in WORLDS if w.name == name]
    graphs = [g for r in range(shard_count(world, 0)) for g in enumerate_shard(world, r, max_ops, 0)]
    return {cand.canonical(cand.rule_of(g, rep))[1] for g, rep in cand.pair(graphs)}


def test_the_select_world_pairs_the_slices_of_a_fused_projection_with_separate_projections():
    rules = _world_rules("select", 4)  # its max-ops 3 and one deeper
    piece = "slice(matmul(a, concat(b, c, axis=1)), starts=[{}], ends=[{}], axes=[2], steps=[1])"
    merge = (f"({piece.format(0, 'dim(b, 1)')}, {piece.format('dim(b, 1)', 'dim(b, 1) + dim(c, 1)')}) == "
             "(matmul(a, b), matmul(a, c))")
    assert merge in rules
    assert prove(parse_rule(merge)).status == "PROVED"


def test_the_activation_world_moves_clip_through_concat_and_generalizes_its_bounds():
    clip = "clip({}, min=0.0, max=6.0)"
    rule = f"concat({clip.format('a')}, {clip.format('b')}, axis=0) == {clip.format('concat(a, b, axis=0)')}"
    assert rule in _world_rules("activation", 3)
    general = generalize(parse_rule(rule), attempts(parse_rule(rule))[0])
    assert format_rule(general).count("?") == 6  # each clip's two bounds, the axis literal
    assert prove(general).status == "PROVED"


def test_the_reduce_world_moves_a_mean_through_concat_of_another_axis():
    rules = _world_rules("reduce", 3)
    mean = "reduce_mean({}, axes=[1], keepdims=true)"
    text = f"concat({mean.format('a')}, {mean.format('b')}, axis=0) == {mean.format('concat(a, b, axis=0)')}"
    assert text in rules
    assert prove(parse_rule(text)).status == "PROVED"


def test_generalization_leaves_tied_values_literal():
    rule = parse_rule("avgpool2d(a, kernel=[3, 3], stride=[1, 1], pad=[1, 1, 1, 1], count_include_pad=true) == "
                      "conv2d(a, const_pool(channels=dim(a, 1), kernel=[3, 3]), stride=[1, 1], pad=[1, 1, 1, 1], "
                      "groups=dim(a, 1))")
    assert "kernel" not in {s.attr for s in slots(rule)}  # const_pool's kernel ties the pool's


def test_implied_rules_are_found_by_rewriting():
    earlier = [parse_rule("add(add(a, b), c) == add(a, add(b, c))"),
               parse_rule("matmul(a, add(b, c)) == add(matmul(a, b), matmul(a, c))")]
    assert derivable(parse_rule("add(matmul(a, b), matmul(a, c)) == matmul(a, add(c, b))"), earlier, MATRIX)
    assert derivable(parse_rule("relu(add(matmul(a, b), matmul(a, c))) == relu(matmul(a, add(b, c)))"),
                     earlier, MATRIX)
    assert derivable(parse_rule("matmul(a, add(b, b)) == add(matmul(a, b), matmul(a, b))"), earlier, MATRIX)
    assert not derivable(parse_rule("matmul(matmul(a, b), c) == matmul(a, matmul(b, c))"), earlier, MATRIX)


def test_implied_rules_need_symbolically_equal_attributes():
    # concrete sizes agree (all 4), but dim(a, 0) is not dim(b, 0) for every shape
    earlier = [parse_rule("split(matmul(a, concat(b, c, axis=1)), axis=1, sizes=[dim(b, 1), dim(c, 1)])[0] "
                          "== matmul(a, b)")]
    assert derivable(parse_rule("split(matmul(c, concat(a, b, axis=1)), axis=1, sizes=[dim(a, 1), dim(b, 1)])[0]"
                                " == matmul(c, a)"), earlier, MATRIX)
    assert not derivable(parse_rule("split(matmul(c, concat(a, b, axis=1)), axis=1, "
                                    "sizes=[dim(b, 1), dim(a, 1)])[0] == matmul(c, a)"), earlier, MATRIX)


def test_an_instance_of_a_more_general_rule_is_redundant():
    general = "matmul(a, add(b, c)) == add(matmul(a, b), matmul(a, c))"
    instance = "matmul(a, add(b, b)) == add(matmul(a, b), matmul(a, b))"
    shapes = {general: MATRIX, instance: {"a": [4, 4], "b": [4, 4]}}
    # the instance is smaller, so it comes first in the order, yet the general rule covers it
    assert implied.task_derivable([instance, general], [instance, general], shapes) == [instance]
    merge = ("(split(matmul(a, concat(b, c, axis=1)), axis=1, sizes=[dim(b, 1), dim(c, 1)])[0], "
             "split(matmul(a, concat(b, c, axis=1)), axis=1, sizes=[dim(b, 1), dim(c, 1)])[1]) == "
             "(matmul(a, b), matmul(a, c))")
    # the same with b for c, outputs swapped and sides swapped
    merge_bb = ("(matmul(a, b), matmul(a, b)) == "
                "(split(matmul(a, concat(b, b, axis=1)), axis=1, sizes=[dim(b, 1), dim(b, 1)])[1], "
                "split(matmul(a, concat(b, b, axis=1)), axis=1, sizes=[dim(b, 1), dim(b, 1)])[0])")
    shapes = {merge: MATRIX, merge_bb: {"a": [4, 4], "b": [4, 4]}}
    assert implied.task_derivable([merge, merge_bb], [merge_bb, merge], shapes) == [merge_bb]


def test_a_multi_output_rule_is_redundant_only_when_each_output_rewrites_both_ways():
    assoc = "matmul(matmul(a, b), c) == matmul(a, matmul(b, c))"
    pair = ("(matmul(matmul(a, b), a), matmul(matmul(b, a), b)) == "
            "(matmul(a, matmul(b, a)), matmul(b, matmul(a, b)))")
    merge = ("(split(matmul(a, concat(b, c, axis=1)), axis=1, sizes=[dim(b, 1), dim(c, 1)])[0], "
             "split(matmul(a, concat(b, c, axis=1)), axis=1, sizes=[dim(b, 1), dim(c, 1)])[1]) == "
             "(matmul(a, b), matmul(a, c))")
    columns = ("matmul(a, concat(b, c, axis=1)) == concat(matmul(a, b), matmul(a, c), axis=1)")
    split0 = "split(concat(a, b, axis=1), axis=1, sizes=[dim(a, 1), dim(b, 1)])[0] == a"
    split1 = "split(concat(a, b, axis=1), axis=1, sizes=[dim(a, 1), dim(b, 1)])[1] == b"
    rules = [assoc, columns, split0, split1]
    shapes = {pair: {"a": [4, 4], "b": [4, 4]}, merge: MATRIX}
    # the merge's outputs reach matmul(a, b) one way only: the other way would invent c
    assert implied.task_implied([pair, merge], rules, shapes) == [pair]


def test_local_workers_are_spawned_not_forked():
    """A forked worker inherits the parent's state without its threads (the egglog hang); a spawned
    one starts clean, which shows here as the garbage collector on though the parent turned it off."""
    executor = LocalExecutor(2)
    gc.disable()
    try:
        assert dict(executor.map(gc.isenabled, [(), ()])) == {0: True, 1: True}
    finally:
        gc.enable()
        executor.close()


def test_pruning_keeps_distributivity_and_drops_its_instances(tmp_path):
    executor = LocalExecutor(1)
    checkpoint = Checkpoint(tmp_path / "c.jsonl", resume=False)
    library = generate(Settings(max_ops=3, ops=("matmul", "add")), executor, checkpoint, lambda s, n: lambda k: None)
    checkpoint.close()
    texts = {e.text for e in library}
    assert "add(matmul(a, b), matmul(a, c)) == matmul(a, add(b, c))" in texts
    assert "add(matmul(a, b), matmul(c, b)) == matmul(add(a, c), b)" in texts
    assert "matmul(matmul(a, b), c) == matmul(a, matmul(b, c))" in texts
    assert not any("add(b, b)" in t or "add(a, a)" in t for t in texts), texts
    assert library.generator["counts"]["final"] == len(library) <= 6


@pytest.mark.parametrize("p", [fingerprint.P])
def test_modulus_is_prime_and_small_enough_for_int64(p: int):
    assert all(p % k for k in range(2, int(p ** 0.5) + 1))
    assert p * p * (1 << 14) < 2 ** 63


def test_restoring_counts_every_rule_it_brings_back():
    general = "matmul(a, add(b, c)) == add(matmul(a, b), matmul(a, c))"
    other = "matmul(matmul(a, b), c) == matmul(a, matmul(b, c))"
    shapes = {general: MATRIX, other: MATRIX}
    final: list[str] = []
    restored = pipeline._restore(LocalExecutor(1), [general, other], final, shapes)
    assert restored == [general, other] and final == [general, other]


def test_a_restored_rule_is_judged_against_those_restored_before_it():
    general = "matmul(a, add(b, c)) == add(matmul(a, b), matmul(a, c))"
    instance = "matmul(a, add(b, b)) == add(matmul(a, b), matmul(a, b))"  # general with c := b
    other = "matmul(matmul(a, b), c) == matmul(a, matmul(b, c))"
    shapes = {general: MATRIX, instance: {"a": [4, 4], "b": [4, 4]}, other: MATRIX}
    final: list[str] = []
    restored = pipeline._restore(LocalExecutor(1), [general, instance, other], final, shapes)
    assert restored == [general, other] and final == [general, other]
