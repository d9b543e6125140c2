"""The registry's database backends: SQLite (embedded) and PostgreSQL (replicas), and
`open_store(url)` that picks one."""
