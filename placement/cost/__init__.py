"""The step-time model, one source of truth for solver, evaluator and reports: evaluate (on top), step phases,
collectives as NCCL runs them, compute, the linear surrogate, and below them the paths and the report types."""
