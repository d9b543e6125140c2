"""`placement serve`: the gRPC server, as `placement-server` runs it (`server.main`, through
`placement.cli.commands.remote`)."""

from __future__ import annotations

from typing import Annotated

import typer

from placement.cli.commands.remote import serve_main
from placement.cli.help import Command, command_app

__all__ = ["app", "serve"]

app = command_app()


@app.command("serve", cls=Command)
def serve(
    port: Annotated[int | None, typer.Option(help="gRPC port (default from PLACEMENT_PORT or 50051)")] = None,
) -> None:
    """Run the gRPC server (same as `placement-server`)."""
    argv = [] if port is None else ["--port", str(port)]
    raise typer.Exit(serve_main(argv))
