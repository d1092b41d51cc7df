"""A thin layer over ``onnx.helper`` so each model file reads like its paper's layer list.

Weights are drawn from one seeded ``numpy`` generator in construction order, which makes
a build with the same seed byte-identical.  Initialisation follows He/Glorot scaling and
BatchNormalization gets random but sane statistics, so activations stay O(1) through deep
nets and runtimes can be compared with relative-error tests.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IntOrPair = int | Sequence[int]
Shape = Sequence[int]

# BatchNorm below multiplies activation variance by E[scale^2] * E[1/var] for
# scale, var ~ U(0.5, 1.5); conv_bn divides its He gain by this so deep chains stay O(1).
BN_VARIANCE_GAIN = 13 / 12 * math.log(3)


def count_params(model: onnx.ModelProto) -> int:
    """Float weights only: int64 shapes/sizes and scalar constants are not parameters."""
    return sum(int(np.prod(t.dims)) for t in model.graph.initializer if t.data_type == TensorProto.FLOAT and t.dims)


def _pair(value: IntOrPair) -> tuple[int, int]:
    """Expand ``k`` to ``(k, k)`` the way framework layer constructors do."""
    if isinstance(value, int):
        return value, value
    return int(value[0]), int(value[1])


def _onnx_pads(pads: IntOrPair | None, kernel: tuple[int, int]) -> list[int]:
    """ONNX ``[top, left, bottom, right]`` pads; ``None`` means k//2 ("same" for odd k)."""
    if pads is None:
        pads = (kernel[0] // 2, kernel[1] // 2)
    if isinstance(pads, int):
        return [pads] * 4
    if len(pads) == 2:
        return [int(pads[0]), int(pads[1]), int(pads[0]), int(pads[1])]
    return [int(p) for p in pads]


class OnnxBuilder:
    """Accumulates nodes and seeded initializers, then wraps them in a ModelProto."""

    def __init__(self, name: str, seed: int) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self._counters: dict[str, int] = {}

    # ----------------------------------------------------------------- graph plumbing
    def fresh(self, prefix: str) -> str:
        """Unique, deterministic name: ``prefix_0``, ``prefix_1``, ..."""
        index = self._counters.get(prefix, 0)
        self._counters[prefix] = index + 1
        return f"{prefix}_{index}"

    def input(self, name: str, shape: Shape) -> str:
        """Declare a float32 graph input."""
        self.inputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
        return name

    def const(self, value: np.ndarray, prefix: str) -> str:
        """Store ``value`` as an initializer and return its name."""
        name = self.fresh(prefix)
        self.initializers.append(numpy_helper.from_array(value, name))
        return name

    def int64s(self, values: Sequence[int], prefix: str) -> str:
        """1-D int64 initializer (shapes, split sizes, pads)."""
        return self.const(np.asarray(values, dtype=np.int64), prefix)

    def normal(self, shape: Shape, std: float, prefix: str) -> str:
        """Zero-mean Gaussian float32 weight."""
        value = self.rng.normal(0.0, std, size=tuple(shape)).astype(np.float32)
        return self.const(value, prefix)

    def uniform(self, shape: Shape, low: float, high: float, prefix: str) -> str:
        """Uniform float32 weight (BatchNorm scale/variance, LayerNorm gamma)."""
        return self.const(self.rng.uniform(low, high, size=tuple(shape)).astype(np.float32), prefix)

    def op(self, op_type: str, inputs: Sequence[str], **attrs: object) -> str:
        """Append a single-output node; its output is named after the op type."""
        return self.multi_op(op_type, inputs, 1, **attrs)[0]

    def multi_op(self, op_type: str, inputs: Sequence[str], n_out: int, **attrs: object) -> list[str]:
        """Append a node with ``n_out`` outputs (Split)."""
        node_name = self.fresh(op_type.lower())
        outputs = [f"{node_name}_out{i}" if n_out > 1 else node_name for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outputs, name=node_name, **attrs))
        return outputs

    # ------------------------------------------------------------ elementwise / shape ops
    def relu(self, x: str) -> str:
        return self.op("Relu", [x])

    def sigmoid(self, x: str) -> str:
        return self.op("Sigmoid", [x])

    def tanh(self, x: str) -> str:
        return self.op("Tanh", [x])

    def gelu(self, x: str) -> str:
        """Exact (erf) GELU; needs opset 20."""
        return self.op("Gelu", [x])

    def add(self, a: str, b: str) -> str:
        return self.op("Add", [a, b])

    def mul(self, a: str, b: str) -> str:
        return self.op("Mul", [a, b])

    def matmul(self, a: str, b: str) -> str:
        return self.op("MatMul", [a, b])

    def concat(self, xs: Sequence[str], axis: int = 1) -> str:
        return self.op("Concat", list(xs), axis=axis)

    def split(self, x: str, sizes: Sequence[int], axis: int) -> list[str]:
        """Opset-13+ Split with the sizes as an int64 input."""
        return self.multi_op("Split", [x, self.int64s(sizes, "split_sizes")], len(sizes), axis=axis)

    def reshape(self, x: str, shape: Shape) -> str:
        return self.op("Reshape", [x, self.int64s(shape, "shape")])

    def transpose(self, x: str, perm: Sequence[int]) -> str:
        return self.op("Transpose", [x], perm=list(perm))

    def softmax(self, x: str, axis: int = -1) -> str:
        return self.op("Softmax", [x], axis=axis)

    def flatten(self, x: str) -> str:
        return self.op("Flatten", [x], axis=1)

    def pad(self, x: str, pads: Sequence[int]) -> str:
        """Constant zero Pad; negative entries crop, as in ONNX."""
        return self.op("Pad", [x, self.int64s(pads, "pads")], mode="constant")

    # ------------------------------------------------------------------- conv layers
    def conv(
        self,
        x: str,
        cin: int,
        cout: int,
        kernel: IntOrPair,
        stride: IntOrPair = 1,
        pads: IntOrPair | None = None,
        group: int = 1,
        gain: float = 2.0,
    ) -> str:
        """Conv with bias; weights ~ N(0, gain/fan_in) (He for gain 2, i.e. ReLU inputs)."""
        kh, kw = _pair(kernel)
        fan_in = cin // group * kh * kw
        weight = self.normal((cout, cin // group, kh, kw), (gain / fan_in) ** 0.5, "conv_w")
        bias = self.normal((cout,), 0.01, "conv_b")
        return self.op(
            "Conv",
            [x, weight, bias],
            kernel_shape=[kh, kw],
            strides=list(_pair(stride)),
            pads=_onnx_pads(pads, (kh, kw)),
            group=group,
        )

    def batch_norm(self, x: str, channels: int, eps: float = 1e-5) -> str:
        """Inference BatchNorm with random statistics near the identity."""
        c = (channels,)
        scale = self.uniform(c, 0.5, 1.5, "bn_scale")
        bias = self.normal(c, 0.1, "bn_bias")
        mean = self.normal(c, 0.1, "bn_mean")
        var = self.uniform(c, 0.5, 1.5, "bn_var")
        return self.op("BatchNormalization", [x, scale, bias, mean, var], epsilon=eps)

    def conv_bn(
        self,
        x: str,
        cin: int,
        cout: int,
        kernel: IntOrPair,
        stride: IntOrPair = 1,
        pads: IntOrPair | None = None,
        group: int = 1,
        relu: bool = True,
        eps: float = 1e-5,
        gain: float = 2.0,
    ) -> str:
        """The ubiquitous conv -> BN (-> ReLU) unit, variance-preserving in expectation."""
        y = self.conv(x, cin, cout, kernel, stride, pads, group, gain / BN_VARIANCE_GAIN)
        y = self.batch_norm(y, cout, eps)
        return self.relu(y) if relu else y

    def separable_conv_bn(self, x: str, cin: int, cout: int, kernel: int, stride: int = 1, eps: float = 1e-5) -> str:
        """Depthwise conv (group=cin) -> 1x1 pointwise conv -> BN, no nonlinearity between."""
        depthwise = self.conv(x, cin, cin, kernel, stride, group=cin)
        pointwise = self.conv(depthwise, cin, cout, 1, gain=1.0 / BN_VARIANCE_GAIN)
        return self.batch_norm(pointwise, cout, eps)

    # ------------------------------------------------------------------------- pools
    def max_pool(
        self,
        x: str,
        kernel: IntOrPair,
        stride: IntOrPair,
        pads: IntOrPair = 0,
        ceil_mode: bool = False,
    ) -> str:
        return self._pool("MaxPool", x, kernel, stride, pads, ceil_mode=int(ceil_mode))

    def avg_pool(
        self,
        x: str,
        kernel: IntOrPair,
        stride: IntOrPair,
        pads: IntOrPair,
        *,
        count_include_pad: bool,
    ) -> str:
        """AveragePool; callers must say how padding counts (PyTorch vs TF semantics differ)."""
        return self._pool("AveragePool", x, kernel, stride, pads, count_include_pad=int(count_include_pad))

    def _pool(self, op_type: str, x: str, kernel: IntOrPair, stride: IntOrPair, pads: IntOrPair, **extra: int) -> str:
        kh, kw = _pair(kernel)
        return self.op(
            op_type, [x], kernel_shape=[kh, kw], strides=list(_pair(stride)), pads=_onnx_pads(pads, (kh, kw)), **extra
        )

    def global_avg_pool(self, x: str) -> str:
        return self.op("GlobalAveragePool", [x])

    # ------------------------------------------------------------------ dense layers
    def gemm(self, x: str, fin: int, fout: int, gain: float = 1.0) -> str:
        """Fully-connected layer as one Gemm (weight stored [out, in], transB=1)."""
        weight = self.normal((fout, fin), (gain / fin) ** 0.5, "fc_w")
        bias = self.normal((fout,), 0.01, "fc_b")
        return self.op("Gemm", [x, weight, bias], transB=1)

    def linear(self, x: str, fin: int, fout: int, gain: float = 1.0) -> str:
        """Fully-connected layer as MatMul + Add (works on rank-3 activations)."""
        weight = self.normal((fin, fout), (gain / fin) ** 0.5, "linear_w")
        return self.add(self.matmul(x, weight), self.normal((fout,), 0.01, "linear_b"))

    def classifier(self, x: str, channels: int, classes: int) -> str:
        """GlobalAveragePool -> Flatten -> Gemm head shared by the CNNs."""
        return self.gemm(self.flatten(self.global_avg_pool(x)), channels, classes)

    def layer_norm(self, x: str, dim: int, eps: float = 1e-12) -> str:
        """LayerNormalization over the last axis with random gamma/beta near identity."""
        gamma = self.uniform((dim,), 0.5, 1.5, "ln_gamma")
        beta = self.normal((dim,), 0.1, "ln_beta")
        return self.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=eps)

    # ------------------------------------------------------------- attention pieces
    def split_heads(self, x: str, seq: int, heads: int, head_dim: int, keys: bool = False) -> str:
        """[1, S, H] -> [1, heads, S, d]; keys go to [1, heads, d, S] ready for Q @ K^T."""
        perm = [0, 2, 3, 1] if keys else [0, 2, 1, 3]
        return self.transpose(self.reshape(x, [1, seq, heads, head_dim]), perm)

    def merge_heads(self, x: str, seq: int, hidden: int) -> str:
        """[1, heads, S, d] -> [1, S, heads * d]."""
        return self.reshape(self.transpose(x, [0, 2, 1, 3]), [1, seq, hidden])

    # ------------------------------------------------------------------------ output
    def model(self, outputs: dict[str, tuple[str, Shape]], opset: int) -> onnx.ModelProto:
        """Rename each produced tensor to its graph-output name and wrap it in a ModelProto."""
        value_infos = []
        for out_name, (tensor, shape) in outputs.items():
            self._rename(tensor, out_name)
            value_infos.append(helper.make_tensor_value_info(out_name, TensorProto.FLOAT, list(shape)))
        graph = helper.make_graph(self.nodes, self.name, self.inputs, value_infos, self.initializers)
        opsets = [helper.make_opsetid("", opset)]
        return helper.make_model(
            graph,
            opset_imports=opsets,
            ir_version=helper.find_min_ir_version_for(opsets),
            producer_name="taso-py benchmarks",
        )

    def _rename(self, old: str, new: str) -> None:
        """Rename a tensor everywhere (avoids an Identity node for the graph output)."""
        for node in self.nodes:
            node.output[:] = [new if o == old else o for o in node.output]
            node.input[:] = [new if i == old else i for i in node.input]
