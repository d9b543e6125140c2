"""The pages' shell transcripts as tests: Sybil collects README.md and docs/*.md, and each ```console block runs
under pytest (scripts/docs_transcript.py says how; `python scripts/rerun_docs.py` rewrites the shown outputs)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest
from sybil import Document, Example, Region, Sybil

from scripts.docs_transcript import Block, Scratch, check, parse_page

_SCRATCH = "docs_scratch"


def _evaluate(example: Example) -> str | None:
    block: Block = example.parsed
    if block.skip_reason is not None:
        pytest.skip(f"not run here: {block.skip_reason}")
    scratch: Scratch = example.namespace[_SCRATCH]
    done = scratch.blocks_run
    for earlier in parse_page(
        example.document.text
    ):  # a block may read what an earlier one wrote: in any order
        if earlier.start < block.start and earlier.start not in done and earlier.skip_reason is None:
            scratch.run(earlier.commands)
            done.add(earlier.start)
    done.add(block.start)
    failure = check(scratch, block)
    return (
        None
        if failure is None
        else f"the page's transcript drifted ({example.path}:{block.line}):\n{failure}"
    )


def _transcripts(document: Document) -> Iterable[Region]:
    for block in parse_page(document.text):
        yield Region(block.start, block.end, block, _evaluate)


def _setup(namespace: dict[str, Any]) -> None:
    namespace[_SCRATCH] = Scratch()


def _teardown(namespace: dict[str, Any]) -> None:
    namespace[_SCRATCH].close()


pytest_collect_file = Sybil(
    parsers=[_transcripts], patterns=["README.md", "docs/*.md"], setup=_setup, teardown=_teardown
).pytest()
