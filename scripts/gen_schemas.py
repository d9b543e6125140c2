"""Write schemas/KIND.schema.json and docs/formats.md from the one schema of the input files (placement/schema/).

python scripts/gen_schemas.py           # write them
python scripts/gen_schemas.py --check   # exit 1 when a checked-in file differs (tests/test_schema.py too)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from placement.schema import DOCUMENTS, json_schema  # noqa: E402
from placement.schema.reference import reference_page  # noqa: E402


def generated() -> dict[Path, str]:
    """Every generated file and its text."""
    files = {
        ROOT / "schemas" / f"{kind}.schema.json": json.dumps(json_schema(kind), indent=2, ensure_ascii=False)
        + "\n"
        for kind in DOCUMENTS
    }
    files[ROOT / "docs" / "formats.md"] = reference_page()
    return files


def main() -> int:
    check = "--check" in sys.argv[1:]
    stale = []
    for path, text in generated().items():
        if path.exists() and path.read_text() == text:
            continue
        stale.append(path.relative_to(ROOT))
        if not check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
    for p in stale:
        print(f"{'stale' if check else 'wrote'}: {p}")
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
