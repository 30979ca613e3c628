"""Log output: readable lines or one JSON object per line, and the running job's fields
(``job_id``, ``task``, ``attempt``) on every record logged while a handler runs."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from .context import running_job

# The fields a record logged inside a running job carries (set by the record factory below).
JOB_FIELDS = ("job_id", "task", "attempt")

# Attributes every LogRecord has; anything else came in through ``extra=`` and is a field.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """``{"time", "level", "logger", "message", ...event fields}`` on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and value is not None:
                out[key] = value
        if record.exc_info:
            out["traceback"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """``time level logger: message``, then ``job_id=.. task=.. attempt=..`` inside a job."""

    def __init__(self) -> None:
        super().__init__(
            "%(asctime)s %(levelname)-7s %(name)s: %(message)s", datefmt="%Y-%m-%d %H:%M:%S"
        )

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if getattr(record, "job_id", None) is None:
            return text
        fields = " ".join(f"{name}={getattr(record, name, None)}" for name in JOB_FIELDS)
        first, newline, rest = text.partition("\n")  # after the message, before a traceback
        return f"{first} [{fields}]{newline}{rest}"


_MAKE_RECORD = logging.Logger.makeRecord.__code__


def _extra_keys(frame: FrameType | None) -> Collection[str]:
    """The ``extra=`` keys of the log call that is creating a record, when the stdlib's
    Logger.makeRecord is the caller: it refuses an extra key the new record already has
    (KeyError "Attempt to overwrite 'task' in LogRecord"), so the caller's own field wins."""
    for _ in range(4):  # other record factories may wrap this one (OpenTelemetry's does)
        if frame is None:
            break
        if frame.f_code is _MAKE_RECORD:
            extra = frame.f_locals.get("extra")
            return extra.keys() if isinstance(extra, Mapping) else ()
        frame = frame.f_back
    return ()


def install_job_context() -> None:
    """Make every log record created while a handler runs carry its job's ``job_id``, ``task``
    and ``attempt``, whichever logger and handler it goes to (the worker calls this; idempotent).

    A record factory, not a filter: a filter on one logger misses records of its children and of
    handlers the application installs itself. The job comes from current_job()'s contextvar, so
    each concurrent job's records carry its own fields. A field the caller passed in ``extra=``
    wins (``log.info("...", extra={"task": "sync"})`` keeps its ``task``).
    """
    previous = logging.getLogRecordFactory()
    if getattr(previous, "adds_job_fields", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        job = running_job()
        if job is None:
            return record
        taken = _extra_keys(sys._getframe(1))
        if "job_id" not in taken:
            record.job_id = job.id
        if "task" not in taken:
            record.task = job.task
        if "attempt" not in taken:
            record.attempt = job.attempt
        return record

    factory.adds_job_fields = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


def setup(level: int, log_format: str = "text") -> None:
    """Root logging to stderr in the chosen format (the CLI calls this once)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
    logging.getLogger("cronbase").setLevel(level)
