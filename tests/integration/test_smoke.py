"""A first end-to-end pass through enqueue, a burst worker, and the admin calls."""

from __future__ import annotations

from datetime import timedelta

import cronbase


def test_defer_and_burst_worker_run_a_job(app: cronbase.App) -> None:
    seen: list[int] = []

    @app.task(retry=cronbase.Backoff(base=timedelta(milliseconds=10), jitter=0))
    def record(n: int) -> None:
        seen.append(n)

    job_id = record.defer(n=7)
    assert app.jobs.get(job_id).status is cronbase.JobStatus.QUEUED
    app.run_worker(burst=True, install_signal_handlers=False)
    assert seen == [7]
    job = app.jobs.get(job_id)
    assert job.status is cronbase.JobStatus.SUCCEEDED
    assert job.attempts == 1
    assert [a.outcome for a in app.jobs.attempts(job_id)] == ["succeeded"]
