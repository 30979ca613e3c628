-- Named statements on cronbase.workers: who is alive and holding leases.

-- name: register_worker
-- A worker announces itself when it starts (ids are unique per process start).
INSERT INTO {schema}.workers (id, hostname, pid, queues, concurrency)
VALUES (%(id)s, %(hostname)s, %(pid)s, %(queues)s, %(concurrency)s)
ON CONFLICT (id) DO UPDATE SET last_seen_at = now();

-- name: unregister_worker
-- A worker that stops cleanly removes itself; a killed one is left to age out.
DELETE FROM {schema}.workers WHERE id = %(id)s;
