"""Django's connection, shared with cronbase: a defer inside ``transaction.atomic()`` is written on
it (so it commits, rolls back and honours savepoints with the block), and the worker's handlers
get fresh Django connections as Django's own requests do."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import psycopg
from django.db import close_old_connections, connections, reset_queries
from psycopg.rows import tuple_row

from ...errors import ConfigurationError

if TYPE_CHECKING:
    from ...app import App
    from ...context import JobContext
    from ...db.database import Database

# Enough to tell two databases apart: the same name and port on two servers differ in their
# start time. Plain functions any role may call.
_WHERE = "SELECT current_database(), current_setting('port'), pg_postmaster_start_time()"


def _where(conn: psycopg.Connection[Any]) -> tuple[Any, ...]:
    # Django's connection has its own cursor factory and adapters: ask for plain tuples.
    with conn.cursor(row_factory=tuple_row) as cur:
        row = cur.execute(_WHERE).fetchone()
    assert row is not None  # one row, always
    return tuple(row)


def check_same_database(alias: str, django_conn: psycopg.Connection[Any], app: App) -> None:
    """Refuse a user's App (settings.CRONBASE["APP"]) on another database than ``alias``: its jobs
    written on Django's connection would land where no worker of that App looks."""
    with app.db.connect(application_name="cronbase-django-check") as own:
        app_where = _where(own)
    django_where = _where(django_conn)
    if app_where != django_where:
        raise ConfigurationError(
            f"the App of settings.CRONBASE['APP'] is on database {app_where[0]!r} (port "
            f"{app_where[1]}), but DATABASES[{alias!r}] is {django_where[0]!r} (port "
            f"{django_where[1]}); point the App at the same database, or set "
            "settings.CRONBASE['DATABASE'] = None to keep jobs out of Django's transactions"
        )


class AtomicConnection:
    """A connection source (``app.hooks.connection_sources``): Django's psycopg connection of
    ``alias`` while a ``transaction.atomic()`` block is open on it in this thread, else None (the
    job is then written on cronbase's own pool and commits at once)."""

    def __init__(self, alias: str, app: App, *, check: bool) -> None:
        self.alias = alias
        self.app = app
        # Only a user's App can point elsewhere; one built on the alias cannot. Checked once per
        # database the App is on (it moves to the test database under Django's test runner).
        self.is_checking = check
        self._checked: Database | None = None

    def __call__(self) -> psycopg.Connection[Any] | None:
        # connections[alias] is this thread's own wrapper: another thread's atomic block is not
        # seen here, as Django's ORM would not see it either.
        wrapper = connections[self.alias]
        if not wrapper.in_atomic_block:
            return None
        # atomic() has connected (it turned autocommit off); the savepoints of inner blocks are
        # on this same connection, so a rolled-back inner block takes the job with it.
        conn: psycopg.Connection[Any] = wrapper.connection
        db = self.app.db
        if self.is_checking and self._checked is not db:
            check_same_database(self.alias, conn, self.app)
            self._checked = db
        return conn


@contextlib.contextmanager
def fresh_django_connections(job: JobContext) -> Iterator[None]:
    """Job middleware: close Django connections that are broken or past ``CONN_MAX_AGE`` before
    and after each sync handler, as Django does around each request; without it a worker's
    threads would keep connections open forever, or reuse one the server has dropped. With
    ``DEBUG``, the queries Django logs are forgotten per job, as per request."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        # An async handler, on the worker's loop: Django refuses to close connections from async
        # code (its ORM calls go through sync_to_async threads, whose connections these are not).
        yield
        return
    if any(wrapper.in_atomic_block for wrapper in connections.all(initialized_only=True)):
        # The handler runs inside its caller's transaction (cronbase.testing.inline in a
        # TestCase, whose test is one atomic block): closing the connection would end it. Django's
        # test client skips its own close_old_connections for the same reason.
        yield
        return
    reset_queries()
    close_old_connections()
    try:
        yield
    finally:
        close_old_connections()
