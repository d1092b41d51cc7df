"""Default GPU schedules (`codegen.target.CUDA`) for every pattern of the operator library.

The operator library's package imports this one, so `schedule_group(outputs, cfg, target=CUDA)`
finds them after `from taso_py.codegen import topi`.
"""

from taso_py.codegen.topi import conv as _conv  # noqa: F401  (registers conv2d and, through linalg, matmul)
from taso_py.codegen.topi.cuda import conv_transpose, dense, generic, norm, reduce  # noqa: F401  (register)
