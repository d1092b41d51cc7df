"""Code generation: tensor expressions, schedules, lowering and the C/CUDA/accelerator backends.

Empty until code generation lands (issue 7); the package exists so the layout and the
installed distribution are what later work builds on.
"""
