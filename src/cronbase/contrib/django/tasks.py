"""cronbase as a backend of Django's tasks framework (``django.tasks``, or the ``django-tasks``
backport on Django 4.2 to 5.2)::

    TASKS = {"default": {
        "BACKEND": "cronbase.contrib.django.tasks.CronbaseBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"max_attempts": 5},           # cronbase's task options: see options.py
    }}

``task.enqueue(...)`` writes a cronbase job in the caller's transaction (Django's connection, inside
``transaction.atomic()``: it commits or rolls back with it, so no ``on_commit`` is needed);
``manage.py cronbase worker`` runs it. Each ``@task`` function is registered on the App of
``settings.CRONBASE`` as a cronbase task named by its ``module_path``; results are the jobs'
rows, read back as Django's ``TaskResult`` (``results.py``).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from traceback import format_exception
from typing import TYPE_CHECKING, Any

from django.apps import apps as django_apps
from django.core import checks
from django.utils import timezone

from ... import Cancel, EffectInProgress, LeaseLostError, Snooze, current_job
from ...checks import check_name
from ...errors import (
    ConfigurationError,
    CronbaseError,
    DatabaseUnavailableError,
    JobNotFoundError,
)
from ...job import JobStatus
from . import get_app
from . import tasks_api as api
from .arguments import from_payload, to_payload
from .options import read_options
from .results import build_result, cronbase_priority, finished

if TYPE_CHECKING:
    from ...app import App
    from ...context import JobContext
    from ...task import Task as CronbaseTask

__all__ = ["CronbaseBackend", "SystemExitError"]

# Exceptions after which the job waits to run again without the attempt failing: the task is not
# finished, so no task_finished signal.
_NOT_FINISHING = (Snooze, EffectInProgress, DatabaseUnavailableError, LeaseLostError)
_BIGINT_MAX = 2**63 - 1


class SystemExitError(Exception):
    """A task raised ``SystemExit`` (``sys.exit()``, ``exit(1)``): recorded as this failure, with
    the ``SystemExit`` as its cause, so the worker records the attempt and runs on."""


@dataclass
class _Registered:
    """One Django task registered on the App: the latest Django ``Task`` for its path (a reloaded
    module brings a new function), and the cronbase task that runs its jobs."""

    django: Any
    cronbase: CronbaseTask[Any, Any]


# module_path -> registration, for every backend instance: Django makes one backend per thread.
_registered: dict[str, _Registered] = {}
_lock = threading.RLock()


class CronbaseBackend(api.BaseTaskBackend):  # type: ignore[misc]  # Any: django has no hints
    """Django tasks on cronbase: jobs in PostgreSQL, enqueued in your transaction, run by
    ``manage.py cronbase worker``, with retries, limits, unique windows and cron from OPTIONS."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.task_options = read_options(alias, self.options)

    @property
    def app(self) -> App:
        """The App of ``settings.CRONBASE``: the jobs' database, and the worker's registry."""
        return get_app()

    # -- tasks -----------------------------------------------------------------------------------

    def validate_task(self, task: Any) -> None:
        """Django's checks, then cronbase's: the worker imports the function by its module path,
        so it must live in an importable module (not ``__main__``), and the path must be a
        cronbase task name. A valid task is registered on the App, so the worker runs it."""
        super().validate_task(task)
        path = task.module_path
        if task.func.__module__ == "__main__":
            raise api.InvalidTask(
                f"Task function {path!r} is defined in __main__ (a script run directly): the "
                "worker cannot import it. Move it into a module of an installed app (tasks.py)."
            )
        try:
            check_name("task", path)
        except CronbaseError as exc:
            raise api.InvalidTask(f"Task {path!r} cannot be a cronbase task: {exc}") from None
        self._register(task)

    def _register(self, task: Any) -> CronbaseTask[Any, Any]:
        path = task.module_path
        with _lock:
            found = _registered.get(path)
            if found is not None:
                if found.django.func is not task.func:
                    found.django = task  # the module was imported again: its new function
                return found.cronbase
            app = self.app
            options, schedule = self.task_options.for_task(path)
            try:
                registered = app.task(
                    name=path,
                    queue=task.queue_name,
                    priority=cronbase_priority(task.priority),
                    **options,
                )(_handler(path, is_async=_is_async(task.func)))
                if schedule is not None:
                    app.periodic(
                        cron=schedule.cron,
                        tz=schedule.tz,
                        key=schedule.key or path,
                        catch_up=schedule.catch_up,
                        payload=to_payload(task, schedule.args, schedule.kwargs),
                    )(registered)
            except (CronbaseError, TypeError) as exc:
                raise api.InvalidTask(f"Task {path!r}: {exc}") from None
            _registered[path] = _Registered(task, registered)
            return registered

    # -- enqueue ---------------------------------------------------------------------------------

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """A job in the caller's transaction (Django's connection inside ``atomic()``; committed
        at once outside one), read back as its ``TaskResult`` (READY)."""
        self.validate_task(task)
        if self.app.hooks.interceptor is not None:
            raise ConfigurationError(
                f"{task.module_path}.enqueue() inside cronbase.testing.inline(): a Django task's "
                "result is its job's row, which inline mode never writes; run Django tasks at "
                "once with Django's ImmediateBackend (override_settings(TASKS=...)), or enqueue "
                "them and run cronbase.testing.drain(app)"
            )
        registered = _registered[task.module_path].cronbase
        payload = to_payload(task, args, kwargs)
        deferral = registered.configure(
            priority=cronbase_priority(task.priority),
            queue=task.queue_name,
            run_at=_aware(task.run_after),
        )
        job_id = deferral.defer(**payload)
        jobs = self.app.jobs
        # Read back on the same connection (Django's, in its transaction): enqueued_at is the
        # database's. A unique window may give an earlier job, with attempts of its own.
        job = jobs.get(job_id)
        attempts = jobs.attempts(job_id) if job.attempts else []
        result = build_result(task, job, attempts, self.alias)
        if job.attempts == 0 and job.status is JobStatus.QUEUED:
            object.__setattr__(result, "task", task)  # as enqueued, run_after included
        api.task_enqueued.send(type(self), task_result=result)
        return result

    # -- results ---------------------------------------------------------------------------------

    def get_result(self, result_id: Any) -> Any:
        """The ``TaskResult`` of job ``result_id``; TaskResultDoesNotExist when there is none, or
        it is not a Django task's job. Inside ``atomic()`` it is read in that transaction (so a
        job enqueued there is found); ``aget_result`` is Django's, this in ``sync_to_async``."""
        job_id = _job_id(result_id)
        jobs = self.app.jobs
        try:
            job = jobs.get(job_id)
        except JobNotFoundError:
            raise api.TaskResultDoesNotExist(result_id) from None
        task = django_task(job.task)
        if task is None:
            raise api.TaskResultDoesNotExist(result_id)
        return build_result(task, job, jobs.attempts(job_id), self.alias)

    # -- checks ----------------------------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[Any]:
        messages: list[Any] = list(super().check(**kwargs))
        if not django_apps.is_installed("cronbase.contrib.django"):
            messages.append(
                checks.Error(
                    f"TASKS[{self.alias!r}] uses {type(self).__name__}, but cronbase's Django app "
                    "is not installed: its worker, migrations and settings come with it",
                    hint="Add 'cronbase.contrib.django' to INSTALLED_APPS.",
                    id="cronbase.E001",
                )
            )
            return messages
        for path in sorted(set(self.task_options.per_task) - set(_registered)):
            messages.append(
                checks.Warning(
                    f"TASKS[{self.alias!r}]['OPTIONS']['tasks'] names {path!r}, but no @task "
                    "with that module path was loaded",
                    hint="Check the path (module.function); tasks load from each app's tasks.py.",
                    id="cronbase.W001",
                )
            )
        return messages


