"""Generated protobuf and gRPC stubs of protos/placement/v1 (scripts/gen_protos.py); never edit by hand.

`placement_pb2` holds the messages (protobuf only, no grpc); `placement_pb2_grpc` the service stubs.
"""
