"""The ``cronbase`` command line (the console script runs :func:`main`)."""

from . import dashboard, effects, grants, jobs, keys, ops, run, schedules, sql, workers  # noqa: F401  # importing registers their commands
from .main import cli, main

__all__ = ["cli", "main"]
