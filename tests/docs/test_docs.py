"""The pages' shell transcripts: every `$ COMMAND` of README.md and docs/*.md is in a ```console block (which the
root conftest.py runs and compares, through Sybil) or in one marked `not-run` with the test that checks it
instead; the transcript parser and the masks do what scripts/docs_transcript.py says."""

from __future__ import annotations

import re
import sys

import pytest

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT))
from scripts.docs_transcript import (
    BLOCK,
    Scratch,
    check,
    mask,
    matches,
    pages,
    parse_commands,
    parse_page,
    refill,
)

NOT_YET: set[str] = set()
"""Pages whose transcripts are not converted yet (another change owns them): the lead clears this set."""


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shown_command_is_run_or_says_why_not(page: object) -> None:
    path = ROOT / str(page)
    rel = str(path.relative_to(ROOT))
    if rel in NOT_YET:
        pytest.skip(f"{rel}: not converted yet")
    text = path.read_text()
    for m in BLOCK.finditer(text):
        if m.group("info").strip() == "console":
            continue
        line = text.count("\n", 0, m.start()) + 1
        shown = [x for x in m.group("body").splitlines() if x.startswith("$ ")]
        assert not shown, f"{rel}:{line}: `$` commands outside a ```console block: {shown[:2]}"
    for block in parse_page(text):
        assert block.commands, f"{rel}:{block.line}: a console block without a `$` command"
        if block.skip_reason is not None:
            named = re.findall(r"tests/(?:\w+/)*test_\w+\.py", block.skip_reason)
            assert named, f"{rel}:{block.line}: a not-run block names the test that checks it instead"
            for test in named:
                assert (ROOT / test).exists(), f"{rel}:{block.line}: {test} does not exist"


def test_a_transcript_is_commands_with_their_output() -> None:
    body = "$ echo a \\\n    b\na b\n$ cat > f <<'EOF'\nx: 1\nEOF\n$ cat f\nx: 1\n"
    cmds = parse_commands(body)
    assert [c.text for c in cmds] == ["echo a \\\n    b", "cat > f <<'EOF'\nx: 1\nEOF", "cat f"]
    assert [c.shown for c in cmds] == [["a b"], [], ["x: 1"]]


def test_an_elision_stands_for_any_lines_and_survives_a_rerun() -> None:
    shown = ["head", "...", "tail"]
    assert matches(shown, ["head", "tail"])
    assert matches(shown, ["head", "x", "y", "tail"])
    assert not matches(shown, ["head", "x", "tails"])
    assert not matches(["a", "b"], ["a", "b", "c"])
    assert refill(["head 1", "...", "tail 9"], ["head 2", "x", "tail 8"]) == ["head 2", "...", "tail 8"]


def test_only_wall_times_and_paths_are_masked() -> None:
    assert mask("gap 0.00%, 0.19 s (stopped: gap closed)") == mask("gap 0.00%, 3.5 s (stopped: gap closed)")
    assert mask("step 1.4383 s, exposed comm 0.3447 s") != mask("step 1.4384 s, exposed comm 0.3447 s")
    assert mask(f"wrote {ROOT}/out/x.json") == "wrote out/x.json"


def test_a_changed_number_fails_and_the_shell_state_carries_over() -> None:
    scratch = Scratch()
    try:
        good = parse_page("```console\n$ X=3\n$ echo $((X + 1)) && false\n4\n[exit 1]\n```\n")[0]
        assert check(scratch, good) is None
        bad = parse_page("```console\n$ X=3\n$ echo $((X + 1))\n5\n```\n")[0]
        failure = check(scratch, bad)
        assert failure is not None and "the page shows:\n5" in failure and "printed:\n4" in failure
        ran = parse_page("```console\n$ placement schema running | head -2\n```\n")[0]
        assert "2020-12" in (
            check(scratch, ran) or ""
        )  # the page shows nothing: the output is the difference
    finally:
        scratch.close()


def test_a_rerun_shows_a_shorter_output_whole() -> None:
    assert refill(["a", "...", "d"], ["a", "d"]) == ["a", "d"]
    assert refill(["a", "b", "...", "e"], ["a", "x"]) == ["a", "x"]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_of_a_page_resolves(page: object) -> None:
    path = ROOT / str(page)
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    for m in re.finditer(r"\]\(([^)\s]+)\)", text):
        link = m.group(1)
        if link.startswith(("http://", "https://", "#", "mailto:")):
            continue
        target = (path.parent / link.split("#")[0]).resolve()
        assert target.exists(), f"{path.relative_to(ROOT)}: the link {link} goes nowhere"
