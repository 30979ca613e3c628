"""What of Celery maps onto cronbase, what is warned about and what is refused: the table
(:data:`TABLE`) that docs/guides/celery-compatibility.md shows (:func:`markdown` writes it, and a
test keeps the page equal to it).

*same*: behaves as in Celery. *warned*: runs, and a :class:`CeleryCompatibilityWarning` says
what differs, where it differs. *refused*: a one-line error naming the value, before anything
is written.
"""

from __future__ import annotations

from typing import NamedTuple


class Row(NamedTuple):
    """One construct: what cronbase makes of it, and how close that is."""

    construct: str
    cronbase: str
    behaviour: str  # "same", "warned", "refused", or "same; ... refused" for parts


TABLE: tuple[tuple[str, tuple[Row, ...]], ...] = (
    (
        "The app",
        (
            Row(
                "`Celery(main)`",
                "a `cronbase.App()`: `CRONBASE_DATABASE_URL`, `DATABASE_URL`, else the embedded server",
                "same",
            ),
            Row(
                "`Celery(database_url=, schema=)`, `Celery(cronbase_app=app)`",
                "cronbase's own options: the database, or an App you have",
                "cronbase only",
            ),
            Row(
                "`Celery(broker=, backend=)`; `broker_*`, `result_*` settings",
                "ignored: the database is the broker and the result backend",
                "warned",
            ),
            Row("`Celery(include=[...])`, `imports`", "imported when the app is finalized", "same"),
            Row(
                "`app.conf.update(...)`, `app.conf.x = ...`, `app.conf['x']`",
                "`Settings`, a dict read as attributes too",
                "same",
            ),
            Row(
                "`config_from_object(obj or 'module' or 'django.conf:settings', namespace='CELERY')`",
                "its settings (with a namespace, its `CELERY_*` names)",
                "same",
            ),
            Row(
                "`autodiscover_tasks(packages=None, related_name='tasks', force=)`",
                "imports `<package>.tasks` when finalized (Django: each of INSTALLED_APPS)",
                "same",
            ),
            Row(
                "`@shared_task`",
                "a task of the current app (the last created, or `set_current()`), registered at first use or when the app is finalized",
                "same",
            ),
            Row(
                "`cronbase --app proj.celery:app worker`, `tick`, `dashboard`",
                "`load_app` reads the object's `cronbase_app`, which finalizes it",
                "same",
            ),
            Row(
                "`task_default_queue`", "the tasks' queue (Celery's default name `celery`)", "same"
            ),
            Row(
                "`task_routes`: a dict or list of dicts of names, globs, regexes to a queue or `{'queue': q}`",
                "the job's queue; call > task option > route > default, as Celery",
                "same",
            ),
            Row(
                "`task_routes` with router functions, `exchange`, `routing_key`",
                "no broker to route through",
                "refused",
            ),
            Row("`timezone`", "the zone crontab entries are read in", "same"),
            Row(
                "`task_always_eager=True`",
                "no eager mode: call the task, or use `cronbase.testing`'s inline mode",
                "refused",
            ),
            Row(
                "`task_serializer`, `result_serializer`, `accept_content` other than JSON",
                "payloads and results are JSON",
                "warned",
            ),
            Row("any other setting", "no effect", "warned"),
            Row(
                "`app.on_after_configure.connect`, `add_periodic_task(...)`",
                "receivers run once when finalized; entries join `beat_schedule`",
                "same",
            ),
            Row(
                "`app.send_task(name, args, kwargs)`, `app.tasks[name]`",
                "the registered task (`NotRegistered` if none)",
                "same",
            ),
            Row(
                "`app.control`, `app.Worker`, `worker_main()`",
                "absent: `cronbase worker`, `app.cronbase_app.jobs`",
                "refused",
            ),
        ),
    ),
    (
        "Tasks",
        (
            Row(
                "`@app.task`, `@app.task(name=...)`",
                "`App.task`; default name `module.function`",
                "same",
            ),
            Row("calling the task, `t(x)`", "runs here, `self.request.called_directly`", "same"),
            Row(
                "`bind=True`; `self.request.id`, `.retries`, `.kwargs`",
                "the job's id as text, attempts before this one, every argument",
                "same",
            ),
            Row(
                "`self.request.args`",
                "empty: arguments are stored by name, all in `kwargs`",
                "warned",
            ),
            Row(
                "positional arguments (`delay(2, 3)`, `s(2)`, beat `args`)",
                "bound to the handler's parameter names (`inspect.signature`)",
                "same",
            ),
            Row(
                "too many positional arguments, `*args` beyond the parameters, positional-only parameters",
                "they have no name to be stored under",
                "refused",
            ),
            Row(
                "`max_retries=N` (default 3), `max_retries=None`",
                "`max_attempts = N + 1`; None: 2,147,483,647",
                "same",
            ),
            Row(
                "`default_retry_delay` (default 180 s)",
                "the delay of a `self.retry()` without countdown",
                "same",
            ),
            Row(
                "`raise self.retry(exc=, countdown=, eta=, max_retries=)`",
                "raises `Retry`: the attempt fails (RETRY), the job runs again after the countdown; past max_retries it raises `exc` or `MaxRetriesExceededError` and goes dead",
                "same",
            ),
            Row(
                "`self.retry(max_retries=)` above the task's `max_retries`",
                "the job's attempts are set by the task's",
                "warned",
            ),
            Row(
                "`self.retry(args=, kwargs=, throw=False, **options)`",
                "a job runs again with its own arguments",
                "refused",
            ),
            Row(
                "an exception that is not a `Retry`",
                "the job is dead at once (FAILURE), as Celery fails the task",
                "same",
            ),
            Row(
                "`autoretry_for`, `dont_autoretry_for`, `retry_backoff`, `retry_backoff_max`, `retry_jitter`",
                "Celery's rule and backoff (full jitter)",
                "same",
            ),
            Row(
                "`retry_kwargs` with `max_retries`, `countdown`",
                "as Celery",
                "same; other keys refused",
            ),
            Row("`queue`", "the job's queue", "same"),
            Row(
                "`priority` (task, `apply_async`, signature)",
                "cronbase's priority as given: lower runs first (default 100); Celery's direction depended on the broker",
                "warned",
            ),
            Row(
                "`time_limit`, `soft_time_limit`",
                "cronbase's `timeout` (the smaller): no `SoftTimeLimitExceeded` in the task; a sync handler is not killed; the timed-out attempt is retried while attempts remain",
                "warned",
            ),
            Row("`ignore_result=True`", "the result is not stored", "same"),
            Row(
                "reading the result of an `ignore_result` task",
                "its state is tracked (Celery's stays PENDING)",
                "warned",
            ),
            Row(
                "an `ignore_result` task passing its result on in a canvas",
                "the next task would receive None",
                "refused",
            ),
            Row(
                "`acks_late=True`, `reject_on_worker_lost=True`",
                "a job whose worker died runs again when its lease runs out",
                "same",
            ),
            Row(
                "`acks_late=False`, `reject_on_worker_lost=False`, `task_acks_late=False`",
                "not available: the job runs again",
                "warned",
            ),
            Row(
                "`rate_limit='10/m'` (or a number per second)",
                "cronbase's `rate_limit`, across all workers together (Celery's is per worker)",
                "warned",
            ),
            Row("`expires` (task option)", "as `apply_async(expires=)`", "same"),
            Row(
                "`track_started`, `task_track_started`",
                "a running job reads STARTED only with it",
                "same",
            ),
            Row(
                "`serializer='json'`, `typing`, `shared`",
                "JSON; arguments checked at call time",
                "same",
            ),
            Row(
                "`base=` a subclass of `cronbase.contrib.celery.Task` (`app.Task`)",
                "the task's class",
                "same",
            ),
            Row(
                "`base=` overriding `on_success`, `on_failure`, `on_retry`, `after_return`, `before_start`",
                "never called: use `cronbase_app.on_job_end` / `.middleware`",
                "warned",
            ),
            Row(
                "`base=` a `celery.Task` subclass; any other task option",
                "not runnable here",
                "refused",
            ),
        ),
    ),
    (
        "Calling",
        (
            Row("`t.delay(*args, **kwargs)`", "`defer`; returns an `AsyncResult`", "same"),
            Row(
                "`apply_async(args=, kwargs=, countdown=, eta=)`",
                "`delay` / `run_at` (eta timezone-aware)",
                "same",
            ),
            Row(
                "`apply_async` with a naive `eta`, or both `countdown` and `eta`",
                "no zone to guess",
                "refused",
            ),
            Row("`apply_async(queue=)`", "the job's queue", "same"),
            Row(
                "`apply_async(expires=)` (seconds or an aware datetime)",
                "stored with the job; a job that starts later is cancelled (REVOKED)",
                "same",
            ),
            Row(
                "`apply_async(task_id='...')`",
                "the job's idempotency key; `AsyncResult(task_id)` finds the job by it",
                "same",
            ),
            Row("a `task_id` already used", "nothing is sent again", "warned"),
            Row("a `task_id` of digits only", "it would read as a job id", "refused"),
            Row(
                "`apply_async(link=sig or [sigs])`",
                "a chain: the task, then the link(s) given its result",
                "same",
            ),
            Row(
                "`link_error=`",
                "no error callbacks: see the job's attempts, or an `on_job_end` hook",
                "refused",
            ),
            Row(
                "`retry`, `retry_policy`, `routing_key`, `exchange`, `serializer`, `compression`, `headers`...",
                "no broker",
                "warned",
            ),
            Row("any other `apply_async` option", "unknown here", "refused"),
        ),
    ),
    (
        "Canvas",
        (
            Row(
                "`t.s(...)`, `t.si(...)`, `signature('name', args=, kwargs=)`, `sig.set(queue=, priority=, countdown=, eta=)`",
                "cronbase signatures",
                "same",
            ),
            Row(
                "`chain(a.s(), b.s())`, `a.s() | b.s()`",
                "`cronbase.chain`: the previous result is the first positional argument (the parameter of that place receives it); `.si()` receives nothing",
                "same",
            ),
            Row(
                "`group(...)`, `group(...).get()`",
                "`cronbase.group`; a `GroupResult` whose `get()` is the list of results in order",
                "same",
            ),
            Row(
                "`chord(header)(body)`, `chord(header, body)`, `group(...) | body`",
                "`group(...).then(body)`: the body gets the list",
                "same",
            ),
            Row(
                "a task failing in a workflow",
                "later tasks never run; their results raise that failure",
                "warned (their state reads the failure, Celery's PENDING)",
            ),
            Row("chord `link_error`, `on_error`", "no error callbacks", "refused"),
            Row(
                "signature options other than `queue`, `priority`, `countdown`, `eta`; workflow `apply_async` options",
                "set them on the signatures",
                "refused",
            ),
        ),
    ),
    (
        "Results",
        (
            Row(
                "`AsyncResult(id)`, `app.AsyncResult(id)`, `t.AsyncResult(id)`",
                "the job by id (or by `task_id`)",
                "same",
            ),
            Row(
                "`.state`, `.status`",
                "pending/queued: PENDING, running: STARTED, failed (will retry): RETRY, succeeded: SUCCESS, dead: FAILURE, cancelled: REVOKED",
                "same",
            ),
            Row("an unknown or pruned id", "PENDING", "same"),
            Row(
                "`.get(timeout=, propagate=)`",
                "`app.jobs.wait`; raises the task's exception (FAILURE), `TaskRevokedError` (REVOKED), `TimeoutError`",
                "same",
            ),
            Row("`.get()` inside a task", "`RuntimeError`, as Celery", "same"),
            Row(
                "`.result`, `.info`, `.traceback`",
                "the value; the exception rebuilt from its recorded type and message (its class if loaded, else a stand-in of that name); the last attempt's traceback",
                "same",
            ),
            Row(
                "`.ready()`, `.successful()`, `.failed()`, `.date_done`",
                "from the job's status",
                "same",
            ),
            Row("`.revoke()`", "`app.jobs.cancel`", "same"),
            Row(
                "`.revoke(terminate=True)`, `.forget()`",
                "a sync handler is not killed; results live until retention",
                "warned",
            ),
        ),
    ),
    (
        "Beat",
        (
            Row(
                "`beat_schedule` entries: `task`, `schedule`, `args`, `kwargs`, `options={'queue': q}`",
                "schedules declared as `@app.periodic`'s, keyed by entry name, one job per slot",
                "same",
            ),
            Row(
                "`crontab(minute=, hour=, day_of_week=, day_of_month=, month_of_year=)`",
                "a cron expression in `timezone`",
                "same",
            ),
            Row(
                "`crontab` restricting both `day_of_week` and `day_of_month`",
                "Celery needs both, cron either",
                "refused",
            ),
            Row(
                "a `timedelta` or a number of seconds",
                "the cron expression of that period, aligned to the clock",
                "warned",
            ),
            Row(
                "an interval no cron expression has (7 s, 90 min); `solar`; other schedule objects; `relative`; other entry options",
                "cronbase's schedules are cron",
                "refused",
            ),
            Row("missed slots after downtime", "the latest runs once", "same"),
        ),
    ),
    (
        "Elsewhere",
        (
            Row("`cronbase.contrib.celery.states`, `.exceptions`", "Celery's names", "same"),
            Row(
                "`cronbase.contrib.celery.signals` (`task_prerun`, `task_failure`...)",
                "absent: `cronbase_app.on_job_start`, `.on_job_end`, `.middleware`",
                "refused",
            ),
        ),
    ),
)


def markdown() -> str:
    """The table as the docs page shows it: one section per part."""
    lines: list[str] = []
    for part, rows in TABLE:
        lines += [f"## {part}", "", "| construct | cronbase | behaviour |", "|---|---|---|"]
        lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
        lines.append("")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")  # a pipe in a cell, even in code, would end it
