"""``Celery``: Celery's app object over a cronbase ``App``: tasks, ``conf``, configuration from
an object or Django's settings, task discovery, and ``beat_schedule`` as cronbase schedules.

``cronbase --app proj.celery:app worker`` takes it as it takes an App: the command reads its
``cronbase_app``, which finalizes it first (discovered modules imported, shared tasks
registered, the beat schedule declared), as Celery's worker finalizes its app.
"""

from __future__ import annotations

import contextlib
import contextvars
import importlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, overload

from ...app import App
from ...errors import ConfigurationError
from ...hooks import DeferCall
from ...schedule.scheduler import ScheduleSpec
from .beat import schedule_specs
from .current import set_current
from .exceptions import NotRegistered
from .result import AsyncResult, GroupResult
from .settings import Settings, read_object, warn
from .shared import SharedTask, registered
from .task import METADATA_KEY, Task, check_base, check_options, handler_name

# The names Celery's attributes shadow inside the class (app.Task, app.AsyncResult).
BaseTask = Task
Result = AsyncResult

# What apply_async(expires=...) stores with the job it defers (see Celery.stamping).
_stamp: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "cronbase_celery_stamp", default=None
)


@contextlib.contextmanager
def _stamp_metadata(call: DeferCall) -> Iterator[None]:
    """Defer middleware: the stamp of the apply_async in progress goes into jobs.metadata."""
    stamp = _stamp.get()
    if stamp is not None:
        call.metadata[METADATA_KEY] = stamp
    yield


class TaskRegistry(dict[str, Task]):
    """``app.tasks``: the app's tasks by name; a missing one is NotRegistered, as in Celery."""

    def __missing__(self, name: str) -> Task:
        raise NotRegistered(
            f"task {name!r} is not registered; registered: {', '.join(sorted(self))}"
        )


class Signal:
    """``app.on_after_configure`` / ``on_after_finalize``: receivers called once, when the
    app is finalized, with ``sender=app`` (where Celery code calls ``add_periodic_task``)."""

    def __init__(self) -> None:
        self.receivers: list[Callable[..., Any]] = []

    def connect(self, receiver: Callable[..., Any], **options: Any) -> Callable[..., Any]:
        self.receivers.append(receiver)
        return receiver

    def send(self, sender: Celery) -> None:
        for receiver in self.receivers:
            receiver(sender=sender)