def django_task(name: str) -> Any:
    """The Django task whose jobs are named ``name`` (its module path), else None."""
    found = _registered.get(name)
    if found is not None:
        return found.django
    from django.utils.module_loading import import_string

    try:
        task = import_string(name)  # registers it, if it is one
    except ImportError:
        return None
    return task if isinstance(task, api.Task) else None


def _job_id(result_id: Any) -> int:
    try:
        job_id = int(result_id)
    except (TypeError, ValueError):
        raise api.TaskResultDoesNotExist(result_id) from None
    if not 1 <= job_id <= _BIGINT_MAX:
        raise api.TaskResultDoesNotExist(result_id)
    return job_id


def _aware(run_after: datetime | None) -> datetime | None:
    """run_after as cronbase takes it: aware (a naive one, with USE_TZ = False, is in Django's
    current time zone)."""
    if run_after is None or timezone.is_aware(run_after):
        return run_after
    aware: datetime = timezone.make_aware(run_after)
    return aware


def _is_async(func: Callable[..., Any]) -> bool:
    import inspect

    return inspect.iscoroutinefunction(func)


# -- running a task (in the worker) -------------------------------------------------------------


def _handler(path: str, *, is_async: bool) -> Callable[..., Any]:
    """The cronbase handler of the Django task at ``path``: its job's payload is the task's
    arguments by name (arguments.py)."""
    if is_async:

        async def run_django_task_async(**payload: Any) -> Any:
            return await _run_async(path, payload)

        return run_django_task_async

    def run_django_task(**payload: Any) -> Any:
        return _run(path, payload)

    return run_django_task


