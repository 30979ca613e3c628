"""cronbase: scheduled and background jobs for Python on the PostgreSQL you already have."""

from .app import App
from .context import JobContext, current_job
from .effects import Effect, EffectRecord
from .enqueue.options import JobOptions, TaskOptions
from .errors import (
    AttemptCancelledError,
    AttemptTimeoutError,
    Cancel,
    ConfigurationError,
    ConnectionTypeError,
    CronbaseError,
    DatabaseUnavailableError,
    DatabaseURLError,
    EffectError,
    EffectInProgress,
    EffectNotFoundError,
    EventError,
    EventTimeout,
    InvalidNameError,
    InvalidValueError,
    JobNotFoundError,
    JobStateError,
    LeaseLostError,
    MigrationError,
    PayloadError,
    ProcessDiedError,
    ResultError,
    ScheduleError,
    Snooze,
    UnknownTaskError,
    UsageError,
    WorkerFatalError,
    WorkflowError,
)
from .flow import Rate
from .job import Job, JobAttempt, JobGraph, JobStatus
from .operations.audit import AuditEntry
from .operations.fleet import Overrun, WorkerInfo
from .operations.jobs import Bulk
from .operations.queues import QueueState
from .operations.retention import Retention
from .operations.stats import Overview, TaskStats, UnservedJobs
from .records import Encrypted, UndecodableJSON
from .retry import Backoff
from .schedule.scheduler import Schedule, Scheduler
from .task import Deferral, Task
from .worker import Worker
from .workflow.signatures import Chain, Group, Signature, chain, group

__all__ = [
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
