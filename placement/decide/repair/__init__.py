"""Repairing a running job with few moves: the Pareto sweep and answers (run), its input, the
move-capped searches and the CP-SAT move program."""
