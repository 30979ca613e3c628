"""The run's PostgreSQL and its databases: one cluster for the whole run, a fresh database for
each capacity drain and each scenario, dropped afterwards whatever happened."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Callable, Iterator

import psycopg
from psycopg import sql

from ..cluster import Cluster, running_cluster

SERVER_SETTINGS = {"max_connections": "200"}


@contextlib.contextmanager
def cluster_for_run(log: Callable[[str], None]) -> Iterator[Cluster]:
    """PostgreSQL's defaults (autovacuum_naptime 60 s), max_connections 200, and
    pg_stat_statements preloaded when the server starts with it."""
    with contextlib.ExitStack() as stack:
        try:
            cluster = stack.enter_context(
                running_cluster(
                    {**SERVER_SETTINGS, "shared_preload_libraries": "pg_stat_statements"}
                )
            )
        except subprocess.CalledProcessError:
            log("the server does not start with pg_stat_statements; starting without it")
            cluster = stack.enter_context(running_cluster(SERVER_SETTINGS))
        yield cluster


@contextlib.contextmanager
def database(cluster: Cluster, name: str) -> Iterator[str]:
    url = cluster.create_database(name)
    try:
        yield url
    finally:
        with (
            contextlib.suppress(psycopg.Error),
            psycopg.connect(cluster.url(), autocommit=True) as c,
        ):
            c.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
