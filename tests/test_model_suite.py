"""The benchmark model suite: every model is valid ONNX, runs, is deterministic and sized right.

Small models are checked on every run; the full-size paper models (up to 575 MB) only under
the ``slow`` marker, where their parameter counts are compared with the published figures.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from benchmarks.models import build, count_params, names

ALLOWED_OPS = {
    "Conv", "BatchNormalization", "Relu", "Sigmoid", "Tanh", "MaxPool", "AveragePool",
    "GlobalAveragePool", "Flatten", "Gemm", "MatMul", "Add", "Mul", "Sub", "Div", "Concat",
    "Split", "Transpose", "Reshape", "Softmax", "LayerNormalization", "Pad",
}  # fmt: skip
OPSET = {"bert": 20}  # BERT needs opset 20 for Gelu; everything else is opset 17.
SMALL_MAX_PARAMS = 2_000_000

# Published parameter counts (Inception-v3 without its auxiliary head); NasRNN has no
# published figure, so its exact count pins the cell definition instead.
FULL_PARAMS = {
    "resnet50": 25.6e6,
    "resnext50": 25.0e6,
    "inception_v3": 23.8e6,
    "squeezenet": 1.24e6,
    "bert": 85e6,
    "nasnet_a": 5.3e6,
    "nasrnn": 4_194_816,
    "vgg19": 143.7e6,
}
FULL_TOLERANCE = {"nasrnn": 0.0}


@pytest.fixture(scope="module", params=names())
def small(request: pytest.FixtureRequest) -> tuple[str, onnx.ModelProto]:
    """Each small model, built once for the whole module."""
    return request.param, build(request.param, "small")


def run_ort(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Run ``model`` once on seeded normal inputs, on 2 threads; return outputs by name."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(model.SerializeToString(), options, ["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feeds = {i.name: rng.standard_normal(i.shape).astype(np.float32) for i in session.get_inputs()}
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))


def declared_shape(value: onnx.ValueInfoProto) -> tuple[int, ...]:
    return tuple(d.dim_value for d in value.type.tensor_type.shape.dim)


def check_valid_and_runs(name: str, model: onnx.ModelProto) -> None:
    """Full ONNX check, allowed ops and opset, I/O names, finite ORT output of declared shape."""
    onnx.checker.check_model(model, full_check=True)
    ops = {n.op_type for n in model.graph.node}
    assert ops <= ALLOWED_OPS | ({"Gelu"} if name == "bert" else set()), ops
    assert [(o.domain, o.version) for o in model.opset_import] == [("", OPSET.get(name, 17))]
    assert [i.name for i in model.graph.input] == ["x" if name == "nasrnn" else "input"]
    [output] = model.graph.output
    assert output.name == "output"
    result = run_ort(model)["output"]
    assert result.shape == declared_shape(output)
    assert np.isfinite(result).all()
    assert 1e-3 < float(np.abs(result).mean()) < 1e3, "activations vanish or explode"


def test_small_model_is_valid_and_runs(small: tuple[str, onnx.ModelProto]) -> None:
    check_valid_and_runs(*small)


def test_small_model_is_small(small: tuple[str, onnx.ModelProto]) -> None:
    assert count_params(small[1]) < SMALL_MAX_PARAMS


def test_same_seed_same_bytes_other_seed_differs(small: tuple[str, onnx.ModelProto]) -> None:
    name, model = small
    assert build(name, "small", seed=0).SerializeToString() == model.SerializeToString()
    assert build(name, "small", seed=1).SerializeToString() != model.SerializeToString()


@pytest.mark.parametrize(("name", "size"), [("nope", "small"), ("resnet50", "tiny")])
def test_unknown_name_or_size_raises(name: str, size: str) -> None:
    with pytest.raises(ValueError, match="valid"):
        build(name, size)


@pytest.mark.slow
@pytest.mark.parametrize("name", names())
def test_full_model_matches_paper(name: str) -> None:
    model = build(name, "full")
    check_valid_and_runs(name, model)
    assert count_params(model) == pytest.approx(FULL_PARAMS[name], rel=FULL_TOLERANCE.get(name, 0.1))
