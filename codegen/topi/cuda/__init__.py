"""Default GPU schedules (target "cuda") for every pattern of the operator library.

Importing this package registers them, and the compute definitions they schedule:
`import codegen.topi.cuda`, then `schedule_group(outputs, cfg, target="cuda")`.
"""

from taso_py.codegen.topi import conv as _conv  # noqa: F401  (registers conv2d and, through linalg, matmul)
from taso_py.codegen.topi.cuda import dense, generic, norm  # noqa: F401  (register)
