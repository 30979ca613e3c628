-- 0025: key rotation re-seals attempts' errors (issue 38; payload/sealing.py, operations/keys.py)
-- without the application role's right to rewrite attempts.
--
-- Attempts are written once: the application role may insert and delete them (retention), never
-- update them (tests/e2e/test_least_privilege.py). `cronbase keys rotate` must still put an
-- encrypted task's sealed error and traceback under the new key. This function does that and
-- nothing else, as the schema's owner: it writes a value only where the row still holds what
-- rotation read, and only a sealed value for a sealed one (both "$sealed:<key id>:..."), so no
-- plain error is ever changed, and no plain text can replace a sealed one.

CREATE FUNCTION {schema}.reseal_attempts(
    ids bigint[], job_ids bigint[], old_errors text[], errors text[], old_tracebacks text[],
    tracebacks text[]
) RETURNS SETOF bigint
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    UPDATE {schema}.job_attempts a
    SET error = n.error, traceback = n.traceback
    FROM unnest(ids, job_ids, old_errors, errors, old_tracebacks, tracebacks)
        AS n(id, job_id, old_error, error, old_traceback, traceback)
    WHERE a.job_id = n.job_id AND a.id = n.id
      AND a.error IS NOT DISTINCT FROM n.old_error
      AND a.traceback IS NOT DISTINCT FROM n.old_traceback
      AND (n.error IS NOT DISTINCT FROM n.old_error
           OR left(n.old_error, 8) = '$sealed:' AND left(n.error, 8) = '$sealed:')
      AND (n.traceback IS NOT DISTINCT FROM n.old_traceback
           OR left(n.old_traceback, 8) = '$sealed:' AND left(n.traceback, 8) = '$sealed:')
    RETURNING a.id
$$;

REVOKE EXECUTE ON FUNCTION {schema}.reseal_attempts(bigint[], bigint[], text[], text[], text[],
    text[]) FROM PUBLIC;
COMMENT ON FUNCTION {schema}.reseal_attempts(bigint[], bigint[], text[], text[], text[], text[]) IS
    'Key rotation: attempts'' sealed errors and tracebacks re-sealed (a sealed value for a sealed one, where unchanged since read); the ids written. Attempts are otherwise written once.';
