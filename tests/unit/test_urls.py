"""Database URLs: psycopg's own options in a URL, and URLs of other databases, refused by name."""

from __future__ import annotations

import re

import psycopg
import pytest

import cronbase
from cronbase.db import pool
from cronbase.db.database import Database


@pytest.mark.parametrize(
    ("url", "bare", "threshold"),
    [
        ("postgresql://u@h/db?prepare_threshold=0", "postgresql://u@h/db", 0),
        (
            "postgresql://u@h/db?sslmode=disable&prepare_threshold=none",
            "postgresql://u@h/db?sslmode=disable",
            None,
        ),
        ("host=h dbname=db prepare_threshold=5", "host=h dbname=db", 5),
    ],
)
def test_prepare_threshold_in_a_url_is_taken_out_for_psycopg(
    url: str, bare: str, threshold: int | None
) -> None:
    assert pool.split_client_options(url) == (bare, {"prepare_threshold": threshold})
    pool.check_url(url)  # libpq would refuse the option; cronbase accepts it


def test_a_bad_prepare_threshold_is_refused_naming_it() -> None:
    with pytest.raises(cronbase.DatabaseURLError, match="prepare_threshold must be a number"):
        pool.check_url("postgresql://u:secret@h/db?prepare_threshold=lots")


def test_a_url_of_another_database_is_refused_naming_the_fix() -> None:
    with pytest.raises(cronbase.DatabaseURLError, match="use a postgresql:// URL") as caught:
        cronbase.App("mysql://root:hunter2@localhost/app")
    assert "hunter2" not in str(caught.value)


def test_transaction_mode_turns_prepared_statements_off_and_listens_only_where_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("CRONBASE_POOLER", raising=False)
    monkeypatch.delenv("CRONBASE_LISTEN_URL", raising=False)
    direct = "postgresql://app@db:5432/app"
    session = Database("postgresql://app@pgbouncer:6432/app")
    assert (session.options(), session.listen_url) == ({}, "postgresql://app@pgbouncer:6432/app")
    pooled = Database("postgresql://app@pgbouncer:6432/app", pooler="transaction")
    assert (pooled.options(), pooled.listen_url) == ({"prepare_threshold": None}, None)
    told = Database("postgresql://app@pgbouncer:6432/app", pooler="transaction", listen_url=direct)
    assert told.listen_url == direct
    with pytest.raises(cronbase.ConfigurationError, match="unknown pooler 'statement'"):
        Database(direct, pooler="statement")


def test_urls_of_other_schemes_and_sqlalchemy_drivers_name_the_fix() -> None:
    for url, hint in [
        ("mysql+pymysql://root:pw@h/app", "cronbase needs PostgreSQL; use a postgresql:// URL"),
        ("postgresql+psycopg://u:pw@h/app", "drop the SQLAlchemy driver part '+psycopg'"),
        ("redis://h:6379/0", "cronbase needs PostgreSQL"),
    ]:
        with pytest.raises(cronbase.DatabaseURLError, match=re.escape(hint)) as caught:
            pool.check_url(url)
        assert "pw@" not in str(caught.value)
    pool.check_url("postgres://u@h/app")  # Heroku's spelling stays accepted


def test_connections_notice_a_silent_peer_unless_the_url_says_otherwise() -> None:
    """A server whose machine died answers nothing: without keepalives and tcp_user_timeout,
    libpq waits for the kernel (~15 minutes with a statement in flight, hours when idle)."""
    _, kwargs = pool.connection_kwargs("postgresql://u@h/db", "test")
    assert {name: kwargs[name] for name in pool.TCP_DEFAULTS} == pool.TCP_DEFAULTS
    assert int(kwargs["tcp_user_timeout"]) <= 60_000
    idle, interval, count = (
        int(kwargs[name]) for name in ("keepalives_idle", "keepalives_interval", "keepalives_count")
    )
    assert idle + interval * count <= 60

    # A URL (either form) that sets one keeps its value; the others keep cronbase's.
    for url in (
        "postgresql://u@h/db?tcp_user_timeout=5000&keepalives_idle=2",
        "host=h dbname=db tcp_user_timeout=5000 keepalives_idle=2",
    ):
        bare, kwargs = pool.connection_kwargs(url, "test")
        assert "tcp_user_timeout" not in kwargs
        assert "keepalives_idle" not in kwargs
        assert psycopg.conninfo.conninfo_to_dict(bare)["tcp_user_timeout"] == "5000"
        assert kwargs["keepalives_interval"] == pool.TCP_DEFAULTS["keepalives_interval"]
