"""cronbase's pytest fixtures (registered as the ``cronbase`` pytest11 entry point).

None is autouse: nothing happens until a test asks for one.

- ``cronbase_database_url``: the test database, from ``CRONBASE_TEST_DATABASE_URL``;
- ``cronbase_schema``: a throwaway migrated schema on it, dropped after the test;
- ``cronbase_app``: your App (the ``cronbase_app = "pkg.module:app"`` ini option) pointed at that
  schema for the test. Override this fixture to build the App another way.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ..app import App

URL_VARIABLE = "CRONBASE_TEST_DATABASE_URL"
APP_OPTION = "cronbase_app"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        APP_OPTION,
        "your cronbase App as module:attribute (e.g. myproject.jobs:app), for the cronbase_app "
        "fixture",
        default="",
    )


@pytest.fixture(scope="session")
def cronbase_database_url() -> str:
    """The PostgreSQL URL of your test database (``CRONBASE_TEST_DATABASE_URL``)."""
    url = os.environ.get(URL_VARIABLE, "").strip()
    if not url:
        pytest.fail(
            f"{URL_VARIABLE} is not set: set it to a PostgreSQL URL cronbase's fixtures may create "
            "schemas in (e.g. postgresql://localhost/myapp_test)",
            pytrace=False,
        )
    return url


@pytest.fixture
def cronbase_schema(cronbase_database_url: str) -> Iterator[str]:
    """A schema ``cronbase_test_<random>`` with cronbase's tables, dropped after the test."""
    # Imported here, not at the top: pytest loads this plugin in every session of a project
    # that has cronbase installed, most of which never ask for these fixtures.
    from ..errors import DatabaseURLError
    from .database import create_schema, drop_schema

    try:
        schema = create_schema(cronbase_database_url)
    except DatabaseURLError as exc:
        pytest.fail(f"{URL_VARIABLE}: {exc}", pytrace=False)
    yield schema  # pytest runs the rest whatever the test did
    drop_schema(cronbase_database_url, schema)


@pytest.fixture
def cronbase_app(request: pytest.FixtureRequest, cronbase_database_url: str) -> Iterator[App]:
    """Your App (the ``cronbase_app`` ini option) on this test's throwaway schema."""
    from ..cli.common import load_app
    from ..errors import ConfigurationError
    from .database import use_database

    path = str(request.config.getini(APP_OPTION) or "").strip()
    if not path:
        pytest.fail(
            f'the cronbase_app fixture needs your App: set `{APP_OPTION} = "myproject.jobs:app"` '
            "under [tool.pytest.ini_options] (or pass -o cronbase_app=...), or override the "
            "fixture",
            pytrace=False,
        )
    try:
        app = load_app(path)
    except ConfigurationError as exc:
        pytest.fail(f"{APP_OPTION} ini option: {exc}", pytrace=False)
    # Asked for only now: a wrong setting above costs no schema.
    schema: str = request.getfixturevalue("cronbase_schema")
    with use_database(app, cronbase_database_url, schema):
        yield app
