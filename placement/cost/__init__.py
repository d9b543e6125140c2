"""The step-time model, one source of truth for solver, evaluator and reports: evaluate, step phases,
collectives as NCCL runs them, compute, and the linear surrogate."""
