"""What the coordinator reads about a subject's tables every sample: each root table of its
schemas (partitions and inheritance children summed under it, so a table or partition the
library adds later is covered), with its heap and total size, live and dead tuples, and the
size of each of its indexes (index partitions summed under their root index). Beside them, the
oldest snapshot a session holds and whose it is: what keeps vacuum from removing dead tuples.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

# The tree of each root table: itself and its partitions or inheritance children, any level.
TABLES = """
WITH RECURSIVE
tree AS (
    SELECT c.oid, c.relname::text AS root
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = ANY(%(schemas)s) AND c.relkind IN ('r', 'p')
      AND NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = c.oid)
    UNION ALL
    SELECT i.inhrelid, t.root
    FROM pg_inherits i JOIN tree t ON i.inhparent = t.oid
)
SELECT t.root AS name,
       count(*) - 1 AS partitions,
       sum(pg_relation_size(t.oid))::bigint AS heap_bytes,
       sum(pg_total_relation_size(t.oid))::bigint AS total_bytes,
       coalesce(sum(s.n_live_tup), 0)::bigint AS live,
       coalesce(sum(s.n_dead_tup), 0)::bigint AS dead,
       coalesce(sum(s.autovacuum_count), 0)::bigint AS autovacuums
FROM tree t LEFT JOIN pg_stat_user_tables s ON s.relid = t.oid
GROUP BY t.root
ORDER BY t.root
"""

# An index attached to a partitioned index is in pg_inherits under it: walk down from each
# index that has no parent, and sum the leaves' sizes under the top one's name.
INDEXES = """
WITH RECURSIVE
tree AS (
    SELECT c.oid, c.relname::text AS root
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = ANY(%(schemas)s) AND c.relkind IN ('r', 'p')
      AND NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = c.oid)
    UNION ALL
    SELECT i.inhrelid, t.root
    FROM pg_inherits i JOIN tree t ON i.inhparent = t.oid
),
tops AS (
    SELECT x.indexrelid AS top, t.root
    FROM pg_index x JOIN tree t ON t.oid = x.indrelid
    WHERE NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = x.indexrelid)
),
leaves AS (
    SELECT top AS oid, top FROM tops
    UNION ALL
    SELECT i.inhrelid, l.top FROM pg_inherits i JOIN leaves l ON i.inhparent = l.oid
)
SELECT tops.root, c.relname::text AS name, sum(pg_relation_size(l.oid))::bigint AS bytes
FROM leaves l JOIN tops USING (top) JOIN pg_class c ON c.oid = l.top
GROUP BY tops.root, c.relname
ORDER BY tops.root, c.relname
"""

OLDEST_SNAPSHOT = r"""
WITH a AS (
    SELECT * FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid()
)
SELECT coalesce(max(age(backend_xmin)), 0)::bigint AS xmin_age,
       (SELECT format('%s, %s, %s s in its transaction',
                      coalesce(nullif(application_name, ''), backend_type), state,
                      round(extract(epoch FROM now() - xact_start)::numeric, 1))
        FROM a WHERE backend_xmin IS NOT NULL
        ORDER BY age(backend_xmin) DESC LIMIT 1) AS xmin_holder
FROM a
"""


def sample(conn: psycopg.Connection[Any], schemas: tuple[str, ...]) -> dict[str, Any]:
    """``{"tables": {name: {partitions, heap_bytes, total_bytes, live, dead, autovacuums,
    indexes: {name: bytes}}}, "xmin_age": n, "xmin_holder": text or None}``."""
    params = {"schemas": list(schemas)}
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(TABLES, params)
        tables = {row.pop("name"): {**row, "indexes": {}} for row in cur.fetchall()}
        cur.execute(INDEXES, params)
        for row in cur.fetchall():
            if row["root"] in tables:
                tables[row["root"]]["indexes"][row["name"]] = row["bytes"]
        cur.execute(OLDEST_SNAPSHOT)
        activity = cur.fetchone() or {}
    return {"tables": tables, **activity}


def hot(tables: dict[str, Any], names: tuple[str, ...] | None) -> dict[str, int]:
    """The hot tables' sums: dead and live tuples, heap, index and total bytes."""
    chosen = [row for name, row in tables.items() if names is None or name in names]
    return {
        "dead": sum(r["dead"] for r in chosen),
        "live": sum(r["live"] for r in chosen),
        "heap_bytes": sum(r["heap_bytes"] for r in chosen),
        "index_bytes": sum(sum(r["indexes"].values()) for r in chosen),
        "total_bytes": sum(r["total_bytes"] for r in chosen),
    }
