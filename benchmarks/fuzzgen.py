"""Random ONNX models and mutated ONNX bytes for the fuzzing campaign (`benchmarks/fuzz.py`) and its tests.

`generate(seed)` builds a small, valid model (onnx's full check passes and ONNX Runtime runs it;
`invalid_reason` checks) that is the same for the same seed. It is shaped to reach the code that
real models reach:

- operators of the algebra (conv, matmul/Gemm, broadcasting add/mul/sub/div, activations,
  concat/split, transpose, reshape/squeeze/flatten, pools, batch norm, softmax, layer norm, pad) and
  ops the importer keeps opaque (TopK, ReduceMean, CumSum, LRN, Exp, Clip, Cast round trips through
  float16 and double, Expand, Tile, reflect Pad, an If whose branches read the outer scope, a Gather
  embedding of int64 ids);
- sibling layers reading one input (two or three convolutions or matmuls: TASO's merges), batch-norm
  chains, concatenated siblings, attention-like matmul chains, kernels fed as graph inputs;
- several outputs, outputs that later nodes also read, two outputs that are one tensor, an
  initializer, a graph input or a static shape as an output, int64 outputs, initializers also
  listed as graph inputs, unused inputs and dead nodes;
- odd sizes (1, 3, 7, 17 channels, non-square images), scalars, several opsets (11 to 20, where the
  ONNX forms of Split, Squeeze, Softmax, ReduceMean and Pad differ);
- adversarial names: the names taso-py makes up itself (`split_1`, `w_0`, `conv2d_2`), names with
  spaces, dots, slashes and non-ASCII letters, empty node names.

`mutate(data, seed)` damages a model's bytes or structure (truncation, bit flips, wrong types,
cycles, huge dims, duplicate names, missing inputs, dynamic dims...): what the CLI must refuse with
one line (or, where the damage leaves a valid model, handle).

No torch and no taso-py imports: the generator must not share the code it tests.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

T = TypeVar("T")
OPSETS = (11, 13, 13, 17, 17, 17, 18, 20)  # the default domain's version; weighted to the common ones
IR_VERSION = {11: 6, 13: 7, 17: 8, 18: 8, 20: 9}
CHANNELS = (1, 3, 4, 7, 8, 16, 17)
SIZES = (1, 3, 5, 7, 8, 9, 12)
# tensor names taso-py itself makes up (Graph.fresh_name, the exporter's ExportContext.fresh)
TOOL_HINTS = ("split", "w", "conv2d", "matmul", "concat", "add", "mul", "identity", "constant", "reshape",
              "transpose", "relu", "opaque", "weight", "input", "scalar_mul", "pad", "softmax", "batchnorm")
ODD_NAMES = ("a b", "x.1", "layer.0/weight", "onnx::MatMul_12", "τ", "输出", "0", "1", ":", "name with  spaces",
             "y" * 120, "split", "Split_1", "_", "-1", "out:0")


@dataclass(frozen=True)
class Case:
    """One generated model: its seed, the model, and tags naming what it exercises."""

    seed: int
    model: onnx.ModelProto
    tags: frozenset[str]

    @property
    def opaque(self) -> bool:
        """Whether the model has an op the algebra does not have (compile refuses those for now)."""
        return any(t.startswith("opaque:") for t in self.tags)


@dataclass
class _Tensor:
    name: str
    shape: tuple[int, ...]


@dataclass
class _Builder:
    """Collects nodes, initializers and the float tensors later nodes may read, with their shapes."""

    rng: np.random.Generator
    opset: int
    adversarial: bool
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    inputs: list[onnx.ValueInfoProto] = field(default_factory=list)
    pool: list[_Tensor] = field(default_factory=list)
    names: set[str] = field(default_factory=set)
    tags: set[str] = field(default_factory=set)
    int_outputs: list[_Tensor] = field(default_factory=list)  # int64 tensors to make graph outputs
    counter: int = 0

    # ---- randomness --------------------------------------------------------------------------

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def pick(self, options: Sequence[T]) -> T:
        return options[int(self.rng.integers(len(options)))]

    def pick_tensor(self, ok: Callable[[_Tensor], bool] = lambda t: True, scalars: bool = False) -> _Tensor | None:
        """A tensor later nodes read: the newest one often (deep graphs), any other otherwise
        (shared inputs, branches); rank 0 only where `scalars`."""
        found = [t for t in self.pool if (scalars or t.shape) and ok(t)]
        if not found:
            return None
        if self.chance(0.45):
            return found[-1]
        return self.pick(found)

    # ---- names -------------------------------------------------------------------------------

    def name(self, hint: str) -> str:
        """A fresh tensor name: plain, or, in an adversarial model, one taso-py might make up itself."""
        while True:
            self.counter += 1
            if self.adversarial and self.chance(0.6):
                if self.chance(0.7):
                    base = hint if self.chance(0.5) else self.pick(TOOL_HINTS)
                    name = f"{base}_{int(self.rng.integers(0, 6))}"
                else:
                    name = self.pick(ODD_NAMES)
                    if name in self.names:
                        name = f"{name}_{self.counter}"
                self.tags.add("adversarial-names")
            else:
                name = f"{hint}{self.counter}"
            if name not in self.names:
                self.names.add(name)
                return name

    def node_name(self, op: str) -> str:
        if self.adversarial and self.chance(0.3):
            return "" if self.chance(0.5) else self.name(op)  # node names as tensor names (legal)
        return f"{op}_n{self.counter}"

    # ---- graph pieces ------------------------------------------------------------------------

    def init(self, value: np.ndarray, hint: str) -> str:
        name = self.name(hint)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def weight(self, shape: Sequence[int], fan_in: int, hint: str = "w") -> str:
        """A float32 initializer scaled so that activations stay near 1."""
        value = self.rng.standard_normal(tuple(shape)) / math.sqrt(max(fan_in, 1))
        return self.init(value.astype(np.float32), hint)

    def kernel(self, shape: Sequence[int], fan_in: int, hint: str) -> str:
        """A layer's weights: an initializer, or sometimes a graph input (weights fed at run time)."""
        if self.chance(0.04):
            name = self.name(hint)
            self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
            self.tags.add("weight-as-input")
            return name
        return self.weight(shape, fan_in, hint)

    def ints(self, values: Sequence[int], hint: str) -> str:
        """An int64 constant: an initializer, or sometimes a Constant node (folded at import)."""
        arr = np.asarray(values, np.int64)
        if self.chance(0.2):
            name = self.name(hint)
            self.nodes.append(helper.make_node("Constant", [], [name], name=self.node_name("Constant"),
                                               value=numpy_helper.from_array(arr, name)))
            return name
        return self.init(arr, hint)

    def node(self, op: str, inputs: Sequence[str], outputs: int | Sequence[str] = 1, hint: str | None = None,
             **attrs: object) -> list[str]:
        outs = [self.name(hint or op.lower()) for _ in range(outputs)] if isinstance(outputs, int) else list(outputs)
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=self.node_name(op), **attrs))
        return outs

    def emit(self, op: str, inputs: Sequence[str], shape: Sequence[int], hint: str | None = None,
             **attrs: object) -> _Tensor:
        """One node with one float output that later nodes may read."""
        (out,) = self.node(op, inputs, 1, hint, **attrs)
        t = _Tensor(out, tuple(int(d) for d in shape))
        self.pool.append(t)
        return t

    def add_input(self, shape: Sequence[int]) -> _Tensor:
        name = self.name("x")
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        t = _Tensor(name, tuple(shape))
        self.pool.append(t)
        return t


