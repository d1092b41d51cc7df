"""The operator library: a compute definition and a default CPU schedule for every operator.

Importing the package registers every family (see `registry`).
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
from taso_py.codegen.topi import constants, elementwise, injective, layout, norm, pool, winograd  # noqa: F401  (register)
