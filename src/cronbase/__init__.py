"""cronbase: scheduled and background jobs for Python on the PostgreSQL you already have."""

from .app import App
from .context import JobContext, current_job
from .effects import Effect, EffectRecord
from .enqueue.insert import JobOptions
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
    EventTimeout,
    InvalidNameError,
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
    WorkerFatalError,
    WorkflowError,
)
from .flow import Rate
from .job import Job, JobAttempt, JobStatus
from .retry import Backoff
from .schedule.scheduler import Schedule, Scheduler
from .task import Deferral, Task
from .worker import Worker
from .workflow.events import EventError
from .workflow.signatures import Chain, Group, Signature, chain, group

__all__ = [
    "App",
    "AttemptCancelledError",
    "AttemptTimeoutError",
    "Backoff",
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
    "EventError",
    "EventTimeout",
    "Group",
    "InvalidNameError",
    "Job",
    "JobAttempt",
    "JobContext",
    "JobNotFoundError",
    "JobOptions",
    "JobStateError",
    "JobStatus",
    "LeaseLostError",
    "MigrationError",
    "PayloadError",
    "ProcessDiedError",
    "Rate",
    "ResultError",
    "Schedule",
    "ScheduleError",
    "Scheduler",
    "Signature",
    "Snooze",
    "Task",
    "UnknownTaskError",
    "Worker",
    "WorkerFatalError",
    "WorkflowError",
    "chain",
    "current_job",
    "group",
]
