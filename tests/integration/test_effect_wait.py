"""A job that meets an effect another owner is performing waits for it: queued again after its
retry delay, the attempt not counted (issue 21: EffectInProgress burnt attempts)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg

import cronbase
from tests.e2e.harness import history

KEY = "invoice:812:email"


def test_an_effect_in_progress_elsewhere_does_not_count_an_attempt(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(max_attempts=2, retry=cronbase.Backoff(base=timedelta(seconds=30), jitter=0))
    def send(n: int) -> None:
        with app.effects.once(KEY, stale_after=timedelta(hours=1)) as effect:
            if not effect.done:
                effect.record(sent=n)

    # Another owner (a caller outside any job) is performing the effect, and is alive.
    block = app.effects.once(KEY, stale_after=timedelta(hours=1))
    block.__enter__()
    job_id = send.defer(n=1)
    for _ in range(3):  # three tries, each finding it in progress: more than max_attempts
        db.execute("UPDATE cronbase.jobs SET run_at = now() WHERE id = %s", (job_id,))
        app.run_worker(burst=True, install_signal_handlers=False)
        job = app.jobs.get(job_id)
        assert (job.status, job.attempts, job.snoozes) == ("queued", 0, 0)
        assert job.run_at > db.execute("SELECT now() + interval '20 seconds'").fetchone()[0]
    tries = app.jobs.attempts(job_id)
    assert [(a.attempt, a.outcome, a.error_type) for a in tries] == [
        (1, "snoozed", "EffectInProgress")
    ] * 3
    assert all(
        (a.error or "").startswith(f"EffectInProgress: effect {KEY!r} is in progress by a caller")
        for a in tries
    )

    # The other owner finishes: the job finds the effect done, and succeeds on its first attempt.
    block.__exit__(None, None, None)
    db.execute("UPDATE cronbase.jobs SET run_at = now() WHERE id = %s", (job_id,))
    app.run_worker(burst=True, install_signal_handlers=False)
    job = app.jobs.get(job_id)
    assert (job.status, job.attempts) == ("succeeded", 1)
    assert [outcome for _, outcome, _ in history(db, job_id)] == ["snoozed"] * 3 + ["succeeded"]
