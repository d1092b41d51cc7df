"""Code generation: tensor expressions, schedules, lowering and the C/CUDA/accelerator backends.

`te` says what to compute, `schedule` how, `lower` turns both into loops, `backends` into
code; `topi` holds every operator's compute and schedules, `tune` searches schedule knobs, and
`graph` compiles a whole taso-py graph into one module that `runtime` loads and runs.
"""
