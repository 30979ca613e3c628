"""The current app, as Celery keeps it: the last one created, or the one set as current.

``shared_task`` and ``AsyncResult(id)`` resolve it when first used, so a module of shared tasks
can be imported before the app exists.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import ConfigurationError

if TYPE_CHECKING:
    from .app import Celery

_current: list[Celery] = []


def set_current(app: Celery) -> None:
    _current[:] = [app]


def get_current() -> Celery:
    """The current app; ConfigurationError when no ``Celery(...)`` was created yet."""
    if not _current:
        raise ConfigurationError(
            "no Celery app yet: create one (app = Celery('proj')) before a shared task or "
            "AsyncResult is used; in Django, import it in proj/__init__.py as Celery's docs say"
        )
    return _current[0]


class CurrentApp:
    """``current_app``: stands for the current app (attributes are read from it when used)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(get_current(), name)

    def __repr__(self) -> str:
        return f"<current_app: {get_current()!r}>" if _current else "<current_app: none yet>"


current_app = CurrentApp()
