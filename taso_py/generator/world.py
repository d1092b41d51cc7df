"""What the enumerator builds graphs from: worlds of input tensors and each operator's choices.

A *world* is a set of named inputs with concrete shapes, chosen so that the operators of
interest apply to them (2-D matrices for matmul, an NCHW activation with 3x3 and 1x1 weights
for convolutions). Inputs are *data* or *weights*: convolution kernels and enlarge take
weight-only tensors, convolution and pooling inputs are data, which keeps the enumeration on
graphs a model can contain.

An operator's *choices* are the attribute values the enumerator tries for given arguments.
Values that follow from shapes (split sizes, constant sizes, groups) are `CDim`s, so the rule
states them as `dim(...)` expressions. A graph is only kept where the operator's own shape
rule (`sym_shape`) accepts the arguments, so a choice may be offered where it will not fit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from taso_py import ops
from taso_py.generator.concolic import CDim, Lin
from taso_py.ops.schema import NoAttrs, OpDef

AttrChoice = dict[str, Any]


@dataclass(frozen=True)
class Input:
    name: str
    shape: tuple[int, ...]
    weight: bool = False  # a model's constant (kernel, matrix) rather than an activation


@dataclass(frozen=True)
class World:
    name: str
    inputs: tuple[Input, ...]
    ops: tuple[str, ...]  # the operators enumerated over these inputs
    extra_ops: int = 0  # operators beyond --max-ops: a narrow world can afford to go deeper
    weight_ops: tuple[str, ...] | None = None  # the operators that may take weights only (None: all)
    data_ops: tuple[str, ...] | None = None  # the operators that may take data (None: all)
    # graphs of more than `narrow_above` operators use only `narrow_ops` (None: no limit); a wide
    # world stays whole where it is cheap and keeps to the operators models merge beyond that
    narrow_above: int | None = None
    narrow_ops: tuple[str, ...] = ()
    # the operators the world exists for: chosen without any of them, it only repeats the others' rules
    purpose: tuple[str, ...] = ()

    def may_apply(self, op: str, weights_only: bool) -> bool:
        allowed = self.weight_ops if weights_only else self.data_ops
        return allowed is None or op in allowed

    def narrow(self, size: int) -> bool:
        """Whether a graph of `size` operators may only use `narrow_ops`."""
        return self.narrow_above is not None and size > self.narrow_above

    def input(self, name: str) -> Input:
        return next(i for i in self.inputs if i.name == name)


@dataclass(frozen=True)
class ArgView:
    """What a choice function may look at: an argument's shape, whether it is weight-only, its operator."""

    shape: tuple[CDim, ...]
    weight: bool
    producer: str | None  # the operator that computed it; None for an input
    leaves: frozenset[str] = frozenset()  # the inputs it is computed from


@dataclass(frozen=True)
class GenOp:
    """An operator as the enumerator uses it: how many tensor arguments, and its choices."""

    name: str
    arity: int
    choices: Callable[[Sequence[ArgView], World], Iterator[AttrChoice]]
    commutative: bool = False
    needs: tuple[str | None, ...] = field(default=())  # per argument: "data", "weight" or None
    optional: int = 0  # trailing arguments it may also take (a convolution's bias)

    @property
    def arities(self) -> range:
        return range(self.arity, self.arity + self.optional + 1)


def _plain(args: Sequence[ArgView], world: World) -> Iterator[AttrChoice]:
    yield {}


def _scalar(args: Sequence[ArgView], world: World) -> Iterator[AttrChoice]:
    yield {"scale": 0.5}


def _transpose(args: Sequence[ArgView], world: World) -> Iterator[AttrChoice]:
    if len(args[0].shape) == 2:
        yield {"perm": (1, 0)}


def _concat(args: Sequence[ArgView], world: World) -> Iterator[AttrChoice]:
    """Any axis of a matrix; batch and channels of an NCHW tensor (as in models). Never a weight stacked
    with itself: no model stores one, and the rules it makes only pad merges with copies."""
    if all(a.weight for a in args) and args[0].leaves & args[1].leaves:
        return
    rank = len(args[0].shape)
    for axis in range(rank if rank < 4 else 2):
        yield {"axis": axis}


def _split(args: Sequence[ArgView], world: World) -> Iterator[AttrChoice]:
    """Cut an axis where a concatenation joined it: between the parts of its size's sum.

    Not right after the concatenation itself: `split(concat(a, b))` is `(a, b)`, and graphs
    containing it only multiply the candidates that the split-concat axioms already explain."""
    if args[0].producer == "concat":
        return
    for axis, d in enumerate(args[0].shape):
        parts = d.sym.parts
        for cut in range(1, len(parts)):
            head, tail = Lin(parts[:cut]), Lin(parts[cut:], d.sym.const)
            yield {"axis": axis, "sizes": (CDim(head.value, head), CDim(tail.value, tail))}


