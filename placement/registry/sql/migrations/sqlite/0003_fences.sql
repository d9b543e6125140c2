-- placement registry schema v3 (SQLite): compaction of ended reservations, a probe row. The lease fence is
-- checked by the store just before COMMIT, under the file's write lock (placement.registry.backends.sqlite).
CREATE INDEX reservations_by_end ON reservations (status, ended_at);
CREATE TABLE probe (id INTEGER PRIMARY KEY, at REAL NOT NULL);
