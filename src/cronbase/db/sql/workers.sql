-- Named statements on cronbase.workers: who is alive and holding leases.

-- name: register_worker
-- A worker announces itself when it starts (ids are unique per process start).
INSERT INTO {schema}.workers (id, hostname, pid, queues, concurrency)
VALUES (%(id)s, %(hostname)s, %(pid)s, %(queues)s, %(concurrency)s)
ON CONFLICT (id) DO UPDATE SET last_seen_at = now();

-- name: unregister_worker
-- A worker that stops cleanly removes itself; a killed one is left to age out.
DELETE FROM {schema}.workers WHERE id = %(id)s;

-- name: list_workers
-- Live (or lately live) workers, with the age of their last heartbeat by the database's clock.
SELECT id, hostname, pid, queues, concurrency, started_at, last_seen_at,
       extract(epoch FROM now() - last_seen_at)::float8 AS heartbeat_age
FROM {schema}.workers
ORDER BY started_at;
