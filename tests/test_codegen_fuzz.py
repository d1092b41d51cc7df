"""Random conv nets through the compiler against the reference semantics: the blocked layout with
padded and segmented channels, Winograd, depthwise and grouped convolutions, pools, concat and
split, activations that do and do not keep zeros, residual adds."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from taso_py.codegen.graph import compile_graph
from taso_py.codegen.runtime import CompiledModel
from taso_py.graph import Graph, Ref, evaluate
from taso_py.types import TensorType

Tensor = tuple[Ref, int, int]  # (tensor, channels, height = width)


def random_conv_net(rng: random.Random) -> Graph:
    """A small random conv net over odd and whole-block channel counts (see the module doc)."""
    g = Graph()
    c, h = rng.choice([3, 8, 11, 16, 20, 32, 44]), rng.choice([5, 7, 9, 12, 14])
    tensors: list[Tensor] = [(g.add_input("x", TensorType((1, c, h, h))), c, h)]

    def weight(*shape: int) -> Ref:
        values = np.random.default_rng(rng.randrange(1 << 30)).standard_normal(shape)
        return g.add_weight((values / np.sqrt(np.prod(shape[1:]) or 1)).astype(np.float32))

    def conv(t: Ref, c: int, o: int, k: int, **attrs: object) -> Ref:
        return g.add("conv2d", [t, weight(o, c // int(attrs.get("groups", 1)), k, k)], pad=(k // 2,) * 4, **attrs)[0]

    for _ in range(rng.randrange(2, 9)):
        t, c, h = rng.choice(tensors)
        op = rng.choice(["conv", "conv", "winograd", "depthwise", "groups", "maxpool", "avgpool", "relu",
                         "sigmoid", "add", "concat", "split"])
        if op == "conv":
            o, k, s = rng.choice([8, 12, 16, 24, 44, 64]), rng.choice([1, 3]), rng.choice([1, 1, 2])
            tensors.append((conv(t, c, o, k, stride=(s, s), act=rng.choice(["none", "relu", "sigmoid"])), o,
                            (h - 1) // s + 1))
        elif op == "winograd":
            o = rng.choice([64, 96])
            tensors.append((conv(t, c, o, 3), o, h))
        elif op == "depthwise":
            tensors.append((conv(t, c, c, 3, groups=c, act="relu"), c, h))
        elif op == "groups" and c % 16 == 0:
            tensors.append((conv(t, c, c, 3, groups=c // rng.choice([4, 8, 16])), c, h))
        elif op == "maxpool" and h >= 3:
            (y,) = g.add("maxpool2d", [t], kernel=(3, 3), stride=(2, 2), pad=(1, 1, 1, 1))
            tensors.append((y, c, (h - 1) // 2 + 1))
        elif op == "avgpool" and h >= 3:
            (y,) = g.add("avgpool2d", [t], kernel=(3, 3), stride=(1, 1), pad=(1, 1, 1, 1),
                         count_include_pad=rng.choice([False, True]))
            tensors.append((y, c, h))
        elif op in ("relu", "sigmoid"):
            tensors.append((g.add(op, [t])[0], c, h))
        elif op == "add":
            other = rng.choice([u for u in tensors if u[1:] == (c, h)])
            tensors.append((g.add("add", [t, other[0]])[0], c, h))
        elif op == "concat":
            other = rng.choice([u for u in tensors if u[2] == h])
            tensors.append((g.add("concat", [t, other[0]], axis=1)[0], c + other[1], h))
        elif op == "split" and c >= 2:
            a = rng.randrange(1, c)
            first, second = g.add("split", [t], axis=1, sizes=(a, c - a))
            tensors += [(first, a, h), (second, c - a, h)]
    outputs = list(dict.fromkeys([tensors[-1][0], *([rng.choice(tensors)[0]] if rng.random() < 0.5 else [])]))
    g.set_outputs(outputs, [f"y{k}" for k in range(len(outputs))])
    g.remove_unused()
    return g


@pytest.mark.parametrize("seed", range(24))
def test_random_conv_net_matches_the_reference(tmp_path: Path, seed: int) -> None:
    g = random_conv_net(random.Random(seed))
    compile_graph(g, tmp_path / "m")
    feeds = {n.attrs.name: np.random.default_rng(seed).standard_normal(n.attrs.type.shape).astype(np.float32)
             for n in g.inputs}
    got, want = CompiledModel(tmp_path / "m").run(feeds), evaluate(g, feeds)
    for name, ref in want.items():
        assert np.abs(got[name] - ref).max() <= 1e-4 * max(float(np.abs(ref).max()), 1e-30), name
