"""The gRPC face of placement: servicer, proto<->domain conversion, errors, interceptors, settings, main.

A translator only: the work is placement's. Start it with `placement-server` or `server.main.serve(settings)`.
"""

__all__: list[str] = []
