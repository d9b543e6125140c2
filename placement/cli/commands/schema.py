"""`placement schema KIND`: the JSON Schema (draft 2020-12) of an input file, from the one schema of
`placement.schema` (also checked in as schemas/KIND.schema.json, and rendered as docs/formats.md)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from placement.cli.errors import escape, fail
from placement.cli.help import Command, command_app
from placement.schema import DOCUMENTS, json_schema

__all__ = ["app", "schema"]

app = command_app()


@app.command("schema", cls=Command)
def schema(
    kind: Annotated[str, typer.Argument(help=f"the kind of file: {', '.join(DOCUMENTS)}")],
) -> None:
    """The JSON Schema of an input file (docs/formats.md).

    Prints the JSON Schema (draft 2020-12) of one kind of file: cluster, state, job, mapping, request, batch,
    running, sweep, serving (a serving job) or serving-sweep. docs/formats.md describes every field; editors check a file against the schema named by
    its `# yaml-language-server: $schema=...` line (schemas/KIND.schema.json)."""
    if kind not in DOCUMENTS:
        fail(f"unknown kind {escape(repr(kind))}; known: {', '.join(DOCUMENTS)}", 2)
    typer.echo(json.dumps(json_schema(kind), indent=2, ensure_ascii=False))
