-- placement registry schema v1 (SQLite). Applied once by placement.registry.sqlstore.migrate.
CREATE TABLE clusters (
    id          TEXT PRIMARY KEY,
    version     INTEGER NOT NULL,
    doc         TEXT NOT NULL,
    generation  INTEGER NOT NULL DEFAULT 0,
    extras      TEXT NOT NULL DEFAULT '{}',
    last_seq    INTEGER NOT NULL DEFAULT 0,
    updated_at  REAL NOT NULL
);
CREATE TABLE device_state (
    cluster_id  TEXT NOT NULL REFERENCES clusters(id),
    device      TEXT NOT NULL,
    job         TEXT,
    failed      INTEGER NOT NULL DEFAULT 0,
    slowdown    REAL,
    PRIMARY KEY (cluster_id, device)
);
CREATE TABLE reservations (
    id              TEXT PRIMARY KEY,
    cluster_id      TEXT NOT NULL REFERENCES clusters(id),
    job             TEXT NOT NULL,
    status          TEXT NOT NULL,
    devices         TEXT NOT NULL,
    idem_key        TEXT,
    request_hash    TEXT NOT NULL,
    created_at      REAL NOT NULL,
    expires_at      REAL NOT NULL,
    ended_at        REAL,
    generation      INTEGER NOT NULL,
    cluster_version INTEGER NOT NULL,
    payload         BLOB NOT NULL,
    UNIQUE (cluster_id, idem_key)
);
CREATE INDEX reservations_by_status ON reservations (status, expires_at);
CREATE INDEX reservations_by_cluster ON reservations (cluster_id, status);
CREATE TABLE holds (
    cluster_id      TEXT NOT NULL,
    device          TEXT NOT NULL,
    reservation_id  TEXT NOT NULL REFERENCES reservations(id),
    expires_at      REAL NOT NULL,
    PRIMARY KEY (cluster_id, device)
);
CREATE INDEX holds_by_reservation ON holds (reservation_id);
CREATE TABLE events (
    cluster_id  TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    generation  INTEGER NOT NULL,
    payload     TEXT NOT NULL,
    at          REAL NOT NULL,
    PRIMARY KEY (cluster_id, seq)
);
