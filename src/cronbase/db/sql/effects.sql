-- The effects ledger. Every write after the first is a compare-and-set on the owner token, so
-- two processes can never both believe they own an effect.

-- name: enter_effect
-- Own the key if nobody has it; otherwise say what is there, and whether it has gone stale.
-- The second branch can miss a row committed after this statement's snapshot (the insert we
-- waited on); the caller then runs the statement again.
WITH ins AS (
    INSERT INTO {schema}.effects (key, status, owner, job_id, attempt)
    VALUES (%(key)s, 'processing', %(owner)s, %(job_id)s, %(attempt)s)
    ON CONFLICT (key) DO NOTHING
    RETURNING *
)
SELECT true AS created, false AS stale, ins.* FROM ins
UNION ALL
SELECT false, e.status = 'processing' AND e.started_at < now() - %(stale_after)s::interval, e.*
FROM {schema}.effects e
WHERE NOT EXISTS (SELECT FROM ins) AND e.key = %(key)s;

-- name: take_over_effect
-- Take a failed or stale effect from the owner we saw; nothing if someone else was quicker.
UPDATE {schema}.effects
SET status = 'processing', owner = %(owner)s, job_id = %(job_id)s, attempt = %(attempt)s,
    started_at = now(), finished_at = NULL, error = NULL, takeovers = takeovers + 1,
    updated_at = now()
WHERE key = %(key)s AND owner = %(previous_owner)s
  AND (status = 'failed'
       OR (status = 'processing' AND started_at < now() - %(stale_after)s::interval))
RETURNING *;

-- name: reconcile_effect
-- The outside world says a failed or stale effect did happen: done, with what it reported. (A
-- block that raised may have raised after the effect: a reply lost to a restart, say.)
UPDATE {schema}.effects
SET status = 'done', result = %(result)s::jsonb, reconciled = true, finished_at = now(),
    takeovers = takeovers + 1, updated_at = now()
WHERE key = %(key)s AND owner = %(previous_owner)s
  AND (status = 'failed'
       OR (status = 'processing' AND started_at < now() - %(stale_after)s::interval))
RETURNING *;

-- name: finish_effect
-- The owner ends its effect: done (with its result) or failed (with the error).
UPDATE {schema}.effects
SET status = %(status)s, result = %(result)s::jsonb, error = %(error)s, finished_at = now(),
    updated_at = now()
WHERE key = %(key)s AND owner = %(owner)s AND status = 'processing'
RETURNING *;

-- name: get_effect
SELECT * FROM {schema}.effects WHERE key = %(key)s;

-- name: list_effects
SELECT * FROM {schema}.effects
WHERE (%(status)s::text IS NULL OR status = %(status)s)
ORDER BY updated_at DESC, key
LIMIT %(limit)s;

-- name: forget_effect
DELETE FROM {schema}.effects WHERE key = %(key)s RETURNING *;
