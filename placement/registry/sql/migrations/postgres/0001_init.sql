-- placement registry schema v1 (PostgreSQL). Applied once by placement.registry.sqlstore.migrate.
CREATE TABLE clusters (
    id          TEXT PRIMARY KEY,
    version     BIGINT NOT NULL,
    doc         TEXT NOT NULL,
    generation  BIGINT NOT NULL DEFAULT 0,
    extras      TEXT NOT NULL DEFAULT '{}',
    last_seq    BIGINT NOT NULL DEFAULT 0,
    updated_at  DOUBLE PRECISION NOT NULL
);
CREATE TABLE device_state (
    cluster_id  TEXT NOT NULL REFERENCES clusters(id),
    device      TEXT NOT NULL,
    job         TEXT,
    failed      BIGINT NOT NULL DEFAULT 0,
    slowdown    DOUBLE PRECISION,
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
    created_at      DOUBLE PRECISION NOT NULL,
    expires_at      DOUBLE PRECISION NOT NULL,
    ended_at        DOUBLE PRECISION,
    generation      BIGINT NOT NULL,
    cluster_version BIGINT NOT NULL,
    payload         BYTEA NOT NULL,
    UNIQUE (cluster_id, idem_key)
);
CREATE INDEX reservations_by_status ON reservations (status, expires_at);
CREATE INDEX reservations_by_cluster ON reservations (cluster_id, status);
CREATE TABLE holds (
    cluster_id      TEXT NOT NULL,
    device          TEXT NOT NULL,
    reservation_id  TEXT NOT NULL REFERENCES reservations(id),
    expires_at      DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (cluster_id, device)
);
CREATE INDEX holds_by_reservation ON holds (reservation_id);
CREATE TABLE events (
    cluster_id  TEXT NOT NULL,
    seq         BIGINT NOT NULL,
    kind        TEXT NOT NULL,
    generation  BIGINT NOT NULL,
    payload     TEXT NOT NULL,
    at          DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (cluster_id, seq)
);
