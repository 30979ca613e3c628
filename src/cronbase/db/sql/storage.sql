-- Bloat made visible (issue 23): what each cronbase table takes on disk, its live and dead rows,
-- when it was last vacuumed, and what holds vacuum back. Read by `cronbase stats`, `cronbase
-- check`, the dashboard and the metrics; catalog and statistics reads only, nothing scanned.

-- name: table_storage
-- Per cronbase table (a partitioned one summed over its partitions): heap bytes (with TOAST) and
-- index bytes, live and dead rows (the statistics' estimates), the last manual and automatic
-- vacuum of any of its parts, and how many partitions it has (NULL: not partitioned).
WITH tables AS (
    SELECT c.oid, c.relname, c.relkind FROM pg_class c
    WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = {schema_name})
      AND c.relkind IN ('r', 'p') AND NOT c.relispartition
)
SELECT t.relname AS name,
       sum(pg_table_size(p.relid))::bigint AS heap_bytes,
       sum(pg_indexes_size(p.relid))::bigint AS index_bytes,
       COALESCE(sum(s.n_live_tup), 0)::bigint AS live_rows,
       COALESCE(sum(s.n_dead_tup), 0)::bigint AS dead_rows,
       max(s.last_vacuum) AS last_vacuum,
       max(s.last_autovacuum) AS last_autovacuum,
       CASE WHEN t.relkind = 'p' THEN count(*) END AS partitions
FROM tables t
-- A plain table is its own one part (pg_partition_tree returns no row for it).
CROSS JOIN LATERAL (
    SELECT relid FROM pg_partition_tree(t.oid) WHERE isleaf
    UNION ALL
    SELECT t.oid WHERE t.relkind = 'r'
) p
LEFT JOIN pg_stat_user_tables s ON s.relid = p.relid
GROUP BY t.relname, t.relkind
ORDER BY t.relname;

-- name: xmin_holders
-- What holds back vacuum in this database, oldest first: sessions with an old snapshot (a
-- transaction open under REPEATABLE READ, a long query, a standby's feedback) or an old
-- transaction id (a transaction that wrote, then sat idle: under READ COMMITTED it keeps no
-- snapshot between statements, but vacuum must still keep what its id may see), prepared
-- transactions, and replication slots. age: seconds its transaction has been open (a slot's:
-- NULL); xid_age: transactions since its horizon. Another role's sessions show only to a
-- superuser or a member of pg_read_all_stats.
SELECT * FROM (
    SELECT 'session' AS kind, pid, application_name AS application, state,
           extract(epoch FROM now() - COALESCE(xact_start, backend_start))::float8 AS age,
           greatest(age(backend_xmin), age(backend_xid))::bigint AS xid_age
    FROM pg_stat_activity
    WHERE (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL) AND pid <> pg_backend_pid()
      -- An autovacuum worker holds the horizon only while it runs, and ends by itself.
      AND backend_type <> 'autovacuum worker'
      AND (datname = current_database() OR datname IS NULL)
    UNION ALL
    SELECT 'prepared', NULL, gid, 'prepared', extract(epoch FROM now() - prepared)::float8,
           age(transaction)::bigint
    FROM pg_prepared_xacts WHERE database = current_database()
    UNION ALL
    SELECT 'slot', NULL, slot_name, CASE WHEN active THEN 'active' ELSE 'inactive' END, NULL,
           greatest(age(xmin), age(catalog_xmin))::bigint
    FROM pg_replication_slots WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL
) h
ORDER BY xid_age DESC NULLS LAST, age DESC NULLS LAST
LIMIT %(limit)s;
