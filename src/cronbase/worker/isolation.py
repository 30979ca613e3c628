"""Hard timeouts: a task with ``isolation="process"`` runs its sync handler in a child process,
which is killed at the timeout (or when the attempt's lease is lost, or the worker stops past its
grace period). A thread cannot be killed; a process can.

Children are spawned (never forked: the worker holds threads and connections a fork would copy
half-way), import the task's module, and serve one attempt at a time over a pipe: the payload
goes in as JSON text, the result comes back as JSON text, an exception as its type, message and
traceback. A child that finished an attempt waits for the next one (a spawn costs ~0.3 s); one
that was killed is replaced on the next attempt. The timeout runs from when the handler starts in
the child (it says "started"), not from the spawn: the child's start has its own limit.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import multiprocessing
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from ..task import Task
    from .claim import ClaimedJob

logger = logging.getLogger("cronbase")

_SPAWN = multiprocessing.get_context("spawn")
# What a stop signal is to the worker (signals.py); a child ignores them all.
STOP_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT})
# How often a waiting thread looks whether its child was killed from the loop.
_POLL = 0.2
# The timeout is the handler's: it runs from the child's "started", sent as its handler starts.
# Before that the child starts (a spawn, the interpreter, the task's imports: 0.3 s idle, several
# seconds on a loaded host or with heavy imports), bounded by this or the timeout, whichever is
# longer (so whatever started within the timeout before still does).
STARTUP_LIMIT = 60.0


@dataclass(frozen=True)
class Remote:
    """What the child's handler did: returned (``result``: JSON text or None), or raised."""

    kind: str  # returned | raised | snooze | cancel | suspend | payload
    result: str | None = None
    completed: bool = False  # finished through current_job().transaction() in the child
    error_type: str | None = None
    message: str | None = None
    traceback: str | None = None
    gives_up: bool = False
    seconds: float | None = None
    waiting_for: str | None = None


class RemoteError(Exception):
    """An exception the handler raised in its child process, as the parent records it."""

    def __init__(self, remote: Remote) -> None:
        super().__init__(remote.message or remote.error_type or "error")
        self.remote = remote


class Killed(Exception):
    """The child was killed before its handler returned: ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def handler_path(task: Task[Any, Any]) -> tuple[str, str]:
    """Where a child finds the task: its handler's module and qualified name."""
    return task.func.__module__, task.func.__qualname__


class _Child:
    def __init__(self, process: BaseProcess, conn: Connection) -> None:
        self.process = process
        self.conn = conn
        self.kill_reason: str | None = None

    def kill(self, reason: str) -> None:
        self.kill_reason = reason
        with contextlib.suppress(Exception):
            self.process.kill()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.close()
        with contextlib.suppress(Exception):
            self.process.kill()
            self.process.join(timeout=5)


