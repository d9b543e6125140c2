"""The domain and its hard rules: the cluster (topology), its occupancy (state), jobs and their
traffic, and the independent validator of a mapping."""
