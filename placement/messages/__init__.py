"""The one wire model: placement.v1 protobuf messages <-> domain types (`domain`), and request and result files in
the protobuf JSON mapping (`files`). No grpc: the CLI offline, request files and the server all go through here.

One result schema: ``placement place --output json`` (offline or ``--server``) writes the protobuf JSON mapping of
`placement.v1.PlaceResponse`, with proto field names; the proto package (``v1``) is its version.
"""

from __future__ import annotations

from placement.messages import domain, files
from placement.messages.files import (
    dump_message,
    message_to_dict,
    read_request,
    request_from_dict,
    write_message,
)

__all__ = [
    "domain",
    "dump_message",
    "files",
    "message_to_dict",
    "read_request",
    "request_from_dict",
    "write_message",
]
