"""The app the effects tests' worker processes run: ``python -m tests.e2e.effects_app --worker-id A``.

Its tasks send the monthly report of ``examples/monthly_report.py`` (same key, Message-ID,
message and ``reconcile``) to the SMTP sink a test starts, and can pause at named points so a
test can SIGKILL the process exactly there: at point P, job J creates the marker file ``P-J``
(holding its pid) in ``EFFECTS_TEST_DIR`` and waits until ``P-J.release`` or ``P.release``
exists. A marker is created once: a retry of the same job passes the point without stopping.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from datetime import timedelta
from pathlib import Path

import cronbase
from examples import monthly_report
from tests.e2e import worker_app

POLL_SECONDS = 0.02
TEST_ROWS = """
CREATE TABLE IF NOT EXISTS effects_test_rows (
    id serial PRIMARY KEY, job_id bigint NOT NULL, attempt integer NOT NULL, n integer NOT NULL);
TRUNCATE effects_test_rows;
"""
# Quick retries (an attempt that met EffectInProgress comes back within a second), many of
# them, and a short lease, so a killed worker's job is retried soon.
RETRY = cronbase.Backoff(base=timedelta(milliseconds=100), cap=timedelta(seconds=1), jitter=0)
MAX_ATTEMPTS = 100
LEASE = timedelta(seconds=1)


def markers() -> Path:
    return Path(os.environ["EFFECTS_TEST_DIR"])


def pause(point: str, pauses: list[str] | None) -> None:
    """Stop at ``point`` if the payload asks to, the first time this job comes here."""
    if point not in (pauses or []):
        return
    name = f"{point}-{cronbase.current_job().id}"
    try:
        fd = os.open(markers() / name, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return  # an earlier attempt stopped here
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    while not (
        (markers() / f"{name}.release").exists() or (markers() / f"{point}.release").exists()
    ):
        threading.Event().wait(POLL_SECONDS)


def make_app(database_url: str | None = None) -> cronbase.App:
    """The test tasks on an App (its database from the environment unless given)."""
    app = cronbase.App(database_url=database_url)

    @app.task(retry=RETRY, max_attempts=MAX_ATTEMPTS, lease=LEASE)
    def send_report(
        user_email: str,
        period: str,
        stale_after: float = 1800.0,
        reconcile: bool = True,
        pauses: list[str] | None = None,
    ) -> None:
        """The example's send_monthly_report, with pauses and a choice of stale_after/reconcile."""
        key = monthly_report.effect_key(user_email, period)
        pause("before_once", pauses)
        with app.effects.once(
            key,
            stale_after=timedelta(seconds=stale_after),
            reconcile=monthly_report.was_delivered if reconcile else None,
        ) as effect:
            if effect.done:
                return
            pause("before_send", pauses)
            message_id = monthly_report.message_id_for(key)
            monthly_report.send(monthly_report.build_message(user_email, period, message_id))
            pause("after_send", pauses)
            effect.record(message_id=message_id)

    @app.task(retry=RETRY, max_attempts=MAX_ATTEMPTS, lease=LEASE)
    def write_in_transaction(
        n: int, fail_attempts: int = 0, pauses: list[str] | None = None
    ) -> None:
        """Writes a row and succeeds in one transaction; attempts up to ``fail_attempts`` raise."""
        job = cronbase.current_job()
        with job.transaction() as conn:
            conn.execute(
                "INSERT INTO effects_test_rows (job_id, attempt, n) VALUES (%s, %s, %s)",
                (job.id, job.attempt, n),
            )
            pause("in_transaction", pauses)
            if job.attempt <= fail_attempts:
                raise RuntimeError(f"attempt {job.attempt} fails on purpose")

    @app.task(retry=RETRY, max_attempts=MAX_ATTEMPTS, lease=LEASE)
    async def write_in_transaction_async(
        n: int, fail_attempts: int = 0, pauses: list[str] | None = None
    ) -> None:
        """The async twin of ``write_in_transaction``."""
        job = cronbase.current_job()
        async with job.transaction_async() as conn:
            await conn.execute(
                "INSERT INTO effects_test_rows (job_id, attempt, n) VALUES (%s, %s, %s)",
                (job.id, job.attempt, n),
            )
            # to_thread copies the context: current_job() works in the thread too.
            await asyncio.to_thread(pause, "in_transaction", pauses)
            if job.attempt <= fail_attempts:
                raise RuntimeError(f"attempt {job.attempt} fails on purpose")

    return app


def main(argv: list[str]) -> None:
    # worker_app's worker, on this app, quicker to notice and to give up (argv still overrides).
    quick = ["--concurrency", "1", "--poll-interval", "0.2", "--reap-interval", "0.2"]
    worker_app.main([*quick, "--shutdown-grace", "5", *argv], make=make_app)


if __name__ == "__main__":
    main(sys.argv[1:])
