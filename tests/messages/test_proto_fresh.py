"""The committed stubs in placement/v1 are what `python scripts/gen_protos.py` makes from protos/placement/v1.

It regenerates into a temp dir and diffs; a stale stub fails with the command that fixes it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

GENERATED = (
    "_pb2.py",
    "_pb2.pyi",
    "_pb2_grpc.py",
    "_pb2_grpc.pyi",
)  # scripts/gen_protos.py GENERATED_SUFFIXES


def test_committed_stubs_equal_a_fresh_generation(tmp_path: Path) -> None:
    # a subprocess: protoc's C++ extension aborts the interpreter when ortools' protobuf is loaded already
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_protos.py"), "--out", str(tmp_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    fresh = sorted(p for p in (tmp_path / "placement" / "v1").iterdir() if p.name.endswith(GENERATED))
    assert fresh, "no stubs generated"
    stale = []
    for f in fresh:
        committed = ROOT / f.relative_to(tmp_path)
        if not committed.exists() or committed.read_text() != f.read_text():
            stale.append(str(committed.relative_to(ROOT)))
    assert not stale, (
        f"stale generated stubs {stale}: run `python scripts/gen_protos.py` and commit the result"
    )
    generated_names = {f.name for f in fresh}
    leftovers = [
        p.name
        for p in (ROOT / "placement" / "v1").iterdir()
        if p.name.endswith(GENERATED) and p.name not in generated_names
    ]
    assert not leftovers, f"stubs of a removed .proto are still committed: {leftovers}"


def test_stubs_import_as_placement_v1_without_grpc_in_the_messages() -> None:
    code = (
        "import sys\n"
        "from placement.v1 import placement_pb2\n"
        "assert 'grpc' not in sys.modules, 'placement_pb2 pulled in grpc'\n"
        "from placement.v1 import placement_pb2_grpc\n"
        "assert placement_pb2.DESCRIPTOR.services_by_name['PlacementService'].full_name == "
        "'placement.v1.PlacementService'\n"
        "assert hasattr(placement_pb2_grpc, 'PlacementServiceStub')\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_placement_never_imports_grpc() -> None:
    offenders = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "placement").rglob("*.py")
        if "v1" not in p.parts
        and any(line.lstrip().startswith(("import grpc", "from grpc")) for line in p.read_text().splitlines())
    ]
    assert not offenders
    assert not (ROOT / "placement" / "client.py").exists(), "the client lives in server/client.py"
