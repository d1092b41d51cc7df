"""ONNX import and export of the graph IR."""

from taso_py.onnx_io.exporter import check, save_model, to_onnx
from taso_py.onnx_io.importer import load_model
from taso_py.onnx_io.model import OnnxModel, OnnxOrigin
from taso_py.onnx_io.reader import parse_input_shapes

__all__ = ["OnnxModel", "OnnxOrigin", "check", "load_model", "parse_input_shapes", "save_model", "to_onnx"]
