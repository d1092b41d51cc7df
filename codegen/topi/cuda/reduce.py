"""Reductions (pattern "reduce", topi.reduce) on the GPU: one thread per output element, its reduce
loops serial in the thread (TVM's fallback reduction schedule, `generic.schedule_stages`).

That has the parallelism of the output: plenty for a mean over height and width (one thread
per channel and image) or a sum over the last axis of a batch of rows; a reduction to a few
outputs runs on few threads.
"""

from __future__ import annotations

from taso_py.codegen.target import CUDA
from taso_py.codegen.topi.cuda.generic import schedule_stages
from taso_py.codegen.topi.registry import register_schedule

register_schedule("reduce", target=CUDA)(schedule_stages)
