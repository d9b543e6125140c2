-- placement registry schema v2 (PostgreSQL): one live claim per device. Applied once by
-- placement.registry.sql.store.SqlStore.migrate.
-- claims holds exactly the live claims: a held or committed reservation's device, occupancy reported from outside,
-- or a failure (a failed device holds no other claim). A claim's row is deleted in the transaction that ends it,
-- so the unique index on (cluster_id, device) is the invariant: a second claim of a device fails in the database.
CREATE TABLE claims (
    cluster_id      TEXT NOT NULL REFERENCES clusters(id),
    device          TEXT NOT NULL,
    kind            TEXT NOT NULL CHECK (kind IN ('held', 'committed', 'external', 'failed')),
    reservation_id  TEXT REFERENCES reservations(id),
    job             TEXT,
    CHECK ((reservation_id IS NOT NULL) = (kind IN ('held', 'committed'))),
    CHECK ((job IS NULL) = (kind = 'failed'))
);
CREATE UNIQUE INDEX claims_one_live_per_device ON claims (cluster_id, device);
CREATE INDEX claims_by_reservation ON claims (reservation_id);
CREATE TABLE slowdowns (
    cluster_id  TEXT NOT NULL REFERENCES clusters(id),
    device      TEXT NOT NULL,
    slowdown    DOUBLE PRECISION NOT NULL CHECK (slowdown > 1),
    PRIMARY KEY (cluster_id, device)
);
ALTER TABLE reservations ADD COLUMN reason TEXT NOT NULL DEFAULT '';
ALTER TABLE reservations ADD COLUMN heartbeat_s DOUBLE PRECISION;
ALTER TABLE clusters ADD COLUMN pruned_seq BIGINT NOT NULL DEFAULT 0;
-- v1 data: failures first (they win), then held reservations, then committed ones (the newest wins a device: its
-- commit wrote the occupancy last), then outside occupancy; a live reservation left without all its devices is
-- revoked.
INSERT INTO slowdowns (cluster_id, device, slowdown)
    SELECT cluster_id, device, slowdown FROM device_state WHERE slowdown > 1;
INSERT INTO claims (cluster_id, device, kind)
    SELECT cluster_id, device, 'failed' FROM device_state WHERE failed <> 0;
INSERT INTO claims (cluster_id, device, kind, reservation_id, job)
    SELECT h.cluster_id, h.device, 'held', h.reservation_id, r.job
    FROM holds h JOIN reservations r ON r.id = h.reservation_id
    WHERE r.status = 'HELD' ORDER BY r.created_at, r.id
    ON CONFLICT DO NOTHING;
INSERT INTO claims (cluster_id, device, kind, reservation_id, job)
    SELECT r.cluster_id, j.device, 'committed', r.id, r.job
    FROM reservations r CROSS JOIN LATERAL json_array_elements_text(r.devices::json) AS j(device)
    JOIN device_state s ON s.cluster_id = r.cluster_id AND s.device = j.device AND s.job = r.job AND s.failed = 0
    WHERE r.status = 'COMMITTED' ORDER BY r.created_at DESC, r.id
    ON CONFLICT DO NOTHING;
INSERT INTO claims (cluster_id, device, kind, job)
    SELECT cluster_id, device, 'external', job FROM device_state WHERE job IS NOT NULL AND failed = 0
    ON CONFLICT DO NOTHING;
UPDATE reservations SET status = 'REVOKED', ended_at = extract(epoch FROM now()),
    reason = 'schema 2: some of its devices were failed, lost to a full snapshot or held twice under schema 1'
    WHERE status IN ('HELD', 'COMMITTED')
    AND (SELECT COUNT(*) FROM claims c WHERE c.reservation_id = reservations.id) < json_array_length(devices::json);
DELETE FROM claims WHERE reservation_id IN (SELECT id FROM reservations WHERE status = 'REVOKED');
DROP TABLE holds;
DROP TABLE device_state;