def _ends_task(registered: CronbaseTask[Any, Any], job: JobContext, exc: Exception) -> bool:
    """Whether this exception finishes the task (FAILED) rather than leaving it to run again."""
    if isinstance(exc, Cancel):
        return True
    if isinstance(exc, _NOT_FINISHING):
        return False
    return registered.gives_up(exc) or job.attempt >= job.max_attempts


def _error(exc: BaseException) -> Any:
    kind = type(exc)
    return api.TaskError(
        exception_class_path=f"{kind.__module__}.{kind.__qualname__}",
        traceback="".join(format_exception(exc)),
    )


def _exit_error(exc: SystemExit) -> SystemExitError:
    return SystemExitError(f"the task raised SystemExit({exc.code!r})")


def _running_result(backend: CronbaseBackend, task: Any, job_id: int) -> Any:
    """The ``TaskResult`` of the attempt starting now (RUNNING, its worker among worker_ids):
    what ``task_started`` and the ``TaskContext`` get."""
    jobs = backend.app.jobs
    return build_result(task, jobs.get(job_id), jobs.attempts(job_id), backend.alias)


@dataclass(frozen=True)
class _Attempt:
    """One run of a Django task in its cronbase job: what the sync and the async runner share."""

    entry: _Registered
    args: list[Any]
    kwargs: dict[str, Any]
    backend: CronbaseBackend
    job: JobContext

    @classmethod
    def start(cls, path: str, payload: dict[str, Any]) -> _Attempt:
        entry = _registered[path]
        task = entry.django
        args, kwargs = from_payload(task.func, task.takes_context, payload)
        return cls(entry, args, kwargs, task.get_backend(), current_job())

    @property
    def task(self) -> Any:
        return self.entry.django

    @property
    def sender(self) -> type:
        return type(self.backend)

    def arguments(self, result: Any) -> list[Any]:
        """The function's positional arguments: its TaskContext first when it takes one."""
        if self.task.takes_context:
            return [api.TaskContext(task_result=result), *self.args]
        return self.args

    def failed(self, result: Any, exc: Exception) -> Any | None:
        """The finished result ``task_finished`` announces when ``exc`` ends the task; None when
        the job will run again."""
        if not _ends_task(self.entry.cronbase, self.job, exc):
            return None
        return finished(result, at=timezone.now(), error=_error(exc))


@contextmanager
def _exit_as_error() -> Iterator[None]:
    """A SystemExit out of the task becomes SystemExitError: a failure the worker records."""
    try:
        yield
    except SystemExit as exc:
        raise _exit_error(exc) from exc


def _run(path: str, payload: dict[str, Any]) -> Any:
    run = _Attempt.start(path, payload)
    result = _running_result(run.backend, run.task, run.job.id)
    api.task_started.send(sender=run.sender, task_result=result)
    try:
        with _exit_as_error():
            value = api.normalize_json(run.task.func(*run.arguments(result), **run.kwargs))
    except Exception as exc:
        ended = run.failed(result, exc)
        if ended is not None:
            api.task_finished.send(sender=run.sender, task_result=ended)
        raise
    if not run.job.is_cancelled():  # past its timeout, the attempt fails whatever it returns
        ended = finished(result, at=timezone.now(), value=value)
        api.task_finished.send(sender=run.sender, task_result=ended)
    return value


async def _send(signal: Any, sender: type, result: Any) -> None:
    if hasattr(signal, "asend"):  # Django 5.0 and later
        await signal.asend(sender=sender, task_result=result)
        return
    from asgiref.sync import sync_to_async

    await sync_to_async(signal.send)(sender=sender, task_result=result)


async def _run_async(path: str, payload: dict[str, Any]) -> Any:
    run = _Attempt.start(path, payload)
    # On cronbase's sync pool, in a thread: an async pool would be opened per event loop (each
    # cronbase.testing.drain runs one), for two quick reads.
    result = await asyncio.to_thread(_running_result, run.backend, run.task, run.job.id)
    await _send(api.task_started, run.sender, result)
    try:
        with _exit_as_error():
            value = api.normalize_json(await run.task.func(*run.arguments(result), **run.kwargs))
    except Exception as exc:
        ended = run.failed(result, exc)
        if ended is not None:
            await _send(api.task_finished, run.sender, ended)
        raise
    await _send(api.task_finished, run.sender, finished(result, at=timezone.now(), value=value))
    return value
