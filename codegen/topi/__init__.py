"""The operator library: a compute definition for every operator and its schedules on each target.

Importing the package registers every family and every target's schedules (see `registry`).
"""

from taso_py.codegen.topi.registry import (
    COMPUTE,
    SCHEDULE,
    compute,
    register_compute,
    register_schedule,
    schedule_group,
)

__all__ = ["COMPUTE", "SCHEDULE", "compute", "register_compute", "register_schedule", "schedule_group"]
from taso_py.codegen.topi import (  # noqa: F401  (register)
    constants,
    conv_transpose,
    cuda,
    elementwise,
    indexing,
    injective,
    layout,
    norm,
    pool,
    reduce,
    resize,
    winograd,
)
