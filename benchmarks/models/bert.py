"""BERT-base encoder stack (Devlin et al. 2019) on given hidden states, post-LayerNorm.

Q, K and V are separate MatMul+Add projections of the same input, the pattern TASO merges
into one wider MatMul.  No embeddings and no attention mask: input is [1, seq, hidden].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx

from .builder import OnnxBuilder


@dataclass(frozen=True)
class BertConfig:
    layers: int
    hidden: int
    heads: int
    ffn: int
    seq: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


CONFIGS = {
    "full": BertConfig(layers=12, hidden=768, heads=12, ffn=3072, seq=64),
    "small": BertConfig(layers=2, hidden=64, heads=4, ffn=256, seq=16),
}


def _self_attention(b: OnnxBuilder, x: str, cfg: BertConfig) -> str:
    """softmax(Q K^T / sqrt(d)) V per head, then the output projection."""
    h, s = cfg.hidden, cfg.seq
    q = b.split_heads(b.linear(x, h, h), s, cfg.heads, cfg.head_dim)
    k = b.split_heads(b.linear(x, h, h), s, cfg.heads, cfg.head_dim, keys=True)
    v = b.split_heads(b.linear(x, h, h), s, cfg.heads, cfg.head_dim)
    scale = b.const(np.float32(1 / math.sqrt(cfg.head_dim)), "attn_scale")
    probs = b.softmax(b.mul(b.matmul(q, k), scale))
    return b.linear(b.merge_heads(b.matmul(probs, v), s, h), h, h)


def _encoder_layer(b: OnnxBuilder, x: str, cfg: BertConfig) -> str:
    """Attention and GELU feed-forward sublayers, each followed by residual + LayerNorm."""
    x = b.layer_norm(b.add(x, _self_attention(b, x, cfg)), cfg.hidden)
    ffn = b.linear(b.gelu(b.linear(x, cfg.hidden, cfg.ffn)), cfg.ffn, cfg.hidden)
    return b.layer_norm(b.add(x, ffn), cfg.hidden)


def bert(size: str, seed: int) -> onnx.ModelProto:
    """BERT-base: 12 layers, hidden 768, 12 heads, FFN 3072, seq 64; ~85M parameters."""
    cfg = CONFIGS[size]
    b = OnnxBuilder("bert", seed)
    x = b.input("input", [1, cfg.seq, cfg.hidden])
    for _ in range(cfg.layers):
        x = _encoder_layer(b, x, cfg)
    return b.model({"output": (x, [1, cfg.seq, cfg.hidden])}, opset=20)
