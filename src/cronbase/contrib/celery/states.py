"""Celery's task states (``celery.states``) and how cronbase's job statuses read as them."""

from __future__ import annotations

from ...job import JobStatus

PENDING = "PENDING"
RECEIVED = "RECEIVED"
STARTED = "STARTED"
SUCCESS = "SUCCESS"
FAILURE = "FAILURE"
REVOKED = "REVOKED"
REJECTED = "REJECTED"
RETRY = "RETRY"
IGNORED = "IGNORED"

READY_STATES = frozenset({SUCCESS, FAILURE, REVOKED})
UNREADY_STATES = frozenset({PENDING, RECEIVED, STARTED, REJECTED, RETRY})
EXCEPTION_STATES = frozenset({RETRY, FAILURE, REVOKED})
PROPAGATE_STATES = frozenset({FAILURE, REVOKED})
ALL_STATES = frozenset({PENDING, RECEIVED, STARTED, SUCCESS, FAILURE, RETRY, REVOKED})

# cronbase's statuses as Celery names them. 'pending' (waiting for its parents in a workflow) and
# 'queued' (waiting for its run_at, first or after a snooze) are both Celery's PENDING; 'failed'
# is an attempt that failed and will run again, Celery's RETRY; 'dead' is FAILURE (attempts used
# up, or an exception the task does not retry); 'cancelled' (an operator, revoke(), an expired
# job) is REVOKED. A job that is not there (never deferred, or pruned) reads PENDING, as an
# unknown task id does in Celery.
BY_STATUS: dict[JobStatus, str] = {
    JobStatus.PENDING: PENDING,
    JobStatus.QUEUED: PENDING,
    JobStatus.RUNNING: STARTED,
    JobStatus.FAILED: RETRY,
    JobStatus.SUCCEEDED: SUCCESS,
    JobStatus.DEAD: FAILURE,
    JobStatus.CANCELLED: REVOKED,
}


def state_of(status: JobStatus | None) -> str:
    """The Celery state of a job in ``status`` (None: no such job, PENDING)."""
    return PENDING if status is None else BY_STATUS[status]
