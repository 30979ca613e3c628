"""tests/servers.py itself: clusters that restart, crash and fail over, and a real pgbouncer.

Only psycopg here, no cronbase: these pin the behaviour that cronbase's own tests build on.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg
import pytest
from psycopg import errors

from tests.servers import PgBouncer, PostgresCluster, ServerError, wait_until
from tests.servers import make_cluster as make_cluster
from tests.servers import make_pgbouncer as make_pgbouncer
from tests.servers import pg_cluster as pg_cluster
from tests.servers import pgbouncer_session as pgbouncer_session
from tests.servers import pgbouncer_transaction as pgbouncer_transaction


def one(url: str, query: str, params: Any = None, **options: Any) -> Any:
    """The first column of the first row of ``query``, on a connection of its own."""
    with psycopg.connect(url, autocommit=True, **options) as conn:
        row = conn.execute(query, params).fetchone()
        assert row is not None
        return row[0]


def one_on(conn: psycopg.Connection[Any], query: str) -> Any:
    row = conn.execute(query).fetchone()
    assert row is not None
    return row[0]


def test_a_cluster_starts_answers_and_is_gone_after_close(
    make_cluster: Callable[[], PostgresCluster],
) -> None:
    cluster = make_cluster()
    assert cluster.is_running
    assert one(cluster.url, "SELECT current_setting('server_version_num')::int / 10000") == 15
    assert one(cluster.url, "SELECT inet_server_port()") == cluster.port
    assert one(cluster.url, "SELECT current_setting('fsync')") == "off"
    other = cluster.create_database("other db")
    assert one(other, "SELECT current_database()") == "other db"

    cluster.close()
    assert not cluster.is_running
    assert not cluster.folder.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(cluster.url, connect_timeout=5)


def test_restart_immediate_drops_connections_and_keeps_committed_rows(
    pg_cluster: PostgresCluster,
) -> None:
    before = psycopg.connect(pg_cluster.url, autocommit=True)
    before.execute("CREATE TABLE t (n int)")
    before.execute("INSERT INTO t VALUES (1)")

    pg_cluster.restart("immediate")

    with pytest.raises(psycopg.OperationalError):
        before.execute("SELECT 1")
    before.close()
    assert one(pg_cluster.url, "SELECT count(*) FROM t") == 1
    # No checkpoint at an immediate stop: the start replayed the WAL.
    assert "automatic recovery in progress" in pg_cluster.log.read_text()


def test_kill_is_a_crash_and_start_recovers(pg_cluster: PostgresCluster) -> None:
    conn = psycopg.connect(pg_cluster.url, autocommit=True)
    conn.execute("CREATE TABLE t (n int)")
    conn.execute("INSERT INTO t VALUES (1)")

    pg_cluster.kill()

    assert not pg_cluster.is_running
    with pytest.raises(psycopg.OperationalError):
        conn.execute("SELECT 1")
    conn.close()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(pg_cluster.url, connect_timeout=5)
    pg_cluster.start()
    assert one(pg_cluster.url, "SELECT count(*) FROM t") == 1
    assert "not properly shut down" in pg_cluster.log.read_text()


def test_start_failure_raises_with_the_server_log(pg_cluster: PostgresCluster) -> None:
    pg_cluster.stop()
    with socket.socket() as squatter:
        # Like the server's socket: the port may be in TIME_WAIT from the server's connections.
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", pg_cluster.port))
        squatter.listen()
        with pytest.raises(ServerError, match="could not bind IPv4 address"):
            pg_cluster.start()
    assert not pg_cluster.is_running


def test_a_replica_follows_the_primary_and_takes_over_after_a_crash(
    make_cluster: Callable[[], PostgresCluster],
) -> None:
    primary = make_cluster()
    with psycopg.connect(primary.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE t (n int)")
        conn.execute("INSERT INTO t VALUES (1)")
    replica = primary.make_replica()
    assert replica.port != primary.port
    assert one(replica.url, "SELECT pg_is_in_recovery()") is True
    one(primary.url, "INSERT INTO t VALUES (2) RETURNING n")

    def replica_has_both_rows() -> bool:
        return bool(one(replica.url, "SELECT count(*) = 2 FROM t"))

    wait_until(replica_has_both_rows, timeout=30, what="the replica to receive row 2")
    with pytest.raises(errors.ReadOnlySqlTransaction):
        one(replica.url, "INSERT INTO t VALUES (3) RETURNING n")

    primary.kill()
    replica.promote()

    assert one(replica.url, "INSERT INTO t VALUES (3) RETURNING n") == 3
    assert one(replica.url, "SELECT array_agg(n ORDER BY n) FROM t") == [1, 2, 3]


def test_a_multi_host_conninfo_reaches_the_primary_before_and_after_failover(
    make_cluster: Callable[[], PostgresCluster],
) -> None:
    primary = make_cluster()
    replica = primary.make_replica()
    # The replica first: target_session_attrs makes libpq skip it while it is read-only.
    both = (
        f"host=127.0.0.1,127.0.0.1 port={replica.port},{primary.port} user=postgres "
        "dbname=postgres target_session_attrs=read-write connect_timeout=5"
    )
    assert one(both, "SELECT inet_server_port()") == primary.port

    primary.kill()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(both)  # the replica is still read-only; the primary is gone
    replica.promote()

    assert one(both, "SELECT inet_server_port()") == replica.port


def run_from_threads(url: str, *, threads: int, queries: int, **options: Any) -> set[int]:
    """``queries`` parameterised queries on each of ``threads`` connections, run at once;
    the server backends' pids that answered."""

    def client(number: int) -> set[int]:
        seen: set[int] = set()
        with psycopg.connect(url, autocommit=True, **options) as conn:
            for i in range(queries):
                n = number * 1000 + i
                row = conn.execute("SELECT %s::int * 2, pg_backend_pid()", [n]).fetchone()
                assert row is not None
                assert row[0] == n * 2
                seen.add(row[1])
        return seen

    with ThreadPoolExecutor(threads) as pool:
        return set().union(*pool.map(client, range(threads)))


