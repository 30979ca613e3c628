"""``enqueued(app, task=..., **payload_subset)``: the jobs in the App's (test) database whose task
and payload match, with assertions whose failure lists what was enqueued instead."""

from __future__ import annotations

import inspect
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import InvalidValueError, PayloadError
from ..job import Job, JobStatus, JSONValue, Payload
from ..payload.encode import encode_payload

if TYPE_CHECKING:
    from ..app import App
    from ..task import Task

# Jobs looked at, newest first: a test database holds far fewer.
LIMIT = 10_000
# Jobs listed in a failure message (the newest ones).
SHOWN = 25
_NO_LIMIT = 1 << 40
_WAITING = frozenset({JobStatus.QUEUED, JobStatus.FAILED})
StatusFilter = str | JobStatus | Collection[str | JobStatus]


class Enqueued(list[Job]):
    """The matching jobs (``cronbase.Job``), oldest first, with assertions."""

    def __init__(self, matches: list[Job], *, wanted: tuple[str, str], everything: list[Job]):
        super().__init__(matches)
        # ("waiting ", " of task 'send' with {...} in the payload"): "job(s)" goes between.
        self._wanted = wanted
        self.everything = everything

    def assert_one(self) -> Job:
        """The one matching job; AssertionError listing what was enqueued unless exactly one."""
        __tracebackhide__ = True
        self.assert_count(1)
        return self[0]

    def assert_count(self, count: int) -> Enqueued:
        """AssertionError listing what was enqueued unless exactly ``count`` jobs match."""
        __tracebackhide__ = True  # failures point at the test's line
        if len(self) != count:
            raise AssertionError(self._explain(f"exactly {count}", count))
        return self

    def assert_any(self) -> Enqueued:
        """AssertionError listing what was enqueued unless at least one job matches."""
        __tracebackhide__ = True  # failures point at the test's line
        if not self:
            raise AssertionError(self._explain("at least 1", 1))
        return self

    def assert_none(self) -> None:
        """AssertionError listing the matching jobs unless none matches."""
        __tracebackhide__ = True  # failures point at the test's line
        if self:
            raise AssertionError(self._explain("no", 1))

    def _explain(self, expected: str, count: int) -> str:
        status, which = self._wanted
        noun = "job" if count == 1 else "jobs"
        head = f"expected {expected} {status}{noun}{which}, found {len(self)}"
        if not self.everything:
            return f"{head}; nothing was enqueued"
        shown = self.everything[-SHOWN:]
        more = len(self.everything) - len(shown)
        lines = [f"{head}; enqueued ({len(self.everything)} jobs, oldest first):"]
        if more:
            lines.append(f"  ... {more} older jobs not shown")
        marks = {job.id for job in self}
        lines += [
            f"  {'*' if job.id in marks else ' '} job {job.id} {job.task} {job.payload!r} "
            f"[{job.status.value}]"
            for job in shown
        ]
        if marks:
            lines.append("  (* matches)")
        return "\n".join(lines)


def enqueued(
    app: App,
    task: Task[Any, Any] | str | None = None,
    *,
    status: StatusFilter = "waiting",
    payload: Mapping[str, Any] | None = None,
    **payload_subset: Any,
) -> Enqueued:
    """The jobs of ``task`` (a Task or its name; None: any) whose payload holds every given
    key with its value, oldest first.

    ```pycon
    >>> enqueued(app, task=send_invoice, invoice_id=812).assert_one()  # doctest: +SKIP
    ```

    ``status``: 'waiting' (queued or failed, the default), 'any', a status, or several.
    Values are compared as stored (a datetime as its ISO text, so pass either); a key whose
    name is taken here (task, status, payload) goes in ``payload={...}``. A task name that is
    not registered, or a key the handler takes no argument for, is refused: it would match
    nothing and make ``assert_none()`` pass for the wrong reason.
    """
    wanted, select = _criteria(app, task, status, payload, payload_subset)
    return _result(app.jobs.list(limit=LIMIT), wanted, select)


