"""placement: decide which GPU each rank of a distributed job runs on.

The domain library: cluster topology and live state, job traffic, the communication-time model, the
independent validator, the solver strategies, importers and exporters. It never imports grpc.
"""

__version__ = "0.1.0"
