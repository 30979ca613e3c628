"""The public surface is a contract: changing it must be deliberate."""

from __future__ import annotations

import cronbase

EXPECTED = [
    "App",
    "AttemptCancelledError",
    "AttemptTimeoutError",
    "AuditEntry",
    "Backoff",
    "Bulk",
    "Cancel",
    "Chain",
    "ConfigurationError",
    "ConnectionTypeError",
    "CronbaseError",
    "DatabaseURLError",
    "DatabaseUnavailableError",
    "Deferral",
    "Effect",
    "EffectError",
    "EffectInProgress",
    "EffectNotFoundError",
    "EffectRecord",
    "Encrypted",
    "EventError",
    "EventTimeout",
    "Group",
    "InvalidNameError",
    "InvalidValueError",
    "Job",
    "JobAttempt",
    "JobContext",
    "JobGraph",
    "JobNotFoundError",
    "JobOptions",
    "JobStateError",
    "JobStatus",
    "LeaseLostError",
    "MigrationError",
    "Overrun",
    "Overview",
    "PayloadError",
    "ProcessDiedError",
    "QueueState",
    "Rate",
    "ResultError",
    "Retention",
    "Schedule",
    "ScheduleError",
    "Scheduler",
    "Signature",
    "Snooze",
    "Task",
    "TaskOptions",
    "TaskStats",
    "UndecodableJSON",
    "UnknownTaskError",
    "UnservedJobs",
    "UsageError",
    "Worker",
    "WorkerFatalError",
    "WorkerInfo",
    "WorkflowError",
    "chain",
    "current_job",
    "group",
]


def test_all_is_pinned_and_sorted() -> None:
    assert cronbase.__all__ == EXPECTED
    assert sorted(cronbase.__all__) == cronbase.__all__


def test_every_exported_name_exists() -> None:
    missing = [name for name in cronbase.__all__ if not hasattr(cronbase, name)]
    assert missing == []


def test_errors_share_one_root() -> None:
    errors = [getattr(cronbase, n) for n in cronbase.__all__ if n.endswith("Error")]
    assert errors
    assert all(issubclass(e, cronbase.CronbaseError) for e in errors)
