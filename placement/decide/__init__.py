"""The scheduler's decisions on top of the placement engine (`placement.solve`): balanced slices, a job's ideal,
place or wait, preempt, capacity, a queue placed jointly (batch) and repair with few moves; solve never imports them."""
