"""``settings.CRONBASE``, read and checked once, and the App it describes: the user's own, or one
built on a Django database alias (its credentials come from ``settings.DATABASES``)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connections
from psycopg import pq
from psycopg.conninfo import make_conninfo

from ...app import App
from ...errors import ConfigurationError

# settings.CRONBASE's keys and their defaults. APP: "module:attribute" of the user's own App;
# else the App is built on the DATABASE alias with SCHEMA, POOL_SIZE, POOLER and LISTEN_URL.
DEFAULTS: dict[str, Any] = {
    "APP": None,
    "DATABASE": "default",
    "SCHEMA": "cronbase",
    "POOL_SIZE": None,
    "POOLER": None,
    "LISTEN_URL": None,
    "TASKS_MODULE": "tasks",
}
# Settings of the built App: with APP, they belong in the user's App(...) call.
_BUILT_APP_ONLY = ("SCHEMA", "POOL_SIZE", "POOLER", "LISTEN_URL")

# libpq's own keywords: what Django's connection parameters may pass on to cronbase's pools.
# The rest (cursor_factory, context, prepare_threshold...) are psycopg objects for Django's use.
_LIBPQ_KEYWORDS = frozenset(d.keyword.decode() for d in pq.Conninfo.get_defaults())


@dataclass(frozen=True)
class Config:
    """settings.CRONBASE, checked."""

    app_path: str | None
    alias: str | None
    schema: str
    pool_size: int | None
    pooler: str | None
    listen_url: str | None
    tasks_module: str | None


def read_config() -> Config:
    """settings.CRONBASE with its defaults; an unknown key or a wrong combination is refused."""
    given = getattr(settings, "CRONBASE", {})
    if not isinstance(given, dict):
        raise ConfigurationError(
            f'settings.CRONBASE must be a dict, e.g. {{"DATABASE": "default"}}, got {given!r}'
        )
    unknown = sorted(set(given) - set(DEFAULTS))
    if unknown:
        raise ConfigurationError(
            f"unknown key {', '.join(map(repr, unknown))} in settings.CRONBASE; "
            f"known: {', '.join(DEFAULTS)}"
        )
    values = {**DEFAULTS, **given}
    for key, example in (("APP", '"myproject.jobs:app"'), ("TASKS_MODULE", '"tasks"')):
        if values[key] is not None and not isinstance(values[key], str):
            raise ConfigurationError(
                f'settings.CRONBASE["{key}"] must be a string, e.g. {example}, or None; '
                f"got {values[key]!r}"
            )
    if values["APP"] is not None:
        clashing = [key for key in _BUILT_APP_ONLY if key in given]
        if clashing:
            raise ConfigurationError(
                f"settings.CRONBASE gives APP {values['APP']!r} and {', '.join(clashing)}; "
                "set those on your App(...) instead"
            )
    elif values["DATABASE"] is None:
        raise ConfigurationError(
            'settings.CRONBASE["DATABASE"] is None but no APP is given; name a DATABASES alias, '
            'e.g. "default", or give APP: "myproject.jobs:app"'
        )
    alias = values["DATABASE"]
    if alias is not None:
        check_alias(alias)
    return Config(
        app_path=values["APP"],
        alias=alias,
        schema=values["SCHEMA"],
        pool_size=values["POOL_SIZE"],
        pooler=values["POOLER"],
        listen_url=values["LISTEN_URL"],
        tasks_module=values["TASKS_MODULE"],
    )


def check_alias(alias: str) -> None:
    """Refuse an alias that is missing, or not PostgreSQL through psycopg 3."""
    if alias not in settings.DATABASES:
        raise ConfigurationError(
            f'settings.CRONBASE["DATABASE"] is {alias!r}, which is not in settings.DATABASES '
            f"({', '.join(map(repr, settings.DATABASES))}); name one of those"
        )
    wrapper = connections[alias]
    if wrapper.vendor != "postgresql":
        raise ConfigurationError(
            f"cronbase needs PostgreSQL, but database {alias!r} uses "
            f"{settings.DATABASES[alias]['ENGINE']!r}; point settings.CRONBASE['DATABASE'] at a "
            "django.db.backends.postgresql database"
        )
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        raise ConfigurationError(
            f"database {alias!r} runs on psycopg2; cronbase shares Django's connection through "
            "psycopg 3: pip install 'psycopg[binary]' (Django uses it once installed)"
        )


def alias_url(alias: str) -> str:
    """A libpq connection string for ``alias``, from Django's own connection parameters."""
    return connection_url(connections[alias])


def connection_url(wrapper: Any) -> str:
    """A libpq connection string for a Django connection (a ``DatabaseWrapper``), from the
    parameters it connects with now (under the test runner: the test database's)."""
    params = wrapper.get_connection_params()
    return make_conninfo(**{k: v for k, v in params.items() if k in _LIBPQ_KEYWORDS})


def build_app(config: Config) -> App:
    """The App settings.CRONBASE describes: the user's (APP), or one on the DATABASE alias."""
    if config.app_path is not None:
        # Imported here: cli.common is the one place that loads a user's App from a path.
        from ...cli.common import load_app

        return load_app(config.app_path)
    assert config.alias is not None  # read_config refuses neither APP nor DATABASE
    options: dict[str, Any] = {}
    if config.pool_size is not None:
        options["pool_size"] = config.pool_size
    return App(
        alias_url(config.alias),
        schema=config.schema,
        pooler=config.pooler,
        listen_url=config.listen_url,
        **options,
    )


# Reentrant: a user module loaded for APP may import a module that asks for the App again.
_lock = threading.RLock()
_configured: tuple[Config, App] | None = None


def configured() -> tuple[Config, App]:
    """settings.CRONBASE and its App, built on first use (a tasks module may ask before
    AppConfig.ready(): models that import their tasks are loaded first)."""
    global _configured
    with _lock:
        if _configured is None:
            config = read_config()
            _configured = (config, build_app(config))
        return _configured
