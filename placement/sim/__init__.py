"""Simulation and studies: what-if sweeps, trace replay, where they run (executors), and the
synthetic scenarios they and the benchmarks use."""
