"""Celery's vocabulary on cronbase: port a Celery module by changing its imports.

``from cronbase.contrib.celery import Celery, shared_task, chain, group, chord, crontab,
AsyncResult``; what maps, what is warned about and what is refused: :mod:`.compatibility`.
"""

from __future__ import annotations

from . import exceptions, states
from .app import Celery
from .beat import crontab
from .canvas import Signature, chain, chord, group, signature, subtask
from .current import current_app
from .exceptions import CeleryCompatibilityWarning
from .result import AsyncResult, GroupResult
from .shared import shared_task
from .task import Task

__all__ = [
    "AsyncResult",
    "Celery",
    "CeleryCompatibilityWarning",
    "GroupResult",
    "Signature",
    "Task",
    "chain",
    "chord",
    "crontab",
    "current_app",
    "exceptions",
    "group",
    "shared_task",
    "signature",
    "states",
    "subtask",
]
