-- placement registry schema v4: the shape of a reserved job (its Job as the Reserve request gave it, a JSON
-- native job document; NULL when none was given), kept so that the registry prices the traffic of committed
-- jobs (docs/registry.md, "Traffic on the fabric"). Its mapping is `devices` (rank order).
ALTER TABLE reservations ADD COLUMN shape TEXT;
