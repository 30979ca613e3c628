"""``@shared_task``: a task of whichever app is current when it is first used.

The module defining it can be imported before any app exists; each app registers every shared
task when it is finalized (its ``cronbase_app`` is read, as the worker does), and a shared task
used before then registers itself on the current app.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, overload

from ...errors import ConfigurationError
from .current import get_current
from .task import OPTIONS

if TYPE_CHECKING:
    from .app import Celery
    from .task import Task

_shared: list[SharedTask] = []


class SharedTask:
    """Stands for the task of the current app (attributes and calls go to it)."""

    def __init__(self, func: Callable[..., Any], options: dict[str, Any]) -> None:
        functools.update_wrapper(self, func)
        self.func = func
        self.options = options

    def resolve(self, app: Celery | None = None) -> Task:
        """The task on ``app`` (the current app by default), registered there if need be."""
        return (app or get_current()).register_shared(self)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.resolve(), name)

    def __repr__(self) -> str:
        return f"<@shared_task: {self.func.__module__}.{self.func.__name__}>"


def registered() -> list[SharedTask]:
    """Every shared task defined so far, in order."""
    return list(_shared)


@overload
def shared_task(func: Callable[..., Any], /) -> SharedTask: ...


@overload
def shared_task(**options: Any) -> Callable[[Callable[..., Any]], SharedTask]: ...


def shared_task(func: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """A task of the current app, as Celery's ``@shared_task`` (options as ``app.task``'s).

    >>> @shared_task(bind=True, max_retries=3)  # doctest: +SKIP
    ... def refresh(self, key): ...
    """

    def declare(f: Callable[..., Any]) -> SharedTask:
        if not callable(f):
            raise ConfigurationError(f"@shared_task decorates a function, got {f!r}")
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:  # refused where it is written; the rest is checked when it is registered
            raise ConfigurationError(
                f"@shared_task on {f.__qualname__!r}: unknown or unsupported option "
                f"{unknown[0]!r}; supported: {', '.join(sorted(OPTIONS))}"
            )
        shared = SharedTask(f, options)
        _shared.append(shared)
        return shared

    return declare(func) if func is not None else declare
