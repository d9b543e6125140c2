"""The shell transcripts of README.md and docs/*.md: parse a ```console block into commands and their shown output,
run them as a reader would, compare with the page (masking only what must vary), and rewrite a page's outputs.

A transcript block is a fenced block whose info string is `console`. Its lines are `$ COMMAND` (a trailing `\\`
continues it on the next line, a here-document `<<'EOF'` runs to its `EOF` line; `# ...` is a shell comment)
followed by the output the page shows. In the shown
output a line `...` stands for any number of lines (the page elides them); a command that exits non-zero shows
`[exit N]` as its last line. The HTML comment `<!-- docs: not-run: REASON -->` on the line before a block keeps
it out of the run (a command that needs a real Slurm, a GPU or a running server); REASON says which test checks
it instead.

The commands of one page run in order, in one scratch directory per page (so a later block reads what an
earlier one wrote), with `examples/`, `tests/`, `bench/` and `schemas/` linked from the repository, `placement`
and `placement-server` on PATH as this interpreter's modules of the tree under test, 80 columns, and no
`PLACEMENT_*` variable of the caller. Used by the root conftest.py (under pytest, through Sybil) and by
scripts/rerun_docs.py (which rewrites the shown outputs).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/*.md")
LINKED = ("examples", "tests", "bench", "schemas", "scripts")
TIMEOUT_S = 600.0
ELLIPSIS = "..."

# A fenced block: its opening fence, info string, body and closing fence (three or more backticks).
BLOCK = re.compile(r"^(?P<fence>`{3,})(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=fence)[ \t]*$", re.M | re.S)
HEREDOC = re.compile(r"<<-?\s*'?(\w+)'?")
DIRECTIVE = re.compile(r"<!--\s*docs:\s*(?P<what>[a-z-]+)(?::\s*(?P<reason>.*?))?\s*-->\s*$")

# What must vary between runs, masked on both sides before the comparison: wall times, the scratch directory.
MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b\d+(\.\d+)? s \(stopped"), "<T> s (stopped"),  # place's headline: the solve's wall time
    (re.compile(r"\bin \d+(\.\d+)? s\b"), "in <T> s"),
    (re.compile(r"\(\d+(\.\d+)? ms\)"), "(<T> ms)"),
    (re.compile(r"^real\s+\d+m[\d.]+s$"), "real <T>"),
    (re.compile(r"[\d.]+ pts/s elapsed \d+:\d\d:\d\d"), "<N> pts/s elapsed <T>"),  # a sweep's progress
    (re.compile(r"\b\d+(\.\d+)? s wall\b"), "<T> s wall"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z?"), "<TIMESTAMP>"),
)


@dataclass
class Command:
    """One `$ COMMAND` of a transcript and the lines the page shows after it."""

    text: str  # as on the page, continuation lines joined with their `\` and newline
    shown: list[str] = field(default_factory=list)


@dataclass
class Block:
    """A ```console block of a page: where its body is (character offsets) and its commands."""

    start: int
    end: int
    line: int
    commands: list[Command]
    skip_reason: str | None


def parse_commands(body: str) -> list[Command]:
    """The commands of a transcript body, each with the output lines shown under it."""
    commands: list[Command] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            text = line[2:]
            while text.endswith("\\") and i + 1 < len(lines):
                i += 1
                text += "\n" + lines[i]
            heredoc = HEREDOC.search(text)
            while heredoc is not None and i + 1 < len(lines):  # the here-document is part of the command
                i += 1
                text += "\n" + lines[i]
                if lines[i] == heredoc.group(1):
                    break
            commands.append(Command(text))
        elif commands:
            commands[-1].shown.append(line)
        elif line.strip():
            raise ValueError(f"a transcript starts with `$ COMMAND`, not {line!r}")
        i += 1
    return commands


def parse_page(text: str) -> list[Block]:
    """Every ```console block of a page, in order."""
    blocks: list[Block] = []
    for m in BLOCK.finditer(text):
        if m.group("info").strip() != "console":
            continue
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        d = DIRECTIVE.search(before)
        skip = None
        if d is not None and d.group("what") == "not-run":
            skip = d.group("reason") or ""
            if not skip:
                raise ValueError(f"line {text.count(chr(10), 0, m.start()) + 1}: `not-run` needs a reason")
        blocks.append(
            Block(
                m.start("body"),
                m.end("body"),
                text.count("\n", 0, m.start()) + 1,
                parse_commands(m.group("body")),
                skip,
            )
        )
    return blocks


def mask(line: str, scratch: str | None = None) -> str:
    if scratch:
        line = line.replace(scratch + os.sep, "").replace(scratch, ".")
    line = line.replace(str(ROOT) + os.sep, "")
    for pattern, repl in MASKS:
        line = pattern.sub(repl, line)
    return line.rstrip()


def matches(shown: list[str], actual: list[str]) -> bool:
    """Whether the actual lines match the shown ones (both masked), a shown `...` line standing for any lines."""
    segments: list[list[str]] = [[]]
    for line in shown:
        if line.strip() == ELLIPSIS:
            segments.append([])
        else:
            segments[-1].append(line)
    if len(segments) == 1:
        return shown == actual
    head, *middle, tail = segments
    if actual[: len(head)] != head or (tail and actual[len(actual) - len(tail) :] != tail):
        return False
    pos, stop = len(head), len(actual) - len(tail)
    if stop < pos:
        return False
    for seg in middle:
        found = next((i for i in range(pos, stop - len(seg) + 1) if actual[i : i + len(seg)] == seg), None)
        if found is None:
            return False
        pos = found + len(seg)
    return True


def _prefix(line: str) -> str:
    """A line's label: its text up to the first digit (how a rerun finds an elided block's middle part again)."""
    return re.split(r"\d", line, maxsplit=1)[0]


def refill(shown: list[str], actual: list[str]) -> list[str]:
    """The shown lines rewritten from the actual output, keeping the page's `...` elisions in place: the head and
    tail keep their number of lines, a middle part is found again by its first line's label."""
    if not any(line.strip() == ELLIPSIS for line in shown):
        return actual
    segments: list[list[str]] = [[]]
    for line in shown:
        if line.strip() == ELLIPSIS:
            segments.append([])
        else:
            segments[-1].append(line)
    head, *middle, tail = segments
    if len(head) + sum(map(len, middle)) + len(tail) >= len(actual):
        return actual  # nothing left to elide: the page shows the whole output
    out = actual[: len(head)]
    pos, stop = len(head), len(actual) - len(tail)
    for seg in middle:
        out.append(ELLIPSIS)
        label = _prefix(seg[0]) if seg else ""
        found = next((i for i in range(pos, stop) if label and _prefix(actual[i]) == label), None)
        if found is None:  # the part is gone from the output: keep what the page shows, the test will say so
            out.extend(seg)
            continue
        out.extend(actual[found : found + len(seg)])
        pos = found + len(seg)
    out.append(ELLIPSIS)
    if tail:
        out.extend(actual[max(stop, pos) :])
    return out


