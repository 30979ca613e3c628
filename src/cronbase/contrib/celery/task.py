"""Celery's ``Task`` on a cronbase task: its options, ``self.request``, ``self.retry()``, and the
handler the worker runs (autoretry, max_retries, ignore_result, expires).

What each option becomes is :data:`cronbase.contrib.celery.compatibility.TABLE`'s to say; the
worker-side rules: a job's attempts are ``max_retries + 1``; only a :class:`Retry` (from
``self.retry()`` or ``autoretry_for``) is retried, after its countdown (:mod:`.retrying`); any
other exception ends the job dead at once, FAILURE, as Celery fails a task that raises.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ...context import running_job
from ...errors import Cancel, ConfigurationError
from ...task import Task as CronbaseTask
from .arguments import bind
from .exceptions import MaxRetriesExceededError, Retry
from .retrying import RetryDelay, exponential_backoff
from .settings import ACKS_EARLY, route, warn

if TYPE_CHECKING:
    from .app import Celery
    from .canvas import Signature
    from .result import AsyncResult

# What self.retry() raises (the name Task.Retry shadows inside the class).
RetryError = Retry
# max_attempts for max_retries=None (retry for ever): the largest the column holds.
FOREVER = 2**31 - 1
# Where apply_async(expires=...) travels: the job's metadata, under this key (read back by the
# handler, which cancels a job that starts too late: REVOKED, as in Celery).
METADATA_KEY = "celery"

# The task options cronbase honours, with Celery's defaults.
OPTIONS: dict[str, Any] = {
    "name": None,
    "bind": False,
    "queue": None,
    "priority": None,
    "max_retries": 3,
    "default_retry_delay": 180,
    "autoretry_for": (),
    "dont_autoretry_for": (),
    "retry_kwargs": {},
    "retry_backoff": False,
    "retry_backoff_max": 600,
    "retry_jitter": True,
    "time_limit": None,
    "soft_time_limit": None,
    "ignore_result": False,
    "acks_late": True,
    "reject_on_worker_lost": True,
    "rate_limit": None,
    "expires": None,
    "serializer": "json",
    "typing": True,
    "track_started": False,
    "shared": True,
    "base": None,
}
# Celery Task methods a base class may override that cronbase never calls.
_HOOKS = ("on_success", "on_failure", "on_retry", "after_return", "before_start")
PRIORITY_WARNING = (
    "priority={!r} is cronbase's: lower runs first (default 100); Celery's direction depended "
    "on the broker (RabbitMQ ran higher first), so check the values you give"
)

_request: contextvars.ContextVar[Context] = contextvars.ContextVar("cronbase_celery_request")


@dataclass
class Context:
    """``self.request``: the job a task runs as. ``id`` is the job's id as text (Celery's ids
    are strings), ``retries`` the attempts before this one. ``args`` is always empty and
    ``kwargs`` holds every argument: cronbase stores arguments by name."""

    id: str | None = None
    retries: int = 0
    kwargs: dict[str, Any] = field(default_factory=dict)
    # The positional arguments of a direct call (a job has none: see args).
    positional: tuple[Any, ...] = ()
    task: str | None = None
    hostname: str | None = None
    delivery_info: dict[str, Any] = field(default_factory=dict)
    called_directly: bool = True
    is_eager: bool = False
    eta: datetime | None = None
    expires: datetime | None = None
    # Celery's workflow fields; cronbase's jobs carry their workflow's id (jobs.workflow_id).
    group: str | None = None
    root_id: str | None = None
    parent_id: str | None = None
    correlation_id: str | None = None

    @property
    def args(self) -> tuple[Any, ...]:
        """A direct call's positional arguments; a job's are empty (warned): its arguments
        are stored by name, all in ``kwargs``."""
        if not self.called_directly:
            warn(
                "self.request.args is empty on cronbase: arguments are stored by name, all of "
                "them in self.request.kwargs",
                stacklevel=2,
            )
        return self.positional


def handler_signature(func: Callable[..., Any], bound: bool) -> inspect.Signature:
    """The handler's parameters as callers give them: without ``self`` for a bound task."""
    signature = inspect.signature(func)
    if not bound:
        return signature
    params = list(signature.parameters.values())
    if not params or params[0].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        raise ConfigurationError(
            f"task {func.__qualname__!r} has bind=True but no first parameter for the task (self)"
        )
    return signature.replace(parameters=params[1:])