def _same_pad(kernel: int) -> int:
    return (kernel - 1) // 2


def _conv(args: Sequence[ArgView], world: World) -> Iterator[AttrChoice]:
    x, w = args[:2]
    if len(x.shape) != 4 or len(w.shape) != 4:
        return
    kh, kw = w.shape[2].value, w.shape[3].value
    pad = (_same_pad(kh), _same_pad(kw)) * 2
    groups: tuple[Any, ...] = (1,) if w.shape[1].value != 1 else (1, x.shape[1])
    for g in groups:
        for act in ("none", "relu"):
            yield {"stride": (1, 1), "pad": pad, "groups": g, "act": act}


def _pool(args: Sequence[ArgView], world: World) -> Iterator[AttrChoice]:
    if len(args[0].shape) == 4:
        yield {"kernel": (3, 3), "stride": (1, 1), "pad": (1, 1, 1, 1)}


def _avgpool(args: Sequence[ArgView], world: World) -> Iterator[AttrChoice]:
    for choice in _pool(args, world):
        yield {**choice, "count_include_pad": True}


def _enlarge(args: Sequence[ArgView], world: World) -> Iterator[AttrChoice]:
    w = args[0].shape
    if len(w) == 4 and (w[2].value, w[3].value) == (1, 1):
        yield {"kernel": (3, 3)}


def _defaults(args: Sequence[ArgView], world: World) -> Iterator[AttrChoice]:
    """ONNX's defaults (hardsigmoid's alpha and beta, leaky_relu's slope, gelu's erf form)."""
    yield {}


def _clip(args: Sequence[ArgView], world: World) -> Iterator[AttrChoice]:
    yield {"min": 0.0, "max": 6.0}  # ReLU6, the bound models use


def _slice(args: Sequence[ArgView], world: World) -> Iterator[AttrChoice]:
    """Each part of an axis a concatenation joined, as split cuts it: a fused projection's pieces.
    Not right after the concatenation (axioms `slice-concat-*`)."""
    for choice in _split(args, world):
        head, tail = choice["sizes"]
        yield {"starts": (0,), "ends": (head,), "axes": (choice["axis"],), "steps": (1,)}
        yield {"starts": (head,), "ends": (head + tail,), "axes": (choice["axis"],), "steps": (1,)}


def _reduce(args: Sequence[ArgView], world: World) -> Iterator[AttrChoice]:
    for axis in range(len(args[0].shape)):
        yield {"axes": (axis,), "keepdims": True}


def _data_channels(world: World) -> Iterator[CDim]:
    for i in world.inputs:
        if len(i.shape) == 4 and not i.weight:
            yield CDim.of(i.name, 1, i.shape[1])


def _const_imm(args: Sequence[ArgView], world: World) -> Iterator[AttrChoice]:
    for i in world.inputs:
        if len(i.shape) == 2:
            yield {"n": CDim.of(i.name, 1, i.shape[1])}


def _channel_constant(args: Sequence[ArgView], world: World) -> Iterator[AttrChoice]:
    """const_iconv and const_pool: a 3x3 kernel for each data input's channels."""
    for c in _data_channels(world):
        yield {"channels": c, "kernel": (3, 3)}


@dataclass(frozen=True)
class Choices:
    """What the enumerator needs of an operator beyond its table entry: its attribute choices, and
    per argument whether it must be "data" or "weight" (a weights-only entry's are all weights)."""

    choices: Callable[[Sequence[ArgView], World], Iterator[AttrChoice]]
    needs: tuple[str | None, ...] = ()


# The operators with attributes, next to their choices; an operator without attributes needs no entry.
CHOICES: dict[str, Choices] = {
    "scalar_mul": Choices(_scalar),
    "transpose": Choices(_transpose),
    "concat": Choices(_concat),
    "split": Choices(_split),
    "conv2d": Choices(_conv, needs=("data", "weight", "weight")),
    "maxpool2d": Choices(_pool, needs=("data",)),
    "avgpool2d": Choices(_avgpool, needs=("data",)),
    "enlarge": Choices(_enlarge),
    "const_imm": Choices(_const_imm),
    "clip": Choices(_clip),
    "hardsigmoid": Choices(_defaults),
    "leaky_relu": Choices(_defaults),
    "gelu": Choices(_defaults),
    "slice": Choices(_slice),
    "reduce_mean": Choices(_reduce),
    "reduce_sum": Choices(_reduce),
    "reduce_max": Choices(_reduce),
    "const_iconv": Choices(_channel_constant),
    "const_pool": Choices(_channel_constant),
}