# ---- the operators ---------------------------------------------------------------------------------

def _conv_out(size: int, k: int, s: int, p0: int, p1: int, d: int) -> int:
    room = size + p0 + p1 - ((k - 1) * d + 1)
    return room // s + 1 if room >= 0 else 0


def _conv(b: _Builder) -> bool:
    """One convolution, or two or three siblings on the same input (merge candidates), maybe concatenated."""
    t = b.pick_tensor(lambda t: len(t.shape) == 4)
    if t is None:
        return False
    n, c, h, w = t.shape
    kh, kw = b.pick(((1, 1), (1, 1), (3, 3), (3, 3), (1, 3), (3, 1), (2, 2), (5, 5)))
    stride = b.pick(((1, 1), (1, 1), (2, 2), (1, 2)))
    dil = (2, 2) if b.chance(0.08) else (1, 1)
    if b.chance(0.6):
        pads = [((kh - 1) * dil[0]) // 2, ((kw - 1) * dil[1]) // 2] * 2
    else:
        pads = [int(b.rng.integers(0, kh)), int(b.rng.integers(0, kw)), int(b.rng.integers(0, kh)),
                int(b.rng.integers(0, kw))]
    ho = _conv_out(h, kh, stride[0], pads[0], pads[2], dil[0])
    wo = _conv_out(w, kw, stride[1], pads[1], pads[3], dil[1])
    if ho < 1 or wo < 1:
        return False
    siblings = int(b.pick((1, 1, 2, 2, 3)))
    groups = 1
    if siblings == 1 and c > 1 and b.chance(0.15):
        groups = c if b.chance(0.5) else next((g for g in (4, 3, 2) if c % g == 0), 1)
    attrs: dict[str, object] = {"kernel_shape": [kh, kw], "strides": list(stride)}
    if b.chance(0.1) and stride == (1, 1) and dil == (1, 1) and kh == kw and kh % 2 == 1:
        attrs["auto_pad"] = "SAME_UPPER"
        ho, wo = h, w
    else:
        attrs["pads"] = pads
    if dil != (1, 1) or b.chance(0.1):
        attrs["dilations"] = list(dil)
    if groups != 1 or b.chance(0.1):
        attrs["group"] = groups
    outs = []
    for _ in range(siblings):
        o = int(b.pick(CHANNELS))
        if groups > 1:
            o = groups * int(b.pick((1, 1, 2)))
        ins = [t.name, b.kernel((o, c // groups, kh, kw), c // groups * kh * kw, "k")]
        if b.chance(0.6):
            ins.append(b.init((b.rng.standard_normal(o) * 0.1).astype(np.float32), "bias"))
        outs.append(b.emit("Conv", ins, (n, o, ho, wo), "conv", **attrs))
    if siblings > 1:
        b.tags.add("sibling-convs")
        if b.chance(0.5):
            b.emit("Concat", [y.name for y in outs], (n, sum(y.shape[1] for y in outs), ho, wo), "cat", axis=1)
            b.tags.add("concat-siblings")
        elif b.chance(0.5):
            for y in outs:
                b.emit(b.pick(("Relu", "Sigmoid", "Tanh")), [y.name], y.shape)
    return True


def _batchnorm(b: _Builder) -> bool:
    """One to three batch norms in a row, right after a convolution when there is one."""
    t = b.pick_tensor(lambda t: len(t.shape) in (2, 3, 4) and t.shape[1] > 0)
    if t is None:
        return False
    c = t.shape[1]
    chain = int(b.pick((1, 1, 2, 3)))
    if chain > 1:
        b.tags.add("batchnorm-chain")
    for _ in range(chain):
        ins = [t.name, b.init((1 + 0.2 * b.rng.standard_normal(c)).astype(np.float32), "gamma"),
               b.init((0.1 * b.rng.standard_normal(c)).astype(np.float32), "beta"),
               b.init((0.1 * b.rng.standard_normal(c)).astype(np.float32), "mean"),
               b.init(b.rng.uniform(0.5, 2.0, c).astype(np.float32), "var")]
        t = b.emit("BatchNormalization", ins, t.shape, "bn", epsilon=float(b.pick((1e-5, 1e-3, 0.1))))
    return True


def _conv_bn(b: _Builder) -> bool:
    return _conv(b) and _batchnorm(b)


def _matmul(b: _Builder) -> bool:
    """x @ W for one to three weights W (siblings: merge candidates), with a bias add sometimes."""
    t = b.pick_tensor(lambda t: len(t.shape) in (2, 3))
    if t is None:
        return False
    k = t.shape[-1]
    siblings = int(b.pick((1, 2, 2, 3)))
    bias = b.chance(0.5)
    for _ in range(siblings):
        m = int(b.pick(CHANNELS))
        y = b.emit("MatMul", [t.name, b.kernel((k, m), k, "w")], (*t.shape[:-1], m), "mm")
        if bias:
            y = b.emit("Add", [y.name, b.weight((m,), 10, "bias")], y.shape, "biased")
    if siblings > 1:
        b.tags.add("sibling-matmuls")
    return True


def _gemm(b: _Builder) -> bool:
    t = b.pick_tensor(lambda t: len(t.shape) == 2)
    if t is None:
        return False
    m_rows, k = t.shape
    n = int(b.pick(CHANNELS))
    trans_b = int(b.chance(0.5))
    ins = [t.name, b.kernel((n, k) if trans_b else (k, n), k, "w")]
    attrs: dict[str, object] = {"transB": trans_b}
    if b.chance(0.3):
        attrs["alpha"] = float(b.pick((0.5, 2.0)))
    if b.chance(0.7):
        c_shape = b.pick(((n,), (1, n), (m_rows, n), ()))
        ins.append(b.weight(c_shape, 10, "c"))
        if b.chance(0.3):
            attrs["beta"] = float(b.pick((0.0, 0.5, 3.0)))
    b.emit("Gemm", ins, (m_rows, n), "gemm", **attrs)
    return True


def _attention(b: _Builder) -> bool:
    """q, k, v projections of one input (a merge), softmax(q kᵀ) v."""
    t = b.pick_tensor(lambda t: len(t.shape) == 3)
    if t is None:
        return False
    bsz, s, d = t.shape
    e = int(b.pick((3, 4, 8)))
    q, k, v = (b.emit("MatMul", [t.name, b.weight((d, e), d)], (bsz, s, e), hint) for hint in ("q", "k", "v"))
    kt = b.emit("Transpose", [k.name], (bsz, e, s), "kt", perm=[0, 2, 1])
    scores = b.emit("MatMul", [q.name, kt.name], (bsz, s, s), "scores")
    probs = b.emit("Softmax", [scores.name], (bsz, s, s), "probs", axis=-1 if b.opset >= 13 else 2)
    b.emit("MatMul", [probs.name, v.name], (bsz, s, e), "ctx")
    b.tags.add("attention")
    return True


def _activation(b: _Builder) -> bool:
    t = b.pick_tensor(scalars=True)
    if t is None:
        return False
    ops = ["Relu", "Relu", "Sigmoid", "Tanh", "Erf"] + (["Gelu"] if b.opset >= 20 else [])
    b.emit(b.pick(ops), [t.name], t.shape)
    return True


def _broadcast_shape(b: _Builder, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts to `shape`: a suffix of it with some dims set to 1."""
    r = len(shape)
    choice = int(b.rng.integers(5))
    if choice == 0 or r == 0:
        return ()
    if choice == 1:
        return (shape[-1],)
    if choice == 2 and r == 4:
        return (shape[1], 1, 1)
    keep = int(b.rng.integers(1, r + 1))
    return tuple(d if b.chance(0.6) else 1 for d in shape[r - keep:])


def _binary(b: _Builder) -> bool:
    """Add, Mul, Sub (or Div by a constant away from zero) with another tensor, itself or a constant,
    broadcasting either way."""
    t = b.pick_tensor(scalars=True)
    if t is None:
        return False
    op = b.pick(("Add", "Add", "Mul", "Sub", "Div"))
    if op == "Div":
        shape = _broadcast_shape(b, t.shape)
        den = b.rng.uniform(0.5, 2.0, shape) * b.rng.choice([-1.0, 1.0], shape)
        b.emit("Div", [t.name, b.init(np.asarray(den, np.float32), "den")], t.shape, "div")
        return True
    partners = [u for u in b.pool if u is not t and _broadcasts(u.shape, t.shape)]
    roll = b.rng.random()
    if partners and roll < 0.45:
        other = b.pick(partners)
        ins = [t.name, other.name]
        b.tags.add("broadcast" if other.shape != t.shape else "shared-input")
    elif roll < 0.55:
        ins = [t.name, t.name]
    else:
        shape = _broadcast_shape(b, t.shape)
        ins = [t.name, b.weight(shape, 4, "c")]
        if shape != t.shape:
            b.tags.add("broadcast")
    if b.chance(0.5):
        ins.reverse()
    b.emit(op, ins, t.shape, op.lower())
    return True


def _broadcasts(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    """Whether `small` broadcasts to exactly `big`."""
    if len(small) > len(big):
        return False
    return all(s in (1, g) for s, g in zip(reversed(small), reversed(big)))


def _pool(b: _Builder) -> bool:
    t = b.pick_tensor(lambda t: len(t.shape) == 4)
    if t is None:
        return False
    n, c, h, w = t.shape
    kind = b.pick(("MaxPool", "AveragePool", "AveragePool", "GlobalAveragePool"))
    if kind == "GlobalAveragePool":
        b.emit(kind, [t.name], (n, c, 1, 1), "gap")
        return True
    kh, kw = b.pick(((2, 2), (3, 3), (2, 3), (1, 1), (3, 1)))
    sh, sw = b.pick(((1, 1), (2, 2), (2, 1)))
    pads = [int(b.rng.integers(0, kh)), int(b.rng.integers(0, kw)), int(b.rng.integers(0, kh)),
            int(b.rng.integers(0, kw))] if b.chance(0.5) else [0, 0, 0, 0]
    ceil = b.chance(0.2)
    sizes = []
    for size, k, s, p0, p1 in ((h, kh, sh, pads[0], pads[2]), (w, kw, sw, pads[1], pads[3])):
        room = size + p0 + p1 - k
        if room < 0:
            return False
        out = (-(-room // s) if ceil else room // s) + 1
        if ceil and (out - 1) * s >= size + p0:
            return False  # ORT drops a last window that starts in the end padding; onnx's shape inference does not
        sizes.append(out)
    attrs: dict[str, object] = {"kernel_shape": [kh, kw], "strides": [sh, sw], "pads": pads}
    if ceil:
        attrs["ceil_mode"] = 1
    if kind == "AveragePool" and b.chance(0.5):
        attrs["count_include_pad"] = 1
    b.emit(kind, [t.name], (n, c, *sizes), kind.lower(), **attrs)
    return True


def _concat(b: _Builder) -> bool:
    t = b.pick_tensor()
    if t is None:
        return False
    axis = int(b.rng.integers(len(t.shape)))

    def fits(u: _Tensor) -> bool:
        return len(u.shape) == len(t.shape) and all(x == y for i, (x, y) in enumerate(zip(u.shape, t.shape))
                                                    if i != axis)

    parts = [t] + [b.pick([u for u in b.pool if fits(u)]) for _ in range(int(b.pick((1, 1, 2))))]
    shape = list(t.shape)
    shape[axis] = sum(u.shape[axis] for u in parts)
    b.emit("Concat", [u.name for u in parts], shape, "cat", axis=axis - len(shape) if b.chance(0.3) else axis)
    return True


def _split(b: _Builder) -> bool:
    """Two or three parts along an axis; sizes as an attribute or an initializer (often named `split_1`)."""
    t = b.pick_tensor(lambda t: max(t.shape) >= 2)
    if t is None:
        return False
    axis = b.pick([i for i, d in enumerate(t.shape) if d >= 2])
    dim = t.shape[axis]
    parts = min(int(b.pick((2, 2, 3))), dim)
    cuts = sorted(b.rng.choice(np.arange(1, dim), parts - 1, replace=False).tolist())
    sizes = [y - x for x, y in zip([0, *cuts], [*cuts, dim])]
    outs = [b.name("split") for _ in sizes]
    attrs: dict[str, object] = {"axis": axis}
    ins = [t.name]
    if b.opset < 13:
        attrs["split"] = sizes
    elif b.opset >= 18 and len(set(sizes)) == 1 and b.chance(0.5):
        attrs["num_outputs"] = len(sizes)
    elif len(set(sizes)) > 1 or b.opset >= 18 or b.chance(0.5):
        ins.append(b.ints(sizes, "split"))
    b.node("Split", ins, outs, **attrs)
    for out, size in zip(outs, sizes):
        shape = list(t.shape)
        shape[axis] = size
        b.pool.append(_Tensor(out, tuple(shape)))
    return True


def _transpose(b: _Builder) -> bool:
    t = b.pick_tensor(lambda t: len(t.shape) >= 2)
    if t is None:
        return False
    if b.chance(0.1):
        b.emit("Transpose", [t.name], t.shape[::-1], "tr")
        return True
    perm = [int(p) for p in b.rng.permutation(len(t.shape))]
    b.emit("Transpose", [t.name], [t.shape[p] for p in perm], "tr", perm=perm)
    return True


def _reshape(b: _Builder) -> bool:
    """Reshape (merge or split dims, -1 and 0 in the target, sometimes via Shape->Gather->Concat),
    Flatten, Squeeze or Unsqueeze."""
    t = b.pick_tensor()
    if t is None:
        return False
    shape, r = list(t.shape), len(t.shape)
    kind = b.pick(("merge", "merge", "split", "flatten", "unsqueeze", "squeeze", "shape-of"))
    if kind == "flatten":
        axis = int(b.rng.integers(0, r + 1))
        b.emit("Flatten", [t.name], (math.prod(shape[:axis]), math.prod(shape[axis:])), "flat", axis=axis)
        return True
    if kind in ("unsqueeze", "squeeze"):
        if kind == "squeeze":
            ones = [i for i, d in enumerate(shape) if d == 1]
            if not ones or r == 1:
                return False
            axes = [b.pick(ones)]
            new = [d for i, d in enumerate(shape) if i not in axes]
        else:
            if r >= 4:
                return False
            axes = [int(b.rng.integers(0, r + 1))]
            new = [*shape[:axes[0]], 1, *shape[axes[0]:]]
        if b.opset < 13:
            b.emit(kind.capitalize(), [t.name], new, kind, axes=axes)
        else:
            b.emit(kind.capitalize(), [t.name, b.ints(axes, "axes")], new, kind)
        return True
    if kind == "shape-of":  # torch's Shape -> Gather -> Unsqueeze -> Concat -> Reshape, folded at import
        if r < 2:
            return False
        (s,) = b.node("Shape", [t.name], 1, "shape")
        (first,) = b.node("Gather", [s, b.ints(0, "idx")], 1, "dim", axis=0)
        if b.opset < 13:
            (u,) = b.node("Unsqueeze", [first], 1, "unsq", axes=[0])
        else:
            (u,) = b.node("Unsqueeze", [first, b.ints([0], "axes")], 1, "unsq")
        (target,) = b.node("Concat", [u, b.ints([-1], "rest")], 1, "target", axis=0)
        b.emit("Reshape", [t.name, target], (shape[0], math.prod(shape[1:])), "reshaped")
        return True
    if kind == "merge":
        if r < 2:
            return False
        i = int(b.rng.integers(0, r - 1))
        new = [*shape[:i], shape[i] * shape[i + 1], *shape[i + 2:]]
    else:
        if r >= 4:
            return False
        i = int(b.rng.integers(0, r))
        f = next((f for f in (2, 3, 4) if shape[i] % f == 0 and shape[i] > f), None)
        if f is None:
            return False
        new = [*shape[:i], f, shape[i] // f, *shape[i + 1:]]
    target = list(new)
    if b.chance(0.4):
        target[int(b.rng.integers(len(target)))] = -1
    if b.chance(0.3) and len(target) == r and target[0] == shape[0]:
        target[0] = 0  # "copy this dim from the input"
    b.emit("Reshape", [t.name, b.ints(target, "shape")], new, "reshaped")
    return True


def _softmax(b: _Builder) -> bool:
    t = b.pick_tensor()
    if t is None:
        return False
    r = len(t.shape)
    axis = int(b.rng.integers(-r, r))
    b.emit("Softmax", [t.name], t.shape, "softmax", axis=axis)
    return True


def _layernorm(b: _Builder) -> bool:
    t = b.pick_tensor(lambda t: len(t.shape) >= 2)
    if t is None or b.opset < 17:
        return False
    d = t.shape[-1]
    ins = [t.name, b.init((1 + 0.1 * b.rng.standard_normal(d)).astype(np.float32), "ln_g")]
    if b.chance(0.7):
        ins.append(b.init((0.1 * b.rng.standard_normal(d)).astype(np.float32), "ln_b"))
    b.emit("LayerNormalization", ins, t.shape, "ln", axis=-1, epsilon=1e-5)
    return True


def _pad(b: _Builder) -> bool:
    t = b.pick_tensor(lambda t: len(t.shape) >= 2)
    if t is None:
        return False
    r = len(t.shape)
    reflect = b.chance(0.15)
    pads = [0] * (2 * r)
    for axis in range(max(0, r - 2), r):  # pad the last two axes (reflect needs pads < dim)
        for side in (axis, axis + r):
            limit = t.shape[axis] - 1 if reflect else 2
            pads[side] = int(b.rng.integers(0, limit + 1)) if limit > 0 else 0
    shape = [d + pads[i] + pads[i + r] for i, d in enumerate(t.shape)]
    mode = "reflect" if reflect else "constant"
    if reflect:
        b.tags.add("opaque:Pad")
    if b.opset < 11:
        b.emit("Pad", [t.name], shape, "pad", pads=pads, mode=mode)
    else:
        ins = [t.name, b.ints(pads, "pads")]
        if not reflect and b.chance(0.4):
            ins.append(b.init(np.asarray(float(b.pick((0.0, 1.5, -2.0))), np.float32), "padv"))
        b.emit("Pad", ins, shape, "pad", mode=mode)
    return True


def _opaque(b: _Builder) -> bool:
    """An op the importer keeps opaque (outside the algebra)."""
    op = b.pick(("TopK", "ReduceMean", "CumSum", "LRN", "Exp", "Abs", "Neg", "LeakyRelu", "Clip", "HardSigmoid",
                 "Elu", "GlobalMaxPool", "ReduceMax", "Cast", "Expand", "Tile"))
    t = b.pick_tensor(scalars=op in ELEMENTWISE_OPAQUE)
    if t is None:
        return False
    r = len(t.shape)
    if op == "TopK":
        axis = r - 1
        k = int(b.rng.integers(1, t.shape[axis] + 1))
        shape = (*t.shape[:-1], k)
        values, indices = b.name("topk"), b.name("indices")
        b.node("TopK", [t.name, b.ints([k], "k")], [values, indices], axis=-1)
        b.pool.append(_Tensor(values, shape))
        if b.chance(0.3):  # an int64 output (random values: no ties to break differently)
            b.int_outputs.append(_Tensor(indices, shape))
    elif op in ("ReduceMean", "ReduceMax"):
        axes = sorted({int(b.rng.integers(0, r)) for _ in range(int(b.rng.integers(1, r + 1)))})
        keep = b.chance(0.6) or (len(axes) == r and b.chance(0.5))
        shape = tuple(1 if i in axes else d for i, d in enumerate(t.shape)) if keep else \
            tuple(d for i, d in enumerate(t.shape) if i not in axes)
        if b.opset >= 18:
            b.emit(op, [t.name, b.ints(axes, "axes")], shape, op.lower(), keepdims=int(keep))
        else:
            b.emit(op, [t.name], shape, op.lower(), axes=axes, keepdims=int(keep))
    elif op == "CumSum":
        axis = b.init(np.asarray(int(b.rng.integers(-r, r)), b.pick((np.int64, np.int32))), "axis")
        b.emit(op, [t.name, axis], t.shape, "cumsum", exclusive=int(b.chance(0.3)), reverse=int(b.chance(0.3)))
    elif op in ("LRN", "GlobalMaxPool"):
        if r != 4:
            return False
        if op == "LRN":
            b.emit(op, [t.name], t.shape, "lrn", size=int(b.pick((1, 3, 5))), alpha=1e-3, beta=0.75, bias=1.0)
        else:
            b.emit(op, [t.name], (*t.shape[:2], 1, 1), "gmp")
    elif op == "Exp":
        bounded = b.emit("Tanh", [t.name], t.shape)
        b.emit(op, [bounded.name], t.shape, "exp")
    elif op == "Clip":
        lo, hi = b.init(np.asarray(-0.5, np.float32), "lo"), b.init(np.asarray(0.7, np.float32), "hi")
        b.emit(op, [t.name, lo, hi] if b.chance(0.7) else [t.name, "", hi], t.shape, "clip")
    elif op == "LeakyRelu":
        b.emit(op, [t.name], t.shape, "leaky", alpha=0.1)
    elif op == "Cast":  # a round trip through another float type (values in float16 between the casts)
        to = b.pick((TensorProto.FLOAT16, TensorProto.DOUBLE))
        (mid,) = b.node("Cast", [t.name], 1, "cast", to=to)
        b.emit("Cast", [mid], t.shape, "cast", to=TensorProto.FLOAT)
    elif op in ("Expand", "Tile"):
        if r == 0 or r > 3:
            return False
        reps = [int(b.pick((1, 1, 2))) for _ in t.shape]
        if op == "Tile":
            b.emit(op, [t.name, b.ints(reps, "reps")], [d * k for d, k in zip(t.shape, reps)], "tile")
        else:
            target = [2, *[d if d != 1 else int(b.pick((1, 3))) for d in t.shape]]
            b.emit(op, [t.name, b.ints(target, "expand_to")], target, "expand")
    else:
        b.emit(op, [t.name], t.shape, op.lower())
    b.tags.add(f"opaque:{op}")
    return True


ELEMENTWISE_OPAQUE = frozenset({"Exp", "Abs", "Neg", "LeakyRelu", "Clip", "HardSigmoid", "Elu", "Cast"})


def _embedding(b: _Builder) -> bool:
    """A table lookup (Gather, opaque) by an int64 graph input: how token ids enter a transformer."""
    if any(i.type.tensor_type.elem_type == TensorProto.INT64 for i in b.inputs):
        return False
    batch, seq = int(b.pick((1, 2))), int(b.pick((1, 3, 5)))
    ids = b.name("ids")
    b.inputs.append(helper.make_tensor_value_info(ids, TensorProto.INT64, [batch, seq]))
    vocab, d = 2, int(b.pick(CHANNELS))  # the check's random ids are 0 and 1
    b.emit("Gather", [b.weight((vocab + int(b.pick((0, 5))), d), 1, "table"), ids], (batch, seq, d), "embed")
    b.tags.add("opaque:Gather")
    b.tags.add("int-input")
    return True


def _if(b: _Builder) -> bool:
    """An If on a value computed from a tensor, its branches reading that tensor from the outer scope."""
    casts = {o for n in b.nodes if n.op_type == "Cast" for o in n.output}  # ORT's Cast fusion loses those
    t = b.pick_tensor(lambda t: t.name not in casts)
    if t is None:
        return False
    (mean,) = b.node("ReduceMean", [t.name], 1, "mean", keepdims=0)
    (cond,) = b.node("Greater", [mean, b.init(np.asarray(0.0, np.float32), "zero")], 1, "cond")
    branches = {}
    for key, op in (("then_branch", b.pick(("Relu", "Sigmoid", "Abs"))), ("else_branch", b.pick(("Neg", "Tanh")))):
        out = b.name(key[:4])
        branches[key] = helper.make_graph([helper.make_node(op, [t.name], [out], name=b.node_name(op))], b.name(key),
                                          [], [helper.make_tensor_value_info(out, TensorProto.FLOAT, list(t.shape))])
    b.emit("If", [cond], t.shape, "branch", **branches)
    b.tags.add("opaque:If")
    return True


def _identity(b: _Builder) -> bool:
    """Identity or inference Dropout: passed through at import."""
    t = b.pick_tensor(scalars=True)
    if t is None:
        return False
    b.emit(b.pick(("Identity", "Dropout")), [t.name], t.shape, "id")
    return True


# (builder, weight) per step; conv, matmul and the merges they allow come most often
STEPS: tuple[tuple[Callable[[_Builder], bool], int], ...] = (
    (_conv, 6), (_conv_bn, 2), (_batchnorm, 2), (_matmul, 5), (_gemm, 2), (_attention, 1), (_activation, 4),
    (_binary, 5), (_pool, 2), (_concat, 3), (_split, 3), (_transpose, 2), (_reshape, 3), (_softmax, 1),
    (_layernorm, 1), (_pad, 1), (_opaque, 3), (_identity, 1), (_embedding, 1), (_if, 1),
)


def _first_inputs(b: _Builder) -> None:
    """One to three graph inputs: an image, a sequence or a matrix, and relatives of the first."""
    world = b.pick(("image", "image", "sequence", "matrix"))
    if world == "image":
        shape: tuple[int, ...] = (int(b.pick((1, 1, 2))), int(b.pick(CHANNELS)), int(b.pick(SIZES[1:])),
                                  int(b.pick(SIZES[1:])))
    elif world == "sequence":
        shape = (int(b.pick((1, 2))), int(b.pick((1, 3, 5, 7))), int(b.pick(CHANNELS)))
    else:
        shape = (int(b.pick((1, 3, 5))), int(b.pick(CHANNELS)))
    b.add_input(shape)
    for _ in range(int(b.pick((0, 0, 1, 1, 2)))):
        relative = shape if b.chance(0.6) else tuple(d if b.chance(0.6) else 1 for d in shape)
        b.add_input(relative)
        b.tags.add("several-inputs")


def generate(seed: int, max_steps: int = 12) -> Case:
    """The model for `seed`: the same model for the same seed (and version of this file)."""
    rng = np.random.default_rng([seed, 0x7A50])
    opset = int(rng.choice(OPSETS))
    b = _Builder(rng, opset, adversarial=bool(rng.random() < 0.3))
    _first_inputs(b)
    builders, weights = zip(*STEPS)
    p = np.asarray(weights, np.float64) / sum(weights)
    want, done = int(rng.integers(2, max_steps + 1)), 0
    for _ in range(want * 6):
        if done >= want:
            break
        done += bool(builders[int(rng.choice(len(builders), p=p))](b))
    if not b.nodes or len(b.pool) == len(b.inputs):
        _activation(b)
    outputs = _outputs(b)
    graph = helper.make_graph(b.nodes, b.name("graph") if b.chance(0.5) else "main", b.inputs, outputs, b.inits)
    if b.chance(0.05) and b.inits:  # initializers also listed as (overridable) inputs
        init = b.pick(b.inits)
        graph.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
        b.tags.add("initializer-as-input")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="taso-fuzz",
                              ir_version=IR_VERSION[opset])
    b.tags.add(f"opset:{opset}")
    return Case(seed, model, frozenset(b.tags))


def _outputs(b: _Builder) -> list[onnx.ValueInfoProto]:
    """The newest tensor, most other tensors nothing reads, sometimes one that other nodes read
    too, an initializer or a graph input."""
    produced = [t for t in b.pool if t.name not in {i.name for i in b.inputs}]
    chosen = [produced[-1]] if produced else [b.pool[-1]]
    read = {x for n in b.nodes for x in n.input}
    leaves = [t for t in produced[:-1] if t.name not in read]  # most branches reach an output
    for extra in leaves[::-1][:int(b.pick((1, 2, 3, 4)))]:
        chosen.append(extra)
    if produced and b.chance(0.3):  # an output that later nodes read too
        chosen.append(b.pick(produced))
    chosen = list({t.name: t for t in chosen}.values())
    if len(chosen) > 1:
        b.tags.add("several-outputs")
    if any(t.name in read for t in chosen):
        b.tags.add("output-read-inside")
    outs = [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.shape)) for t in chosen]
    if b.chance(0.08):  # y = x + w with w an output too
        t = chosen[0]
        w = b.weight(t.shape, 1, "w")
        y = b.emit("Add", [t.name, w], t.shape, "plus_w")
        outs[0] = helper.make_tensor_value_info(y.name, TensorProto.FLOAT, list(t.shape))
        outs.append(helper.make_tensor_value_info(w, TensorProto.FLOAT, list(t.shape)))
        b.tags.add("initializer-as-output")
    if b.chance(0.04):
        x = b.inputs[0]
        outs.append(x)
        b.tags.add("input-as-output")
    if b.chance(0.08):  # two outputs that are one tensor (Identity is passed through at import)
        t = b.pick([*chosen, *b.pool[:1]])
        (alias,) = b.node("Identity", [t.name], 1, "alias")
        outs.append(helper.make_tensor_value_info(alias, TensorProto.FLOAT, list(t.shape)))
        b.tags.add("aliased-outputs")
    for t in b.int_outputs:
        outs.append(helper.make_tensor_value_info(t.name, TensorProto.INT64, list(t.shape)))
        b.tags.add("int-output")
    if b.chance(0.03):  # a static tensor's shape: a constant once imported
        (s,) = b.node("Shape", [chosen[0].name], 1, "shape")
        outs.append(helper.make_tensor_value_info(s, TensorProto.INT64, [len(chosen[0].shape)]))
        b.tags.add("constant-output")
    return outs


# ---- validity --------------------------------------------------------------------------------------

def feeds_for(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for every graph input that is not an initializer (int64 ones 0 or 1, as
    taso_py.runtime.random_arrays makes them)."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    for i in model.graph.input:
        if i.name in inits:
            continue
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.type.tensor_type.elem_type == TensorProto.INT64:
            feeds[i.name] = rng.integers(0, 2, shape).astype(np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def invalid_reason(model: onnx.ModelProto) -> str | None:
    """None when onnx's full check passes and ONNX Runtime loads and runs the model; else why not."""
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:  # the checker raises several types
        return f"onnx.checker: {str(e).strip().splitlines()[0][:200]}"
    try:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        sess.run(None, feeds_for(model))
    except Exception as e:  # ORT raises its own exception types
        return f"onnxruntime: {str(e).strip().splitlines()[0][:200]}"
    return None


# ---- mutations ---------------------------------------------------------------------------------------

MUTATIONS = ("truncate", "bitflip", "garbage", "input-dtype", "initializer-dtype", "attribute-type", "cycle",
             "self-loop", "huge-dim", "zero-dim", "negative-dim", "duplicate-output", "duplicate-initializer",
             "missing-input", "missing-initializer", "unknown-output", "wrong-rank", "bad-opset", "empty-graph",
             "unknown-op", "initializer-size", "shuffled-nodes", "dynamic-dim")


def mutate(data: bytes, seed: int, kind: str | None = None) -> tuple[str, bytes]:
    """A damaged copy of a serialized model: (what was done, the bytes). Byte-level damage for
    truncate/bitflip/garbage, a structural edit otherwise (which may by chance leave the model valid)."""
    rng = np.random.default_rng([seed, 0xBAD])
    kind = kind or str(rng.choice(MUTATIONS))
    if kind == "truncate":
        return kind, data[:int(rng.integers(0, len(data)))]
    if kind == "bitflip":
        buf = bytearray(data)
        for _ in range(int(rng.integers(1, 9))):
            i = int(rng.integers(len(buf)))
            buf[i] ^= 1 << int(rng.integers(8))
        return kind, bytes(buf)
    if kind == "garbage":
        buf = bytearray(data)
        start = int(rng.integers(len(buf)))
        span = min(int(rng.integers(1, 64)), len(buf) - start)
        buf[start:start + span] = rng.integers(0, 256, span, dtype=np.uint8).tobytes()
        return kind, bytes(buf)
    model = onnx.ModelProto.FromString(data)
    g = model.graph
    edit = _EDITS[kind]
    edit(model, g, rng)
    return kind, model.SerializeToString()


def _all_names(g: onnx.GraphProto) -> list[str]:
    return [i.name for i in g.input] + [t.name for t in g.initializer] + [o for n in g.node for o in n.output if o]


def _edit_input_dtype(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    target = g.input[int(rng.integers(len(g.input)))] if g.input else g.output[0]
    target.type.tensor_type.elem_type = int(rng.choice([TensorProto.INT64, TensorProto.STRING, TensorProto.BOOL,
                                                        TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.UINT8,
                                                        TensorProto.COMPLEX64, 0, 77]))


def _edit_initializer_dtype(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    if not g.initializer:
        return _edit_input_dtype(model, g, rng)
    t = g.initializer[int(rng.integers(len(g.initializer)))]
    t.data_type = int(rng.choice([TensorProto.INT64, TensorProto.STRING, TensorProto.DOUBLE, TensorProto.INT8,
                                  TensorProto.BFLOAT16, 99]))
    return None


def _edit_attribute_type(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    with_attrs = [n for n in g.node if n.attribute]
    if not with_attrs:
        return _edit_input_dtype(model, g, rng)
    a = with_attrs[int(rng.integers(len(with_attrs)))].attribute
    attr = a[int(rng.integers(len(a)))]
    choice = int(rng.integers(4))
    if choice == 0:
        attr.ClearField("ints")
        attr.floats.extend([1.5, -2.0])
        attr.type = onnx.AttributeProto.FLOATS
    elif choice == 1:
        attr.type = onnx.AttributeProto.STRING
        attr.s = b"\xff\xfe"
    elif choice == 2:
        attr.ClearField("ints")
        attr.ints.extend([-(2**62), 0, 2**40])
        attr.type = onnx.AttributeProto.INTS
    else:
        attr.type = onnx.AttributeProto.INT
        attr.i = -7
    return None


def _edit_cycle(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    """An early node reads a later node's output."""
    if len(g.node) < 2:
        return _edit_self_loop(model, g, rng)
    i, j = sorted(rng.choice(len(g.node), 2, replace=False).tolist())
    early, late = g.node[i], g.node[j]
    if early.input and late.output:
        early.input[int(rng.integers(len(early.input)))] = late.output[0]
    return None


def _edit_self_loop(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    n = g.node[int(rng.integers(len(g.node)))]
    if n.input and n.output:
        n.input[0] = n.output[0]


def _edit_dim(value: int) -> Callable[[onnx.ModelProto, onnx.GraphProto, np.random.Generator], None]:
    def edit(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
        targets = [*g.input, *g.output]
        t = targets[int(rng.integers(len(targets)))]
        dims = t.type.tensor_type.shape.dim
        if dims:
            d = dims[int(rng.integers(len(dims)))]
            d.dim_value = int(rng.choice([2**31, 2**40, 2**62])) if value > 0 else value
    return edit


def _edit_duplicate_output(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    """A node writes a name something else already provides."""
    names = _all_names(g)
    n = g.node[int(rng.integers(len(g.node)))]
    others = [x for x in names if x not in n.output]
    if n.output and others:
        n.output[0] = str(rng.choice(others))


def _edit_duplicate_initializer(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    if g.initializer:
        copy = g.initializer.add()
        copy.CopyFrom(g.initializer[int(rng.integers(len(g.initializer) - 1))])
        if rng.random() < 0.5:  # same name, another value
            copy.ClearField("raw_data")
            copy.ClearField("float_data")
            copy.dims[:] = [1]
            copy.data_type = TensorProto.FLOAT
            copy.float_data.append(3.0)
    elif g.input:
        g.input.append(g.input[0])


def _edit_missing_input(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    n = g.node[int(rng.integers(len(g.node)))]
    if n.input:
        n.input[int(rng.integers(len(n.input)))] = "nowhere"


def _edit_missing_initializer(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    if g.initializer:
        del g.initializer[int(rng.integers(len(g.initializer)))]
    elif g.input:
        del g.input[0]


def _edit_unknown_output(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    g.output[int(rng.integers(len(g.output)))].name = "not_produced"


def _edit_wrong_rank(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    t = g.input[int(rng.integers(len(g.input)))] if g.input else g.output[0]
    dims = t.type.tensor_type.shape.dim
    if len(dims) > 1 and rng.random() < 0.5:
        del dims[-1]
    else:
        dims.add().dim_value = 2


def _edit_bad_opset(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    choice = int(rng.integers(4))
    if choice == 0:
        model.opset_import[0].version = int(rng.choice([99, 1, 0, -3]))
    elif choice == 1:
        model.opset_import[0].domain = "com.example"
    elif choice == 2:
        del model.opset_import[:]
    else:
        model.ir_version = int(rng.choice([0, 99, 2]))


def _edit_empty_graph(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    del g.node[:]
    if rng.random() < 0.5:
        del g.output[:]


def _edit_unknown_op(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    n = g.node[int(rng.integers(len(g.node)))]
    n.op_type = str(rng.choice(["NoSuchOp", "Conv", "MatMul", "Loop", ""]))
    if rng.random() < 0.3:
        n.domain = "com.unknown"


def _edit_initializer_size(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    """Dims that do not match the stored data."""
    if not g.initializer:
        return _edit_missing_input(model, g, rng)
    t = g.initializer[int(rng.integers(len(g.initializer)))]
    if t.dims:
        t.dims[0] = int(rng.choice([t.dims[0] + 1, 0, 2**40, 2**62]))
    else:
        t.dims.append(2**33)
    return None


def _edit_shuffled_nodes(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    """Nodes out of dependency order (onnx's checker wants them sorted; the reader sorts them)."""
    nodes = list(g.node)
    del g.node[:]
    g.node.extend(nodes[i] for i in rng.permutation(len(nodes)))


def _edit_dynamic_dim(model: onnx.ModelProto, g: onnx.GraphProto, rng: np.random.Generator) -> None:
    """A named (dynamic) dimension on an input: without --input-shape, a one-line refusal."""
    dims = g.input[int(rng.integers(len(g.input)))].type.tensor_type.shape.dim
    if dims:
        dims[int(rng.integers(len(dims)))].dim_param = str(rng.choice(["N", "batch", "", "?"]))


_EDITS: dict[str, Callable[[onnx.ModelProto, onnx.GraphProto, np.random.Generator], None]] = {
    "input-dtype": _edit_input_dtype, "initializer-dtype": _edit_initializer_dtype,
    "attribute-type": _edit_attribute_type, "cycle": _edit_cycle, "self-loop": _edit_self_loop,
    "huge-dim": _edit_dim(1), "zero-dim": _edit_dim(0), "negative-dim": _edit_dim(-1),
    "duplicate-output": _edit_duplicate_output, "duplicate-initializer": _edit_duplicate_initializer,
    "missing-input": _edit_missing_input, "missing-initializer": _edit_missing_initializer,
    "unknown-output": _edit_unknown_output, "wrong-rank": _edit_wrong_rank, "bad-opset": _edit_bad_opset,
    "empty-graph": _edit_empty_graph, "unknown-op": _edit_unknown_op, "initializer-size": _edit_initializer_size,
    "shuffled-nodes": _edit_shuffled_nodes, "dynamic-dim": _edit_dynamic_dim,
}
__all__ = ["MUTATIONS", "Case", "feeds_for", "generate", "invalid_reason", "mutate"]