def _seconds(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
        return float(value)
    raise ConfigurationError(f"{name} must be a number of seconds or a timedelta, got {value!r}")


def _exceptions(name: str, value: object) -> tuple[type[BaseException], ...]:
    types = tuple(value) if isinstance(value, list | tuple | set | frozenset) else (value,)
    if not all(isinstance(t, type) and issubclass(t, BaseException) for t in types):
        raise ConfigurationError(f"{name} must be exception classes, got {value!r}")
    return types


R = TypeVar("R")  # what sending returns: an AsyncResult, or a group's GroupResult


class Sendable(Generic[R]):
    """Celery's ``delay(*args, **kwargs)``, the short form of ``apply_async(args, kwargs)``, once
    for a task, a signature and each workflow (each defines ``apply_async``)."""

    def delay(self, *args: Any, **kwargs: Any) -> R:
        """Enqueue a job: ``add.delay(2, 3)``; positional arguments are stored by name."""
        return self.apply_async(args, kwargs)

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> R:
        raise NotImplementedError


class Task(Sendable["AsyncResult"]):
    """A task as Celery's: call it to run it here, ``delay()`` / ``apply_async()`` to enqueue a
    job, ``s()`` / ``si()`` for canvases. Made by ``@app.task`` and ``@shared_task``; a
    ``base=`` class must subclass this one (``app.Task``).

    >>> @app.task(bind=True, max_retries=5)  # doctest: +SKIP
    ... def fetch(self, url): ...
    """

    # Celery's task class attributes, read by code that ports as is.
    MaxRetriesExceededError = MaxRetriesExceededError
    Retry = Retry

    name: str
    app: Celery
    cronbase_task: CronbaseTask[..., Any]

    def __init__(self, app: Celery, func: Callable[..., Any], options: Mapping[str, Any]) -> None:
        self.app = app
        self.__wrapped__ = func
        self.__doc__ = func.__doc__
        self.__module__ = func.__module__
        self.bind = bool(options["bind"])
        self.handler_signature = handler_signature(func, self.bind)
        self.queue: str | None = options["queue"]
        self.priority: int | None = options["priority"]
        if self.priority is not None:
            warn(PRIORITY_WARNING.format(self.priority), stacklevel=4)
        max_retries = options["max_retries"]
        if max_retries is not None and (
            not isinstance(max_retries, int) or isinstance(max_retries, bool) or max_retries < 0
        ):
            raise ConfigurationError(f"max_retries must be 0 or more, or None, got {max_retries!r}")
        self.max_retries: int | None = max_retries
        self.default_retry_delay = _seconds("default_retry_delay", options["default_retry_delay"])
        self.autoretry_for = _exceptions("autoretry_for", options["autoretry_for"])
        self.dont_autoretry_for = _exceptions("dont_autoretry_for", options["dont_autoretry_for"])
        self.retry_kwargs = dict(options["retry_kwargs"])
        unknown = sorted(set(self.retry_kwargs) - {"max_retries", "countdown"})
        if unknown:
            raise ConfigurationError(
                f"retry_kwargs {', '.join(map(repr, unknown))}: cronbase honours max_retries "
                "and countdown only"
            )
        self.retry_backoff = options["retry_backoff"]
        self.retry_backoff_max = int(options["retry_backoff_max"])
        self.retry_jitter = bool(options["retry_jitter"])
        self.time_limit = _seconds("time_limit", options["time_limit"])
        self.soft_time_limit = _seconds("soft_time_limit", options["soft_time_limit"])
        self.ignore_result = bool(options["ignore_result"])
        self.track_started = bool(options["track_started"])
        self.expires = options["expires"]
        self.rate_limit = options["rate_limit"]
        self.name = options["name"]

    def __repr__(self) -> str:
        return f"<@task: {self.name} of {self.app.main}>"

    # -- calling ---------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the task here and now, as Celery does: no job, ``self.request.called_directly``."""
        token = _request.set(Context(positional=args, kwargs=kwargs, task=self.name))
        try:
            return self.run(*args, **kwargs)
        finally:
            _request.reset(token)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """The task's function (given the task first when ``bind=True``)."""
        if self.bind:
            return self.__wrapped__(self, *args, **kwargs)
        return self.__wrapped__(*args, **kwargs)

    @property
    def request(self) -> Context:
        """The job this task runs as (an empty, ``called_directly`` one outside a worker)."""
        return _request.get(None) or Context(task=self.name)

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        *,
        task_id: str | None = None,
        countdown: float | None = None,
        eta: datetime | None = None,
        expires: float | timedelta | datetime | None = None,
        queue: str | None = None,
        priority: int | None = None,
        link: Signature | Sequence[Signature] | None = None,
        link_error: object = None,
        **options: Any,
    ) -> AsyncResult:
        """Enqueue a job with options: ``countdown`` (seconds) or ``eta`` (an aware datetime),
        ``expires``, ``queue``, ``priority``, ``task_id`` (the job's idempotency key), ``link``.
        Returns its :class:`AsyncResult`."""
        from .canvas import Signature, call_options, defer_linked

        if link_error is not None:
            raise ConfigurationError(
                f"link_error on task {self.name!r}: cronbase has no error callbacks; a job that "
                "fails is recorded (app.jobs.attempts) and an on_job_end hook can react to it"
            )
        call_options(self.name, options)
        payload = bind(self.name, self.handler_signature, args or (), kwargs or {})
        job = self.job_options(countdown=countdown, eta=eta, queue=queue, priority=priority)
        if task_id is not None:
            job["idempotency_key"] = check_task_id(task_id)
            if self.app.AsyncResult(task_id).job_id is not None:
                warn(
                    f"task_id={task_id!r} names a job already: nothing is sent again (it is the "
                    "job's idempotency key); Celery would send a second message",
                    stacklevel=2,
                )
        stamp = self._stamp(expires)
        if link is not None:
            if task_id is not None or stamp is not None:
                raise ConfigurationError(
                    f"task {self.name!r}: link= with task_id= or expires= is not supported; "
                    "defer the chain without them"
                )
            first = Signature(self, args or (), kwargs or {}, {}, immutable=False)
            first = first.set(countdown=countdown, eta=eta, queue=queue, priority=priority)
            return self.app.AsyncResult(defer_linked(first, link))
        deferral = self.cronbase_task.configure(**job)
        if stamp is None:
            job_id = deferral.defer(**payload)
        else:
            with self.app.stamping(stamp):
                job_id = deferral.defer(**payload)
        return self.app.AsyncResult(task_id if task_id is not None else str(job_id))

    def job_options(
        self,
        *,
        countdown: float | timedelta | None = None,
        eta: datetime | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> dict[str, Any]:
        """cronbase's ``configure`` options for one call: the queue routed as Celery routes it
        (the call's, the task's, ``task_routes``, ``task_default_queue``)."""
        found: dict[str, Any] = {"queue": self.queue_for(queue)}
        if countdown is not None and eta is not None:
            raise ConfigurationError(
                f"task {self.name!r}: give countdown or eta, not both "
                f"(countdown={countdown!r}, eta={eta!r})"
            )
        if countdown is not None:
            found["delay"] = timedelta(seconds=_seconds("countdown", countdown) or 0.0)
        if eta is not None:
            found["run_at"] = aware("eta", eta)
        if priority is not None:
            warn(PRIORITY_WARNING.format(priority), stacklevel=4)
            found["priority"] = priority
        elif self.priority is not None:
            found["priority"] = self.priority
        return found

    def queue_for(self, queue: str | None = None) -> str:
        """The queue a job goes to, by Celery's precedence."""
        if queue is not None:
            return queue
        if self.queue is not None:
            return self.queue
        conf = self.app.conf
        return route(conf.get("task_routes"), self.name) or str(conf["task_default_queue"])

    def _stamp(self, expires: float | timedelta | datetime | None) -> dict[str, Any] | None:
        expires = self.expires if expires is None else expires
        if expires is None:
            return None
        if isinstance(expires, datetime):
            deadline = aware("expires", expires)
        else:
            deadline = datetime.now(UTC) + timedelta(seconds=_seconds("expires", expires) or 0.0)
        return {"expires": deadline.astimezone(UTC).isoformat()}

    def signature(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        *,
        immutable: bool = False,
        **options: Any,
    ) -> Signature:
        """A signature of this task (``s()`` and ``si()`` are its short forms)."""
        from .canvas import Signature

        return Signature(self, tuple(args or ()), dict(kwargs or {}), options, immutable=immutable)

    subtask = signature

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A signature; in a chain it gets the previous result as its first argument."""
        return self.signature(args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """An immutable signature: in a chain it gets nothing from the previous task."""
        return self.signature(args, kwargs, immutable=True)

    def AsyncResult(self, task_id: str | int) -> AsyncResult:  # Celery's name
        """The result of a job of this app by id."""
        return self.app.AsyncResult(task_id)

    # -- retrying --------------------------------------------------------------------------------

    def retry(
        self,
        args: object = None,
        kwargs: object = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: datetime | None = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> RetryError:
        """End this attempt and run the job again after ``countdown`` seconds (or at ``eta``;
        default ``default_retry_delay``). Past ``max_retries`` it raises ``exc`` (or
        MaxRetriesExceededError) and the job goes dead. Raises, as Celery's does: write
        ``raise self.retry(exc=exc)``."""
        if args is not None or kwargs is not None or options:
            given = ["args"] * (args is not None) + ["kwargs"] * (kwargs is not None)
            raise ConfigurationError(
                f"self.retry({', '.join(given + sorted(options))}=...) in task {self.name!r}: "
                "cronbase runs a job again with its own arguments and options"
            )
        if not throw:
            raise ConfigurationError(
                f"self.retry(throw=False) in task {self.name!r}: the attempt must end for the "
                "job to run again; raise what self.retry() raises"
            )
        request = self.request
        if request.called_directly:
            # As Celery outside a worker: the exception being handled, else exc, else Retry.
            raise exc or Retry("Task can be retried", None)
        limit = self.max_retries if max_retries is None else max_retries
        if max_retries is not None and (self.max_retries is None or max_retries > self.max_retries):
            warn(
                f"self.retry(max_retries={max_retries}) in task {self.name!r}: its jobs have "
                f"max_retries + 1 = {self.attempts()} attempts, set by the task's max_retries",
                stacklevel=2,
            )
        retries = request.retries + 1
        if limit is not None and retries > limit:
            if exc is not None:
                raise exc
            raise MaxRetriesExceededError(
                f"Can't retry {self.name}[{request.id}] kwargs:{request.kwargs}",
                task_args=(),
                task_kwargs=request.kwargs,
            )
        if eta is not None:
            raise Retry(exc=exc, when=aware("eta", eta))
        when = self.default_retry_delay if countdown is None else countdown
        raise Retry(exc=exc, when=when)

    def attempts(self) -> int:
        """The attempts each job of the task has: max_retries + 1."""
        return FOREVER if self.max_retries is None else self.max_retries + 1

    def _autoretry(self, exc: BaseException) -> BaseException:
        """What a raised exception becomes: a Retry for one of ``autoretry_for`` (with Celery's
        backoff), past the retries its own exception; any other exception as it is."""
        if isinstance(exc, Retry) or not self.autoretry_for:
            return exc
        if not isinstance(exc, self.autoretry_for) or isinstance(exc, self.dont_autoretry_for):
            return exc
        countdown = self.retry_kwargs.get("countdown")
        if self.retry_backoff:
            countdown = exponential_backoff(
                factor=int(max(1.0, float(self.retry_backoff))),
                retries=self.request.retries,
                maximum=self.retry_backoff_max,
                full_jitter=self.retry_jitter,
            )
        try:
            self.retry(
                exc=exc, countdown=countdown, max_retries=self.retry_kwargs.get("max_retries")
            )
        except BaseException as raised:
            return raised
        raise AssertionError("retry() returned")  # pragma: no cover  # it always raises

    # -- on the worker ---------------------------------------------------------------------------

    def _enter(self, kwargs: dict[str, Any]) -> contextvars.Token[Context]:
        job = running_job()
        if job is None:  # the cronbase Task called directly: as __call__
            return _request.set(Context(kwargs=kwargs, task=self.name))
        metadata = job.metadata or {}
        stamp = metadata.get(METADATA_KEY)
        expires = None
        if isinstance(stamp, dict) and isinstance(stamp.get("expires"), str):
            expires = datetime.fromisoformat(stamp["expires"])
            if datetime.now(UTC) >= expires:
                raise Cancel(f"expired at {expires.isoformat()} before it started (expires=)")
        return _request.set(
            Context(
                id=str(job.id),
                retries=job.attempt - 1,
                kwargs=kwargs,
                task=self.name,
                hostname=job.worker_id,
                delivery_info={"routing_key": job.queue},
                called_directly=False,
                expires=expires,
            )
        )

    def handler(self) -> Callable[..., Any]:
        """The function the cronbase task runs: the task's, by keyword, with Celery's rules."""
        func = self.__wrapped__
        task = self

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def handle_async(**kwargs: Any) -> Any:
                token = task._enter(kwargs)
                try:
                    try:
                        value = await task.run(**kwargs)
                    except Exception as exc:
                        raise task._autoretry(exc)  # noqa: B904  # the same exception, or its Retry
                    return None if task.ignore_result else value
                finally:
                    _request.reset(token)

            handle: Callable[..., Any] = handle_async
        else:

            @functools.wraps(func)
            def handle_sync(**kwargs: Any) -> Any:
                token = task._enter(kwargs)
                try:
                    try:
                        value = task.run(**kwargs)
                    except Exception as exc:
                        raise task._autoretry(exc)  # noqa: B904  # the same exception, or its Retry
                    return None if task.ignore_result else value
                finally:
                    _request.reset(token)

            handle = handle_sync
        # cronbase reads the parameters (and their annotations) from __signature__: without
        # self for a bound task.
        handle.__signature__ = self.handler_signature  # type: ignore[attr-defined]
        return handle

    def cronbase_options(self) -> dict[str, Any]:
        """``@app.task`` options for the cronbase task (what each becomes: compatibility.py)."""
        options: dict[str, Any] = {
            "queue": self.queue_for(),
            "max_attempts": self.attempts(),
            "retry": RetryDelay(timedelta(seconds=self.default_retry_delay or 0.0)),
            # Only a Retry runs the job again; any other exception is Celery's FAILURE.
            "retry_on": (Retry,),
        }
        if self.priority is not None:
            options["priority"] = self.priority
        limits = [t for t in (self.time_limit, self.soft_time_limit) if t is not None]
        if limits:
            options["timeout"] = timedelta(seconds=min(limits))
        if self.rate_limit is not None:
            options["rate_limit"] = rate(self.name, self.rate_limit)
        return options


def rate(task: str, value: object) -> str:
    """Celery's ``rate_limit`` (``"10/m"``, or a number per second) as cronbase's, which holds
    across every worker, not per worker."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value != int(value) or value < 1:
            raise ConfigurationError(
                f"task {task!r}: rate_limit={value!r}: give a whole number per second, or "
                "'N/s', 'N/m', 'N/h'"
            )
        value = f"{int(value)}/s"
    if not isinstance(value, str):
        raise ConfigurationError(f"task {task!r}: rate_limit must be like '10/m', got {value!r}")
    return value


def aware(name: str, value: datetime) -> datetime:
    """A datetime option, which must name its time zone (cronbase does not guess one)."""
    if not isinstance(value, datetime):
        raise ConfigurationError(f"{name} must be a datetime, got {value!r}")
    if value.utcoffset() is None:
        raise ConfigurationError(
            f"{name}={value!r} is naive: give a timezone-aware datetime "
            "(datetime.now(timezone.utc) + ...)"
        )
    return value


def check_task_id(task_id: object) -> str:
    """A ``task_id=``: text that cannot be read as a job id (cronbase's ids are integers)."""
    if not isinstance(task_id, str) or not task_id.strip():
        raise ConfigurationError(f"task_id must be a non-empty string, got {task_id!r}")
    if task_id.isdigit():
        raise ConfigurationError(
            f"task_id={task_id!r} is all digits, which reads as a cronbase job id; use another "
            "form (a UUID, say)"
        )
    return task_id


def check_options(name: str, func: Callable[..., Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """A task's options with Celery's defaults; unknown ones refused, inexact ones warned about
    (the warning points at the decorator)."""
    unknown = sorted(set(given) - set(OPTIONS))
    if unknown:
        raise ConfigurationError(
            f"task {name!r}: unknown or unsupported option {unknown[0]!r}; supported: "
            f"{', '.join(sorted(OPTIONS))} (docs/guides/celery-compatibility.md)"
        )
    options = {**OPTIONS, **given}
    if options["acks_late"] is False:
        warn(f"task {name!r}: {ACKS_EARLY}", stacklevel=4)
    if options["reject_on_worker_lost"] is False:
        warn(f"task {name!r}: reject_on_worker_lost=False: {ACKS_EARLY}", stacklevel=4)
    if options["serializer"] != "json":
        warn(f"task {name!r}: serializer={options['serializer']!r}: cronbase stores JSON", 4)
    if options["time_limit"] is not None or options["soft_time_limit"] is not None:
        warn(
            f"task {name!r}: time_limit/soft_time_limit become cronbase's timeout (the smaller): "
            "SoftTimeLimitExceeded is not raised in the task (a sync one sees "
            "cronbase.current_job().is_cancelled() turn true and is not killed; an async one is "
            "cancelled), and the timed-out attempt is retried while attempts remain",
            stacklevel=4,
        )
    if options["rate_limit"] is not None:
        warn(
            f"task {name!r}: rate_limit={options['rate_limit']!r} holds across all workers "
            "together (Celery's is per worker)",
            stacklevel=4,
        )
    if options["retry_backoff"] is not False and not options["autoretry_for"]:
        warn(f"task {name!r}: retry_backoff applies to autoretry_for only (as in Celery)", 4)
    return options


def check_base(name: str, base: object) -> type[Task]:
    """A ``base=`` class: this module's Task or a subclass; Celery hooks it overrides are
    never called (warned)."""
    if base is None:
        return Task
    if not isinstance(base, type) or not issubclass(base, Task):
        raise ConfigurationError(
            f"task {name!r}: base={base!r} is not a subclass of cronbase.contrib.celery.Task "
            "(app.Task); a celery.Task subclass cannot run on cronbase"
        )
    overridden = [hook for hook in _HOOKS if hook in vars(base) or _defined_below(base, hook)]
    if overridden:
        warn(
            f"task {name!r}: base {base.__name__} overrides {', '.join(overridden)}, which "
            "cronbase never calls; use app hooks (cronbase_app.on_job_end, .middleware)",
            stacklevel=4,
        )
    return base


def _defined_below(base: type[Task], hook: str) -> bool:
    return any(hook in vars(klass) for klass in base.__mro__ if klass is not Task)


def handler_name(app_main: str | None, func: Callable[..., Any]) -> str:
    """Celery's default task name: ``module.function`` (the app's main name for ``__main__``)."""
    module = func.__module__
    if module == "__main__" and app_main:
        module = app_main
    return f"{module}.{func.__name__}"
