"""The `placement` command line: the typer app, shared options, tables and error reporting;
one module per command family in `commands/`."""