def gen_op(op: OpDef) -> GenOp | None:
    """`op` as the enumerator uses it: arity and commutativity from the table (a variadic operator
    takes two arguments), choices from CHOICES; None where it has attributes but no choices."""
    spec = CHOICES.get(op.name) or (Choices(_plain) if op.attrs is NoAttrs else None)
    if spec is None or not op.algebra or not op.verifiable:
        return None
    arity = len(op.inputs) - op.optional + (1 if op.variadic else 0)
    needs = ("weight",) * arity if op.weights_only else spec.needs
    return GenOp(op.name, arity, spec.choices, commutative=op.commutative, needs=needs, optional=op.optional)


GEN_OPS: dict[str, GenOp] = {g.name: g for g in map(gen_op, ops.OPS.values()) if g is not None}

# TASO's operator set
TASO_OPS = ("matmul", "add", "mul", "relu", "scalar_mul", "transpose", "concat", "split", "conv2d", "maxpool2d",
            "avgpool2d", "enlarge", "const_imm", "const_iconv", "const_pool")

_ACTIVATION_OPS = ("concat", "split", "clip", "hardswish", "hardsigmoid", "silu", "leaky_relu", "gelu", "sigmoid",
                   "tanh")
_REDUCE_OPS = ("reduce_mean", "reduce_sum", "reduce_max")

# The default worlds. Dims are small (fast fingerprints) but distinct where roles differ.
# The two wide worlds have every operator up to three; beyond, only the operators of the merges
# (stacking, the layer, splitting, padding a kernel): with all of them, four operators over the
# matrices alone made 6 million graphs and 129,313 candidates for the prover (see the README).
WORLDS: tuple[World, ...] = (
    World("matrix", (Input("a", (4, 4)), Input("b", (4, 4)), Input("c", (4, 4))),
          ("matmul", "add", "mul", "relu", "scalar_mul", "transpose", "concat", "split", "const_imm"),
          narrow_above=3, narrow_ops=("matmul", "concat", "split")),
    World("conv", (Input("x", (1, 2, 4, 4)), Input("w", (2, 2, 3, 3), weight=True),
                   Input("v", (2, 2, 3, 3), weight=True), Input("u", (2, 2, 1, 1), weight=True)),
          ("conv2d", "add", "relu", "maxpool2d", "avgpool2d", "concat", "split", "enlarge",
           "const_iconv", "const_pool"), narrow_above=3, narrow_ops=("conv2d", "concat", "split", "enlarge")),
    # Merges as models contain them: convolutions with biases (a 1x1 kernel `u` beside the 3x3 ones),
    # and projections of rank-3 activations, as in transformers. Stacking kernels and biases takes
    # two weight-only concats, so these worlds go one operator deeper, and stay small enough to:
    # weights are only stacked (concat) or padded (enlarge), data only goes through the layers and
    # splits (the other worlds have the rest), and kernels change the channel count, so layers do
    # not chain: siblings are what merge. (A projection's bias add would take a fifth operator.)
    World("conv-bias", (Input("x", (1, 3, 4, 4)), Input("w", (2, 3, 3, 3), weight=True),
                        Input("v", (2, 3, 3, 3), weight=True), Input("u", (2, 3, 1, 1), weight=True),
                        Input("p", (2,), weight=True), Input("q", (2,), weight=True)),
          ("conv2d", "concat", "split", "enlarge"), extra_ops=1, weight_ops=("concat", "enlarge"),
          data_ops=("conv2d", "split")),
    World("dense", (Input("x", (2, 3, 4)), Input("w", (4, 5), weight=True), Input("v", (4, 5), weight=True)),
          ("matmul", "concat", "split"), extra_ops=1, weight_ops=("concat",), data_ops=("matmul", "split")),
    # The operators of mobile and transformer models where they meet the merges: activations through
    # concat and split as relu goes; exporters' slices of a fused projection (its pieces as separate
    # projections, and back); reductions over concatenated inputs.
    World("activation", (Input("a", (2, 4)), Input("b", (2, 4))),
          _ACTIVATION_OPS, purpose=_ACTIVATION_OPS[2:]),
    # (`select`: its sizes let only x multiply a weight, so projections cannot chain; the slices are what pair.)
    World("select", (Input("x", (2, 6, 4)), Input("w", (4, 5), weight=True), Input("v", (4, 3), weight=True)),
          ("matmul", "concat", "slice"), extra_ops=1, weight_ops=("concat",), data_ops=("matmul", "slice"),
          purpose=("slice",)),
    World("reduce", (Input("a", (2, 4)), Input("b", (2, 4)), Input("c", (3, 4))),
          ("concat", "add", *_REDUCE_OPS), narrow_above=2, narrow_ops=("concat", *_REDUCE_OPS), purpose=_REDUCE_OPS),
)

# The operators of the shipped library: TASO's and those of the worlds above
LIBRARY_OPS = (*TASO_OPS, *_ACTIVATION_OPS[2:], "slice", *_REDUCE_OPS)
