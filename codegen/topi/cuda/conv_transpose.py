"""Transposed convolutions on the GPU: conv2d's template (`dense.schedule_conv2d`), since the
accumulator has the same form: pixel-major, one reduce axis, output channels last. Each thread
computes `tile_oc` output channels of one output pixel, or, for few outputs and a long reduction,
a slice of one channel's reduction; bias and the NCHW output are a second kernel."""

from __future__ import annotations

from taso_py.codegen.target import CUDA
from taso_py.codegen.topi.cuda.dense import schedule_conv2d
from taso_py.codegen.topi.registry import register_schedule

register_schedule("conv_transpose2d", target=CUDA)(schedule_conv2d)
