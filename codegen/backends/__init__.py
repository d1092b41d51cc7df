"""Code generation backends: C (CPU), CUDA and the simulated accelerator."""