class Scratch:
    """The scratch directory of one page: links to the repository's inputs, and `placement` on PATH."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="placement-docs-"))
        self.blocks_run: set[int] = set()
        """The blocks of the page run here so far (by offset): a block runs after those before it, in any order."""
        for name in LINKED:
            if (ROOT / name).exists():
                (self.dir / name).symlink_to(ROOT / name)
        bindir = self.dir / ".bin"
        bindir.mkdir()
        for script, module in (("placement", "placement.cli.app"), ("placement-server", "server.main")):
            # as pip's console scripts are: Python runs the script itself, so `placement` knows its own name
            # (launch files written by `placement export` call `placement`, the one on PATH)
            path = bindir / script
            path.write_text(
                f"#!{sys.executable}\nimport sys\nfrom {module} import main\n"
                "if __name__ == '__main__':\n    sys.exit(main())\n"
            )
            path.chmod(0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PLACEMENT_")}
        env.pop("LINES", None)
        env.update(
            PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}",
            PYTHONPATH=str(ROOT),
            COLUMNS="80",
            NO_COLOR="1",
            TERM="dumb",
            HOME=str(self.dir),  # the registry's default database and caches stay in the scratch directory
            MPLBACKEND="Agg",
        )
        self.env = env

    def run(self, commands: list[Command]) -> list[list[str]]:
        """Run the commands of one block in one shell (variables carry over); each one's output lines, masked
        paths left as they are, ending with `[exit N]` when it exits non-zero."""
        marker = f"@@placement-docs-{os.getpid()}@@"
        script = ["set +e"]
        for cmd in commands:
            script += [f"echo '{marker}'", f"{{\n{cmd.text}\n}} 2>&1", f'echo "{marker} $?"']
        proc = subprocess.run(
            ["bash", "-c", "\n".join(script)],
            cwd=self.dir,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        outputs: list[list[str]] = []
        current: list[str] | None = None
        for line in proc.stdout.splitlines():
            if line == marker:
                current = []
            elif line.startswith(marker + " ") and current is not None:
                code = int(line.split()[-1])
                if code != 0:
                    current.append(f"[exit {code}]")
                outputs.append([x.rstrip() for x in current])
                current = None
            elif current is not None:
                current.append(line)
        if len(outputs) != len(commands):
            raise RuntimeError(f"the transcript's shell stopped early:\n{proc.stdout}")
        return outputs

    def masked(self, lines: list[str]) -> list[str]:
        return [mask(line, str(self.dir)) for line in lines]

    def unscratched(self, lines: list[str]) -> list[str]:
        """Lines as a page shows them: the scratch directory and the repository root made relative."""
        out = []
        for line in lines:
            line = line.replace(str(self.dir) + os.sep, "").replace(str(self.dir), ".")
            out.append(line.replace(str(ROOT) + os.sep, "").rstrip())
        return out

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def check(scratch: Scratch, block: Block) -> str | None:
    """Run a block; None when every command's output matches the page, else a readable difference."""
    outputs = scratch.run(block.commands)
    problems = []
    for cmd, actual in zip(block.commands, outputs, strict=True):
        shown = [mask(x) for x in cmd.shown]
        got = scratch.masked(actual)
        if not matches(shown, got):
            problems.append(
                f"$ {cmd.text}\n--- the page shows:\n"
                + "\n".join(cmd.shown)
                + "\n--- the command printed:\n"
                + "\n".join(scratch.unscratched(actual))
            )
    return "\n\n".join(problems) or None


def rewrite(text: str, scratch: Scratch) -> tuple[str, int]:
    """A page with each run block's outputs rewritten from a fresh run (a block whose masked output matches is
    left as it is, so wall times do not churn); the number of blocks changed."""
    pieces: list[str] = []
    pos = 0
    changed = 0
    for block in parse_page(text):
        if block.skip_reason is not None:
            continue
        outputs = scratch.run(block.commands)
        body: list[str] = []
        differs = False
        for cmd, actual in zip(block.commands, outputs, strict=True):
            shown_masked = [mask(x) for x in cmd.shown]
            body += ["$ " + cmd.text]
            if matches(shown_masked, scratch.masked(actual)):
                body += cmd.shown
            else:
                differs = True
                body += refill(cmd.shown, scratch.unscratched(actual))
        if differs:
            changed += 1
            pieces += [text[pos : block.start], "\n".join(body) + "\n"]
            pos = block.end
    pieces.append(text[pos:])
    return "".join(pieces), changed


def pages() -> list[Path]:
    found: list[Path] = []
    for pattern in PAGES:
        found += sorted(ROOT.glob(pattern))
    return found