class Celery:
    """Celery's app on cronbase: ``app = Celery("proj")``.

    The database is cronbase's usual one (``CRONBASE_DATABASE_URL``, ``DATABASE_URL``, else the
    embedded server), or ``database_url=`` / ``schema=``, or an existing App with
    ``cronbase_app=``. ``broker`` and ``backend`` are accepted and ignored (warned): the
    database is both.

    >>> app = Celery("proj")  # doctest: +SKIP
    >>> @app.task(bind=True, max_retries=3)  # doctest: +SKIP
    ... def fetch(self, url): ...
    """

    Task = BaseTask

    def __init__(
        self,
        main: str | None = None,
        *,
        cronbase_app: App | None = None,
        database_url: str | None = None,
        schema: str | None = None,
        broker: str | None = None,
        backend: str | None = None,
        include: Iterable[str] | None = None,
        set_as_current: bool = True,
        config_source: object = None,
        namespace: str | None = None,
        task_cls: type[BaseTask] | None = None,
        autofinalize: bool = True,
        **settings: Any,
    ) -> None:
        self.main = main
        if cronbase_app is not None:
            if database_url is not None or schema is not None:
                raise ConfigurationError(
                    "Celery(cronbase_app=...) takes the App's database: leave out "
                    "database_url and schema"
                )
            if not isinstance(cronbase_app, App):
                raise ConfigurationError(
                    f"cronbase_app must be a cronbase.App, got {cronbase_app!r}"
                )
            self.wrapped = cronbase_app
        else:
            self.wrapped = App(database_url) if schema is None else App(database_url, schema=schema)
        for option, value in (("broker", broker), ("backend", backend)):
            if value is not None:
                warn(f"Celery({option}={value!r}) is ignored: cronbase's database is the broker "
                     "and the result backend", stacklevel=2)  # fmt: skip
        self.conf = Settings()
        self.tasks = TaskRegistry()
        self.on_after_configure = Signal()
        self.on_after_finalize = Signal()
        self._task_cls = check_base("(app default)", task_cls)
        self._shared: dict[int, BaseTask] = {}
        self._discover: list[tuple[object, str]] = []
        self._declared: set[str] = set()
        # The interval entries already warned about: each is declared again at every finalize.
        self.beat_warned: set[tuple[str, str]] = set()
        self._imported = False
        self._configured = False
        self._stamps = False
        if include is not None:
            self.conf["include"] = tuple(include)
        if config_source is not None:
            self.config_from_object(config_source, namespace=namespace)
        if settings:
            self.conf.update(settings)
        if set_as_current:
            set_current(self)

    def __repr__(self) -> str:
        return f"<Celery {self.main} (cronbase, schema {self.wrapped.schema})>"

    def set_current(self) -> None:
        """Make this the app shared tasks and ``AsyncResult(id)`` use."""
        set_current(self)

    set_default = set_current

    # -- the App the command runs ----------------------------------------------------------------

    @property
    def cronbase_app(self) -> App:
        """The cronbase App, finalized: what ``cronbase --app`` runs (cli/common.py:load_app)."""
        self.finalize()
        return self.wrapped

    def finalize(self) -> None:
        """Import ``include`` / ``imports`` and discovered task modules, register every shared
        task, and declare ``beat_schedule`` on the App (again each time: it may have changed)."""
        if not self._imported:
            self._imported = True
            for module in (*self.conf.get("imports", ()), *self.conf.get("include", ())):
                importlib.import_module(module)
        while self._discover:
            packages, related_name = self._discover.pop(0)
            for package in self._packages(packages):
                _import_related(package, related_name)
        for shared in registered():
            self.register_shared(shared)
        if not self._configured:
            self._configured = True
            self.on_after_configure.send(self)
            self.on_after_finalize.send(self)
        self._declare_beat()

    def _declare_beat(self) -> None:
        specs: dict[str, ScheduleSpec] = schedule_specs(self)
        periodic = self.wrapped.periodic_schedules
        for key in self._declared - set(specs):  # entries removed from beat_schedule
            periodic.pop(key, None)
        for key, spec in specs.items():
            if key in periodic and key not in self._declared:
                raise ConfigurationError(
                    f"beat_schedule {key!r}: a schedule of that key is declared with "
                    "@app.periodic already; rename one"
                )
            periodic[key] = spec
        self._declared = set(specs)

    # -- tasks -----------------------------------------------------------------------------------

    @overload
    def task(self, func: Callable[..., Any], /) -> BaseTask: ...

    @overload
    def task(self, /, **options: Any) -> Callable[[Callable[..., Any]], BaseTask]: ...

    def task(self, func: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """Register a task: ``@app.task`` or ``@app.task(bind=True, queue="emails", ...)``
        (the options and what each becomes: docs/guides/celery-compatibility.md)."""
        if func is not None:
            return self._register(func, options)

        def register(f: Callable[..., Any]) -> BaseTask:
            return self._register(f, options)

        return register

    def _register(self, func: Callable[..., Any], given: dict[str, Any]) -> BaseTask:
        if not callable(func):
            raise ConfigurationError(f"@app.task decorates a function, got {func!r}")
        name = given.get("name") or handler_name(self.main, func)
        options = check_options(name, func, given)
        options["name"] = name
        base = check_base(name, options["base"]) if options["base"] is not None else self._task_cls
        task = base(self, func, options)
        handler = task.handler()
        task.cronbase_task = self.wrapped.task(name=name, **task.cronbase_options())(handler)
        self.tasks[name] = task
        return task

    def register_shared(self, shared: SharedTask) -> BaseTask:
        """The app's task for a ``@shared_task`` (registered on first use)."""
        task = self._shared.get(id(shared))
        if task is None:
            task = self._shared[id(shared)] = self._register(shared.func, shared.options)
        return task

    def send_task(self, name: str, args: Any = None, kwargs: Any = None, **options: Any) -> Result:
        """Enqueue a registered task by name (Celery's ``send_task``)."""
        return self.tasks[name].apply_async(args, kwargs, **options)

    def AsyncResult(self, id: str | int) -> Result:  # Celery's name
        """The result of a job of this app: by job id, or by the ``task_id=`` it was sent with."""
        return Result(id, self)

    def GroupResult(self, id: str, results: list[Result]) -> GroupResult:
        return GroupResult(id, results)

    def add_periodic_task(
        self,
        schedule: Any,
        sig: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
        name: str | None = None,
        **options: Any,
    ) -> str:
        """Add a ``beat_schedule`` entry (as Celery's, typically from ``on_after_configure``);
        returns its key."""
        key = name or repr(sig)
        self.conf["beat_schedule"][key] = {
            "task": sig.name,
            "schedule": schedule,
            "args": tuple(sig.args) + tuple(args),
            "kwargs": {**sig.kwargs, **(kwargs or {})},
            "options": {**sig.options, **options},
        }
        return key

    # -- configuration ---------------------------------------------------------------------------

    def config_from_object(
        self, obj: object, silent: bool = False, force: bool = False, namespace: str | None = None
    ) -> None:
        """Settings from an object, a module, or a path to one (``"django.conf:settings"``,
        ``"proj.celeryconfig"``); with ``namespace="CELERY"``, its ``CELERY_*`` names."""
        if isinstance(obj, str):
            try:
                obj = _import_object(obj)
            except ImportError:
                if silent:
                    return
                raise
        self.conf.update(read_object(obj, namespace))

    def autodiscover_tasks(
        self,
        packages: Iterable[str] | Callable[[], Iterable[str]] | None = None,
        related_name: str = "tasks",
        force: bool = False,
    ) -> None:
        """Import ``<package>.tasks`` of each package when the app is finalized (now with
        ``force``); with no packages, of each of Django's INSTALLED_APPS."""
        self._discover.append((packages, related_name))
        if force:
            self.finalize()

    def _packages(self, packages: object) -> list[str]:
        if callable(packages):
            packages = packages()
        if packages is None:
            return _django_apps()
        if isinstance(packages, str) or not isinstance(packages, Iterable):
            raise ConfigurationError(
                f"autodiscover_tasks takes a list of packages, got {packages!r}"
            )
        return [str(p) for p in packages]

    @contextlib.contextmanager
    def stamping(self, stamp: dict[str, Any]) -> Iterator[None]:
        """Store ``stamp`` in the metadata of the jobs deferred in the block (expires=)."""
        if not self._stamps:
            # Installed on first use only: an App's defers take the middleware path once any
            # middleware is set.
            self.wrapped.hooks.defer_middleware.append(_stamp_metadata)
            self._stamps = True
        token = _stamp.set(stamp)
        try:
            yield
        finally:
            _stamp.reset(token)


def _import_object(path: str) -> object:
    module, _, attribute = path.partition(":")
    found = importlib.import_module(module)
    return getattr(found, attribute) if attribute else found


def _import_related(package: str, related_name: str) -> None:
    """Import ``package.related_name``, if there is one (a package without it is skipped)."""
    name = f"{package}.{related_name}"
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:
            raise


def _django_apps() -> list[str]:
    """Django's installed apps, when Django is configured; else none."""
    try:
        from django.apps import apps
        from django.conf import settings
    except ImportError:
        return []
    if not settings.configured:
        return []
    return [config.name for config in apps.get_app_configs()]
