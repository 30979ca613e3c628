"""Helpers for users' own tests: inline mode, draining a test database, enqueued-job assertions.

- :func:`inline` runs deferred jobs at once, in process, with no database;
- :func:`drain` / :func:`drain_async` run what is due on a test database and return the outcomes;
- :func:`enqueued` / :func:`enqueued_async` find jobs by task and payload, with assertions;
- :func:`throwaway_schema` (:func:`create_schema`, :func:`drop_schema`) and :func:`use_database`
  give an App a migrated schema of its own on a test database; the pytest plugin
  (``cronbase.testing.pytest_plugin``) wraps them as ``cronbase_*`` fixtures.
"""

from .database import (
    create_schema,
    drop_schema,
    throwaway_schema,
    use_database,
    use_database_async,
)
from .drain import Drained, DrainedJob, drain, drain_async
from .enqueued import Enqueued, enqueued, enqueued_async
from .inline import InlineJob, InlineJobContext, InlineRun, inline

__all__ = [
    "Drained",
    "DrainedJob",
    "Enqueued",
    "InlineJob",
    "InlineJobContext",
    "InlineRun",
    "create_schema",
    "drain",
    "drain_async",
    "drop_schema",
    "enqueued",
    "enqueued_async",
    "inline",
    "throwaway_schema",
    "use_database",
    "use_database_async",
]
