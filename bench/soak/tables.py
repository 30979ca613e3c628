"""What the soak records about the database each sample: every table of the cronbase schema,
found by schema (so a table or partition added later is covered without a change here), with
partitions and inheritance children (in any schema) counted under their root table.

Per root table: partitions, table bytes (heap, TOAST, free-space and visibility maps:
``pg_table_size``), index bytes, total, live and dead tuples, the last autovacuum and the
autovacuum count. Beside them, the oldest snapshot a session holds (``backend_xmin``), which is
what keeps vacuum from removing dead tuples, and the session that holds it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import psycopg
from psycopg.rows import dict_row

TABLES = """
WITH RECURSIVE tree AS (
    SELECT c.oid, c.relname::text AS root
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = %(schema)s AND c.relkind IN ('r', 'p')
      AND NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = c.oid)
    UNION ALL
    SELECT i.inhrelid, t.root
    FROM pg_inherits i JOIN tree t ON i.inhparent = t.oid
    JOIN pg_class c ON c.oid = i.inhrelid AND c.relkind IN ('r', 'p')
)
SELECT t.root AS name,
       count(*) - 1 AS partitions,
       sum(pg_table_size(t.oid))::bigint AS table_bytes,
       sum(pg_indexes_size(t.oid))::bigint AS index_bytes,
       sum(pg_total_relation_size(t.oid))::bigint AS total_bytes,
       coalesce(sum(s.n_live_tup), 0)::bigint AS live,
       coalesce(sum(s.n_dead_tup), 0)::bigint AS dead,
       max(s.last_autovacuum) AS last_autovacuum,
       coalesce(sum(s.autovacuum_count), 0)::bigint AS autovacuums
FROM tree t LEFT JOIN pg_stat_user_tables s ON s.relid = t.oid
GROUP BY t.root
ORDER BY t.root
"""

# Who holds the oldest snapshot, not only its age: a soak once saw a ~55 s-old snapshot that
# was not its own idle transaction, and nothing said whose it was.
OLDEST_SNAPSHOT = r"""
WITH a AS (
    SELECT * FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
)
SELECT coalesce(max(age(backend_xmin)), 0) AS xmin_age,
       count(*) FILTER (WHERE state = 'idle in transaction') AS idle_in_transaction,
       (SELECT format('%s, %s, %s s in its transaction: %s',
                      coalesce(nullif(application_name, ''), backend_type), state,
                      round(extract(epoch FROM now() - xact_start)::numeric, 1),
                      left(regexp_replace(query, '\s+', ' ', 'g'), 80))
        FROM a WHERE backend_xmin IS NOT NULL
        ORDER BY age(backend_xmin) DESC LIMIT 1) AS xmin_holder
FROM a
"""


def sample(conn: psycopg.Connection[Any], schema: str) -> dict[str, Any]:
    """One reading: ``{"tables": {name: {...}}, "xmin_age": n, "idle_in_transaction": n,
    "xmin_holder": text or None}``."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(TABLES, {"schema": schema})
        tables = {row.pop("name"): row for row in cur.fetchall()}
        cur.execute(OLDEST_SNAPSHOT)
        activity = cur.fetchone() or {}
    for row in tables.values():
        at = row["last_autovacuum"]
        row["last_autovacuum"] = at.isoformat() if isinstance(at, datetime) else None
    return {"tables": tables, **activity}
