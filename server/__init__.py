"""The gRPC face of placement: servicers, errors, interceptors, settings, main (proto<->domain is placement.messages).

A translator only: the work is placement's. Start it with `placement-server` or `server.main.serve(settings)`.
"""

__all__: list[str] = []