class Children:
    """The child processes of one worker: idle ones kept for reuse, busy ones by attempt."""

    def __init__(self, database_url: str | None, log_level: int) -> None:
        self._database_url = database_url
        self._log_level = log_level
        self._lock = threading.Lock()
        self._idle: list[_Child] = []
        self._busy: dict[ClaimedJob, _Child] = {}
        self._closed = False

    def _take(self, job: ClaimedJob) -> _Child:
        with self._lock:
            child = self._idle.pop() if self._idle else None
        while child is not None and not child.process.is_alive():
            child.close()
            with self._lock:
                child = self._idle.pop() if self._idle else None
        if child is None:
            parent, there = _SPAWN.Pipe()
            process = _SPAWN.Process(
                target=child_main,
                args=(there, self._database_url, self._log_level),
                name=f"cronbase-isolated-{job.task}",
                daemon=True,
            )
            # Born with the stop signals blocked (a mask outlives fork and exec; this thread is
            # not the one Python handles signals in), until child_main ignores them: a SIGTERM
            # to the whole process group (GNU timeout, systemd, Ctrl-C) is the worker's to
            # handle, not a death of the attempt the child runs, even while it starts.
            signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
            process.start()
            there.close()
            child = _Child(process, parent)
        with self._lock:
            self._busy[job] = child
            if self._closed:
                child.kill("the worker is stopping")
        return child

    def _done(self, job: ClaimedJob, child: _Child) -> None:
        with self._lock:
            self._busy.pop(job, None)
            if child.kill_reason is None and not self._closed and child.process.is_alive():
                self._idle.append(child)
                return
        child.close()

    def run(
        self,
        task: Task[Any, Any],
        job: ClaimedJob,
        timeout: float | None,
        on_progress: Callable[[float, str | None], None],
    ) -> Remote:
        """Run ``job`` in a child (blocking: call from a worker thread); Killed ``timeout``
        seconds after its handler started, when the child's start takes longer than its limit
        (STARTUP_LIMIT), or when :meth:`kill` is called for the job."""
        child = self._take(job)
        deadline = overdue = None  # no timeout, no limit (and no start-up limit)
        if timeout is not None:
            start_limit = max(STARTUP_LIMIT, timeout)
            deadline = time.monotonic() + start_limit
            overdue = (
                f"its process was killed after {start_limit:g}s of start-up (spawning it, "
                "importing the task's module)"
            )
        try:
            module, qualname = handler_path(task)
            request = {
                "module": module,
                "qualname": qualname,
                "task": task.name,
                "payload": json.dumps(job.payload),
                "job": {
                    "id": job.id,
                    "queue": job.queue,
                    "attempt": job.attempt,
                    "max_attempts": job.max_attempts,
                    "metadata": job.metadata,
                    "task_version": job.task_version or 1,
                    "lease_token": str(job.lease_token),
                    "lease": job.lease.total_seconds(),
                    "worker_id": job.context.worker_id if job.context else None,
                },
            }
            child.conn.send(request)
            while True:
                wait = _POLL if deadline is None else min(_POLL, deadline - time.monotonic())
                if wait <= 0:
                    child.kill(overdue or "")
                    raise Killed(child.kill_reason or "")
                if child.kill_reason is not None:
                    raise Killed(child.kill_reason)
                try:
                    if not child.conn.poll(wait):
                        if not child.process.is_alive():
                            raise Killed(_death(child))
                        continue
                    message = child.conn.recv()
                except (EOFError, OSError):
                    raise Killed(child.kill_reason or _death(child)) from None
                if message[0] == "started":
                    if timeout is not None:
                        deadline = time.monotonic() + timeout
                        overdue = f"its timeout of {timeout:g}s passed"
                    continue
                if message[0] == "progress":
                    on_progress(message[1], message[2])
                    continue
                return Remote(**message[1])
        finally:
            self._done(job, child)

    def kill(self, job: ClaimedJob, reason: str) -> bool:
        """Kill the child running ``job`` (its lease was lost; the worker stops); False when
        none runs it."""
        with self._lock:
            child = self._busy.get(job)
        if child is None:
            return False
        child.kill(reason)
        return True

    def close(self) -> None:
        """Kill every child: idle ones now, busy ones too (their attempts end as killed)."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            busy = list(self._busy.values())
        for child in busy:
            child.kill("the worker is stopping")
        for child in idle:
            child.close()


def _death(child: _Child) -> str:
    child.process.join(timeout=1)
    code = child.process.exitcode
    if code is not None and code < 0:
        with contextlib.suppress(ValueError):
            return f"its process died of {signal.Signals(-code).name}"
    return f"its process exited with status {code}"


# -- the child's side -------------------------------------------------------------------------------


def child_main(conn: Connection, database_url: str | None, log_level: int) -> None:
    """A child process's loop: one attempt at a time until the pipe closes."""
    if database_url and not os.environ.get("CRONBASE_DATABASE_URL"):
        # The parent's database, when its App took it from the environment or the embedded
        # server: the child's App, made by importing the same module, then finds the same one.
        os.environ["CRONBASE_DATABASE_URL"] = database_url
    logging.basicConfig(level=log_level, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    for sig in STOP_SIGNALS:  # the worker decides when its child ends (it kills it)
        signal.signal(sig, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        outcome = _serve(request, conn)
        conn.send(("done", outcome))


def _find_task(module: str, qualname: str, name: str) -> Task[Any, Any]:
    from ..errors import ConfigurationError
    from ..task import Task

    found: Any = importlib.import_module(module)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if not isinstance(found, Task):
        raise ConfigurationError(
            f"task {name!r}: isolation='process' found no @app.task at {module}.{qualname} in "
            "its child process; define the task at module level"
        )
    return found


def _serve(request: dict[str, Any], conn: Connection) -> dict[str, Any]:
    import uuid
    from datetime import timedelta

    from ..context import JobContext, set_current
    from ..errors import Cancel, PayloadError, Snooze
    from ..payload.encode import encode_result
    from ..workflow.durable import Suspend

    job = request["job"]
    try:
        task = _find_task(request["module"], request["qualname"], request["task"])
    except Exception as exc:
        return _raised(exc, gives_up=True)
    payload = json.loads(request["payload"])

    def progress() -> None:
        percent, stage = context.progress
        with contextlib.suppress(Exception):
            conn.send(("progress", percent, stage))

    context = JobContext(
        id=job["id"],
        task=request["task"],
        queue=job["queue"],
        attempt=job["attempt"],
        max_attempts=job["max_attempts"],
        payload=payload,
        metadata=job["metadata"],
        task_version=job["task_version"],
        lease_token=uuid.UUID(job["lease_token"]),
        lease=timedelta(seconds=job["lease"]),
        worker_id=job["worker_id"],
        encrypted=task.defaults.encrypt,  # the child's middleware (spans) keeps messages out
        _db=task.db,
        _on_progress=progress,
    )
    set_current(context)
    try:
        kwargs = task.arguments(payload)
    except PayloadError as exc:
        return {"kind": "payload", "message": str(exc)}
    conn.send(("started",))  # the handler's timeout runs from here
    try:
        returned = task.hooks.call(context, task.func, kwargs)
    except Suspend as exc:
        return {"kind": "suspend", "seconds": exc.wake_in, "waiting_for": exc.waiting_for}
    except Snooze as exc:
        return {"kind": "snooze", "seconds": exc.seconds, "completed": context.completed}
    except Cancel as exc:
        return {"kind": "cancel", "message": exc.reason, "completed": context.completed}
    except Exception as exc:
        return _raised(exc, gives_up=task.gives_up(exc), completed=context.completed)
    if returned is None or context.completed:
        return {"kind": "returned", "completed": context.completed}
    try:
        text = encode_result(context.id, context.task, returned, task.db.max_result_bytes)
    except Exception as exc:
        return _raised(exc, gives_up=True)
    return {"kind": "returned", "result": text}


def _raised(exc: BaseException, *, gives_up: bool, completed: bool = False) -> dict[str, Any]:
    kind = type(exc)
    return {
        "kind": "raised",
        "error_type": f"{kind.__module__}.{kind.__qualname__}".removeprefix("builtins."),
        "message": f"{kind.__name__}: {exc}" if str(exc) else kind.__name__,
        "traceback": "".join(traceback.format_exception(exc)),
        "gives_up": gives_up,
        "completed": completed,
    }