async def enqueued_async(
    app: App,
    task: Task[Any, Any] | str | None = None,
    *,
    status: StatusFilter = "waiting",
    payload: Mapping[str, Any] | None = None,
    **payload_subset: Any,
) -> Enqueued:
    """The async twin of :func:`enqueued`."""
    wanted, select = _criteria(app, task, status, payload, payload_subset)
    return _result(await app.jobs.list_async(limit=LIMIT), wanted, select)


class _Select:
    def __init__(self, task: str | None, statuses: frozenset[JobStatus] | None, subset: Payload):
        self.task = task
        self.statuses = statuses
        self.subset = subset

    def __call__(self, job: Job) -> bool:
        if self.task is not None and job.task != self.task:
            return False
        if self.statuses is not None and job.status not in self.statuses:
            return False
        # An undecodable payload (other SQL wrote it) holds no key.
        stored = job.payload if isinstance(job.payload, dict) else {}
        return all(
            key in stored and _same(stored[key], value) for key, value in self.subset.items()
        )


def _result(newest_first: list[Job], wanted: tuple[str, str], select: _Select) -> Enqueued:
    everything = newest_first[::-1]
    return Enqueued(
        [job for job in everything if select(job)], wanted=wanted, everything=everything
    )


def _criteria(
    app: App,
    task: Task[Any, Any] | str | None,
    status: StatusFilter,
    payload: Mapping[str, Any] | None,
    payload_subset: dict[str, Any],
) -> tuple[tuple[str, str], _Select]:
    name = task if task is None or isinstance(task, str) else task.name
    subset: dict[str, Any] = {**(payload or {}), **payload_subset}
    if name is not None:
        _check_keys(app.get_task(name), subset)  # UnknownTaskError names the registered ones
    statuses = _statuses(status)
    # The values as stored: through the App's payload encoder and back (no size limit here).
    db = app.db
    plain: Payload = db.json_loads(
        encode_payload(name or "enqueued", subset, _NO_LIMIT, db.json_dumps)
    )
    which = f" of task {name!r}" if name else ""
    if plain:
        which += f" with {plain!r} in the payload"
    return (_describe(status, statuses), which), _Select(name, statuses, plain)


def _check_keys(task: Task[Any, Any], subset: Mapping[str, Any]) -> None:
    params = task.signature.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = sorted(set(subset) - set(params))
    if unknown:
        takes = ", ".join(params) or "no arguments"
        raise PayloadError(
            f"task {task.name!r} takes no argument {', '.join(map(repr, unknown))} ({takes}): "
            "no job of it can match; check the key"
        )


def _statuses(status: StatusFilter) -> frozenset[JobStatus] | None:
    """None: any status."""
    if status == "any":
        return None
    if status == "waiting":
        return _WAITING
    given = [status] if isinstance(status, str) else list(status)
    try:
        return frozenset(JobStatus(s) for s in given)
    except ValueError:
        known = ", ".join(s.value for s in JobStatus)
        raise InvalidValueError(
            f"unknown status {status!r}; give 'waiting', 'any', or some of: {known}"
        ) from None


def _describe(status: StatusFilter, statuses: frozenset[JobStatus] | None) -> str:
    if statuses is None:
        return ""
    if status == "waiting":
        return "waiting "
    return "/".join(sorted(statuses)) + " "


def _same(stored: JSONValue, wanted: JSONValue) -> bool:
    """JSON equality: ``True`` is not ``1`` (Python says it is), ``1`` is ``1.0``."""
    if isinstance(stored, bool) or isinstance(wanted, bool):
        return stored is wanted
    if isinstance(stored, dict) and isinstance(wanted, dict):
        return stored.keys() == wanted.keys() and all(_same(stored[k], wanted[k]) for k in stored)
    if isinstance(stored, list) and isinstance(wanted, list):
        return len(stored) == len(wanted) and all(map(_same, stored, wanted))
    return stored == wanted
