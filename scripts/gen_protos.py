"""Regenerate the committed Python stubs of protos/placement/v1 into placement/v1 (or into --out).

One command: ``python scripts/gen_protos.py``. tests/test_proto_fresh.py regenerates into a temp dir and diffs.

It runs grpc_tools.protoc (messages, .pyi, services) with the proto root as include path, so the generated
imports read ``from placement.v1 import placement_pb2``, and writes a typed ``placement_pb2_grpc.pyi`` from the
descriptors (grpc_tools emits none) so mypy --strict checks the servicer and the client.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

__all__ = ["GENERATED_SUFFIXES", "generate", "main"]

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PACKAGE_DIR = Path("placement") / "v1"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")

_GRPC_PYI_HEAD = '''"""Typed interface of {module} (written by scripts/gen_protos.py from {proto}; do not edit)."""

from collections.abc import Callable, Iterator, Sequence
from typing import Generic, Protocol, TypeVar

import grpc

from {package} import {pb2}

_Req = TypeVar("_Req", contravariant=True)
_Resp = TypeVar("_Resp", covariant=True)
_Metadata = Sequence[tuple[str, str | bytes]] | None

class _UnaryUnary(Protocol, Generic[_Req, _Resp]):
    def __call__(self, request: _Req, timeout: float | None = ..., metadata: _Metadata = ...,
                 credentials: grpc.CallCredentials | None = ..., wait_for_ready: bool | None = ...,
                 compression: grpc.Compression | None = ...) -> _Resp: ...
    def with_call(self, request: _Req, timeout: float | None = ..., metadata: _Metadata = ...,
                  credentials: grpc.CallCredentials | None = ..., wait_for_ready: bool | None = ...,
                  compression: grpc.Compression | None = ...) -> tuple[_Resp, grpc.Call]: ...
    def future(self, request: _Req, timeout: float | None = ..., metadata: _Metadata = ...,
               credentials: grpc.CallCredentials | None = ..., wait_for_ready: bool | None = ...,
               compression: grpc.Compression | None = ...) -> grpc.Future: ...

class _UnaryStream(Protocol, Generic[_Req, _Resp]):
    def __call__(self, request: _Req, timeout: float | None = ..., metadata: _Metadata = ...,
                 credentials: grpc.CallCredentials | None = ..., wait_for_ready: bool | None = ...,
                 compression: grpc.Compression | None = ...) -> Iterator[_Resp]: ...

class _StreamUnary(Protocol, Generic[_Req, _Resp]):
    def __call__(self, request_iterator: Iterator[_Req], timeout: float | None = ..., metadata: _Metadata = ...,
                 credentials: grpc.CallCredentials | None = ..., wait_for_ready: bool | None = ...,
                 compression: grpc.Compression | None = ...) -> _Resp: ...

class _StreamStream(Protocol, Generic[_Req, _Resp]):
    def __call__(self, request_iterator: Iterator[_Req], timeout: float | None = ..., metadata: _Metadata = ...,
                 credentials: grpc.CallCredentials | None = ..., wait_for_ready: bool | None = ...,
                 compression: grpc.Compression | None = ...) -> Iterator[_Resp]: ...
'''


def _grpc_pyi(fds: object, proto: str) -> str:
    """The typed .pyi of one proto file's services, from its FileDescriptorProto."""
    from google.protobuf import descriptor_pb2

    assert isinstance(fds, descriptor_pb2.FileDescriptorSet)
    fd = next(f for f in fds.file if f.name == proto)
    module = Path(proto).stem + "_pb2"
    package = ".".join(Path(proto).parent.parts)
    prefix = "." + fd.package + "."

    def pytype(full: str) -> str:
        if not full.startswith(prefix):
            raise SystemExit(f"{proto}: message {full} is from another package; extend gen_protos.py")
        return f"{module}.{full[len(prefix):]}"

    out = [_GRPC_PYI_HEAD.format(module=module + "_grpc", proto=proto, package=package, pb2=module)]
    for svc in fd.service:
        kinds = []
        for m in svc.method:
            req, resp = pytype(m.input_type), pytype(m.output_type)
            kind = {(False, False): "_UnaryUnary", (False, True): "_UnaryStream",
                    (True, False): "_StreamUnary", (True, True): "_StreamStream"}[(m.client_streaming, m.server_streaming)]
            req_arg = f"request_iterator: Iterator[{req}]" if m.client_streaming else f"request: {req}"
            ret = f"Iterator[{resp}]" if m.server_streaming else resp
            kinds.append((m.name, kind, req, resp, req_arg, ret))
        out.append(f"\nclass {svc.name}Stub:")
        out.append("    def __init__(self, channel: grpc.Channel) -> None: ...")
        for name, kind, req, resp, _, _ in kinds:
            out.append(f"    {name}: {kind}[{req}, {resp}]")
        out.append(f"\nclass {svc.name}Servicer:")
        for name, _, _, _, req_arg, ret in kinds:
            out.append(f"    def {name}(self, {req_arg}, context: grpc.ServicerContext) -> {ret}: ...")
        out.append(f"\ndef add_{svc.name}Servicer_to_server(servicer: {svc.name}Servicer, server: grpc.Server) -> None: ...")
        out.append(f"\n{svc.name}: Callable[..., object]  # grpc's experimental static API, untyped")
    return "\n".join(out) + "\n"


def generate(out: Path) -> list[Path]:
    """Write the stubs of every proto under protos/placement/v1 into `out`/placement/v1; returns the files."""
    import grpc_tools
    from google.protobuf import descriptor_pb2
    from grpc_tools import protoc

    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PACKAGE_DIR).glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files under {PROTO_ROOT / PACKAGE_DIR}")
    target = out / PACKAGE_DIR
    target.mkdir(parents=True, exist_ok=True)
    builtin = Path(grpc_tools.__file__).parent / "_proto"
    with tempfile.TemporaryDirectory() as tmp:
        desc = Path(tmp) / "descriptors.pb"
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{builtin}",
            f"--python_out={out}",
            f"--pyi_out={out}",
            f"--grpc_python_out={out}",
            f"--descriptor_set_out={desc}",
            *protos,
        ]
        rc = protoc.main(args)
        if rc != 0:
            raise SystemExit(f"protoc failed with exit code {rc}")
        fds = descriptor_pb2.FileDescriptorSet.FromString(desc.read_bytes())
    written: list[Path] = []
    for proto in protos:
        stem = Path(proto).stem
        pyi = target / f"{stem}_pb2_grpc.pyi"
        pyi.write_text(_grpc_pyi(fds, proto))
        written += [target / f"{stem}{s}" for s in GENERATED_SUFFIXES]
    init = target / "__init__.py"
    if not init.exists():
        init.write_text('"""Generated protobuf and gRPC stubs of protos/placement/v1 (scripts/gen_protos.py)."""\n')
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--out", type=Path, default=ROOT, help="root to write placement/v1 under (default: the repo)")
    args = ap.parse_args(argv)
    for p in generate(args.out):
        print(p.relative_to(args.out) if p.is_relative_to(args.out) else p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
