"""The App follows Django's connection to another database. Django's test runner (and
pytest-django) points ``DATABASES[alias]`` at ``test_<name>`` after startup, when the App is built;
without this, a test's jobs would be read and written in the project's own database."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from django.db import connections
from django.db.backends.base.base import NO_DB_ALIAS
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ...db.database import Database
from .config import Config, alias_url, connection_url
from .database import DjangoDatabase, settings_of

if TYPE_CHECKING:
    from ...app import App

logger = logging.getLogger("cronbase")


class DatabaseFollower:
    """A receiver of Django's ``connection_created``: when the alias's connection opens on another
    database than the App's, the App moves there (its tasks and services with it).

    Django connects to the test database to migrate it before any test runs, and a parallel test
    worker connects to its clone before its first test, so a connect is where every switch shows;
    a defer pays nothing for it. The built App (``DATABASE``) takes the connection's parameters;
    a user's App (``APP``) keeps its own URL and takes only the new database name.
    """

    def __init__(self, config: Config, app: App) -> None:
        assert config.alias is not None  # only built when settings.CRONBASE names an alias
        self.alias = config.alias
        self.app_path = config.app_path
        self.app = app
        # Django's parameters that the App's database stands beside.
        self._followed = alias_url(self.alias)
        self._lock = threading.Lock()

    def __call__(self, sender: object, connection: Any, **kwargs: object) -> None:
        # The alias's own connections only, in any thread: they share the settings dict (Django
        # updates it in place for a parallel worker's clone). The test runner's connections to
        # the "postgres" database, to create the test database, are on copies: not followed.
        if connection.alias == NO_DB_ALIAS:
            self._release_for(connection)
            return
        if (
            connection.alias != self.alias
            or connection.settings_dict is not connections.settings[self.alias]
        ):
            return
        url = connection_url(connection)
        if url == self._followed:
            return
        with self._lock:
            if url != self._followed:
                self._move(url)
                self._followed = url

    def _release_for(self, server: Any) -> None:
        """Django connected to the server's maintenance database (its test runner, to create or
        drop a test database): the App's pooled connections are closed (they reopen on use), so
        that dropping the database they are on is not refused for "other sessions"."""
        db = self.app.db
        if db.is_embedded or _dbname(connection_url(server)) == _dbname(db.url):
            return
        db.close()

    def _move(self, url: str) -> None:
        old = self.app.db
        name = _dbname(url)
        if self.app_path is None:
            if url == old.url:
                return
            target = url
        elif old.is_embedded or name is None or name == _dbname(old.url):
            # Nothing to retarget (an embedded App is refused by the same-database check at the
            # first migrate or atomic defer, with the fix).
            return
        else:
            target = make_conninfo(old.url, dbname=name)
        self.app._swap_database(database_on(old, target))
        close_database(old)
        if self.app_path is None:
            logger.info("cronbase follows DATABASES[%r] to database %r", self.alias, name)
        else:
            # The user's URL, changed: say so, once per move.
            logger.warning(
                "DATABASES[%r] moved to database %r (Django's test runner?); the App of "
                "settings.CRONBASE['APP'] (%s) follows it there, with the rest of its URL",
                self.alias,
                name,
                self.app_path,
            )


def database_on(old: Database, url: str) -> Database:
    """``old``'s settings on ``url``. LISTEN moves too, never left on the old database: on
    ``url`` itself, or on the configured listen URL with the new database name."""
    listen = old.listen_url
    if listen is not None:
        listen = url if listen == old.url else make_conninfo(listen, dbname=_dbname(url))
    settings = {**settings_of(old, url), "listen_url": listen}
    if isinstance(old, DjangoDatabase):
        return DjangoDatabase(old.source, **settings)
    return Database(**settings)


def _dbname(url: str) -> str | None:
    name = conninfo_to_dict(url).get("dbname")
    return None if name is None else str(name)


def close_database(db: Database) -> None:
    """Close the pools of a Database the App has left, without waiting for their users: the sync
    pool now, an async pool on its own event loop while that runs (a pool is bound to its loop;
    one whose loop has stopped goes with it)."""
    try:
        db.close()
    except Exception:
        logger.exception("closing the pool of the database cronbase left failed; ignored")
    db.close_async_pool_soon()
