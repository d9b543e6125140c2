"""Regenerate the committed Python stubs of protos/placement/v1 into placement/v1 (or into --out).

One command: ``python scripts/gen_protos.py``. tests/messages/test_proto_fresh.py regenerates into a temp dir and diffs.

It runs grpc_tools.protoc with the proto root as include path, so the generated imports read
``from placement.v1 import placement_pb2``: messages and services by protoc, their typed interfaces
(``_pb2.pyi``, ``_pb2_grpc.pyi``) by mypy-protobuf's plugins (``protoc-gen-mypy``, ``protoc-gen-mypy_grpc``, beside
this interpreter), so mypy --strict checks the servicer and the client against the .proto.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["GENERATED_SUFFIXES", "generate", "main"]

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "protos"
PACKAGE_DIR = Path("placement") / "v1"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def generate(out: Path) -> list[Path]:
    """Write the stubs of every proto under protos/placement/v1 into `out`/placement/v1; returns the files."""
    import grpc_tools
    from grpc_tools import protoc

    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PACKAGE_DIR).glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files under {PROTO_ROOT / PACKAGE_DIR}")
    target = out / PACKAGE_DIR
    target.mkdir(parents=True, exist_ok=True)
    builtin = Path(grpc_tools.__file__).parent / "_proto"
    plugins = Path(sys.executable).parent  # mypy-protobuf's entry points, installed with the dev extra
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{builtin}",
        f"--plugin=protoc-gen-mypy={plugins / 'protoc-gen-mypy'}",
        f"--plugin=protoc-gen-mypy_grpc={plugins / 'protoc-gen-mypy_grpc'}",
        f"--python_out={out}",
        f"--mypy_out={out}",
        f"--grpc_python_out={out}",
        f"--mypy_grpc_out={out}",
        *protos,
    ]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"protoc failed with exit code {rc}")
    written: list[Path] = []
    for proto in protos:
        stem = Path(proto).stem
        written += [target / f"{stem}{s}" for s in GENERATED_SUFFIXES]
    init = target / "__init__.py"
    if not init.exists():
        init.write_text(
            '"""Generated protobuf and gRPC stubs of protos/placement/v1 (scripts/gen_protos.py)."""\n'
        )
    return written


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument(
        "--out", type=Path, default=ROOT, help="root to write placement/v1 under (default: the repo)"
    )
    args = ap.parse_args(argv)
    for p in generate(args.out):
        print(p.relative_to(args.out) if p.is_relative_to(args.out) else p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
