-- placement registry schema v3 (PostgreSQL): the lease fence, compaction of ended reservations, a probe row.
-- The fence: a transaction that commits, renews, releases or revokes a reservation with a lease or heartbeat is
-- checked at COMMIT (a deferred constraint trigger) against the database's clock: if that lease ran out before
-- the COMMIT (its writer paused inside the transaction), the transaction fails and writes nothing. The clock is
-- clock_timestamp(), or `placement.now` when a test's clock drives the store.
CREATE FUNCTION placement_lease_fence() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    at DOUBLE PRECISION := COALESCE(
        NULLIF(current_setting('placement.now', true), '')::DOUBLE PRECISION,
        extract(epoch FROM clock_timestamp()));
BEGIN
    IF OLD.expires_at <= at THEN
        RAISE EXCEPTION 'lease-fence: reservation % ran out at % before this transaction committed (database clock %)',
            OLD.id, OLD.expires_at, at USING ERRCODE = 'P0001';
    END IF;
    RETURN NULL;
END
$$;
CREATE CONSTRAINT TRIGGER reservations_lease_fence AFTER UPDATE ON reservations
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN (OLD.status IN ('HELD', 'COMMITTED') AND (OLD.status = 'HELD' OR OLD.heartbeat_s IS NOT NULL)
          AND NEW.status <> 'EXPIRED')
    EXECUTE FUNCTION placement_lease_fence();
CREATE INDEX reservations_by_end ON reservations (status, ended_at);
CREATE TABLE probe (id INTEGER PRIMARY KEY, at DOUBLE PRECISION NOT NULL);
