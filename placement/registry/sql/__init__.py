"""The SQL both registry backends share: transactions, schema migrations, the event log, state
rows and reservations."""