def pool_of(bouncer: PgBouncer, database: str) -> dict[str, Any]:
    pools = [row for row in bouncer.show("POOLS") if row["database"] == database]
    assert len(pools) == 1, bouncer.show("POOLS")
    return pools[0]


def test_pgbouncer_transaction_mode_shares_servers_between_threads(
    pg_cluster: PostgresCluster, make_pgbouncer: Callable[..., PgBouncer]
) -> None:
    bouncer = make_pgbouncer(pg_cluster, pool_mode="transaction", default_pool_size=2)

    # prepare_threshold=None: no named prepared statements, which another client's server
    # connection would not have (pgbouncer 1.18 does not track them).
    backends = run_from_threads(bouncer.url(), threads=8, queries=50, prepare_threshold=None)

    assert 1 <= len(backends) <= 2  # 8 clients, at most default_pool_size server connections
    pool = pool_of(bouncer, "postgres")
    assert pool["pool_mode"] == "transaction"
    assert pool["user"] == "postgres"
    assert len([s for s in bouncer.show("SERVERS") if s["database"] == "postgres"]) <= 2


def test_pgbouncer_transaction_mode_breaks_named_prepared_statements(
    pg_cluster: PostgresCluster, make_pgbouncer: Callable[..., PgBouncer]
) -> None:
    # Why prepare_threshold=None behind it: each psycopg connection names its statements
    # _pg3_0, _pg3_1...; with one server connection, the second client's _pg3_0 collides.
    bouncer = make_pgbouncer(pg_cluster, pool_mode="transaction", default_pool_size=1)
    assert one(bouncer.url(), "SELECT %s::int", [1], prepare_threshold=0) == 1
    with pytest.raises(errors.DuplicatePreparedStatement):
        one(bouncer.url(), "SELECT %s::int", [2], prepare_threshold=0)
    assert one(bouncer.url(), "SELECT %s::int", [3], prepare_threshold=None) == 3


def test_pgbouncer_session_mode_gives_each_client_its_server_for_the_session(
    pg_cluster: PostgresCluster, make_pgbouncer: Callable[..., PgBouncer]
) -> None:
    bouncer = make_pgbouncer(pg_cluster, pool_mode="session", default_pool_size=2)
    # psycopg's default prepare_threshold: each client prepares its query (_pg3_0) at its 6th
    # run, and 8 clients take turns on 2 server connections. No collision: at the end of each
    # session, pgbouncer's server_reset_query (DISCARD ALL) drops the prepared statements.
    backends = run_from_threads(bouncer.url(), threads=8, queries=50)

    assert 1 <= len(backends) <= 2
    assert pool_of(bouncer, "postgres")["pool_mode"] == "session"
    with psycopg.connect(bouncer.url()) as first, psycopg.connect(bouncer.url()) as second:
        first_pid = one_on(first, "SELECT pg_backend_pid()")
        second_pid = one_on(second, "SELECT pg_backend_pid()")
        assert first_pid != second_pid
        assert one_on(first, "SELECT pg_backend_pid()") == first_pid  # held for the session
        clients = [c for c in bouncer.show("CLIENTS") if c["database"] == "postgres"]
        assert len(clients) == 2


@pytest.mark.parametrize("mode", ["transaction", "session"])
def test_pgbouncer_reconnects_after_postgres_restarts(
    mode: str, pg_cluster: PostgresCluster, request: pytest.FixtureRequest
) -> None:
    bouncer: PgBouncer = request.getfixturevalue(f"pgbouncer_{mode}")
    assert bouncer.pool_mode == mode
    url = bouncer.url()
    before = one(url, "SELECT pg_backend_pid()", prepare_threshold=None)

    pg_cluster.restart("fast")

    # pgbouncer learns of the dead server connection when it reads from it: a client may get
    # an error meanwhile, as in a deployment. Then it opens a new one.
    def new_backend() -> int | None:
        try:
            return int(one(url, "SELECT pg_backend_pid()", prepare_threshold=None))
        except psycopg.OperationalError:
            return None

    after = wait_until(new_backend, timeout=30, what="a query through pgbouncer to work again")
    assert after != before
