"""Rerun every shell transcript of README.md and docs/*.md and rewrite the outputs the pages show, in place.

    python scripts/rerun_docs.py              # every page
    python scripts/rerun_docs.py README.md    # some pages

A block whose output still matches (wall times and paths masked) is left as it is; a shown `...` elision stays.
The tests (the root conftest.py, through Sybil) check the same transcripts, so after this they pass.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.docs_transcript import ROOT, Scratch, check, pages, parse_page, rewrite


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "pages", nargs="*", type=Path, help="pages to rerun (default: README.md and docs/*.md)"
    )
    parser.add_argument("--check", action="store_true", help="only say which blocks drifted; exit 1 if any")
    args = parser.parse_args()
    chosen = [p.resolve() for p in args.pages] or pages()
    drifted = 0
    for page in chosen:
        text = page.read_text()
        if not parse_page(text):
            continue
        scratch = Scratch()
        try:
            if args.check:
                for block in parse_page(text):
                    if block.skip_reason is None and (failure := check(scratch, block)) is not None:
                        drifted += 1
                        print(f"{page.relative_to(ROOT)}:{block.line}: drifted\n{failure}\n")
            else:
                new, changed = rewrite(text, scratch)
                if changed:
                    page.write_text(new)
                print(f"{page.relative_to(ROOT)}: {changed} block(s) rewritten")
        finally:
            scratch.close()
    return 1 if drifted else 0


if __name__ == "__main__":
    sys.exit(main())
