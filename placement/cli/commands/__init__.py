"""One module per `placement` command family, each holding its commands in a typer `app`; `placement.cli.app`
imports a module only when one of its commands runs or shows its help."""
