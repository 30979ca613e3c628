"""examples/monthly_report.py: a monthly report email sent once, even when its job runs twice.

The email is an effect in the effects ledger, keyed by what it means
(``monthly_report:2026-10:ana@example.com``). Its Message-ID is derived from that key, so the
same email always carries the same Message-ID, and ``reconcile`` can ask the mail server's log
whether a worker that died after sending (before recording it) did deliver it.

Run ``python -m examples.monthly_report`` from the repository root: it starts a local SMTP sink
(``examples/smtp_sink.py``), enqueues a few reports (one twice), runs a burst worker and says
how many emails the sink received. Without configuration it uses the embedded PostgreSQL.
Settings: ``SMTP_HOST`` / ``SMTP_PORT`` (default 127.0.0.1:8025) and ``SMTP_SINK_LOG`` (the
sink's log, which ``reconcile`` reads).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import smtplib
import sys
import tempfile
from datetime import timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import cronbase
from examples import smtp_sink

app = cronbase.App()  # CRONBASE_DATABASE_URL, else DATABASE_URL, else the embedded PostgreSQL

SENDER = "reports@cronbase.example"


def effect_key(user_email: str, period: str) -> str:
    return f"monthly_report:{period}:{user_email}"


def message_id_for(key: str) -> str:
    """The same key gives the same Message-ID: the thread that ties the mail log to the ledger."""
    return f"<{hashlib.sha256(key.encode()).hexdigest()[:32]}@cronbase.example>"


def build_message(user_email: str, period: str, message_id: str) -> EmailMessage:
    message = EmailMessage()
    message["From"] = SENDER
    message["To"] = user_email
    message["Subject"] = f"Your report for {period}"
    message["Message-ID"] = message_id
    message.set_content(f"Hello {user_email},\n\nhere is your report for {period}.\n")
    return message


def send(message: EmailMessage) -> None:
    host = os.environ.get("SMTP_HOST", "127.0.0.1")
    port = int(os.environ.get("SMTP_PORT", "8025"))
    with smtplib.SMTP(host, port, timeout=30) as smtp:
        smtp.send_message(message)


def sink_log() -> Path:
    return Path(os.environ.get("SMTP_SINK_LOG", str(smtp_sink.DEFAULT_LOG)))


def was_delivered(key: str) -> dict[str, Any] | None:
    """reconcile: did the mail server accept this effect's email? (None: it did not.)"""
    delivered = smtp_sink.find(sink_log(), message_id_for(key))
    if delivered is None:
        return None
    return {"message_id": delivered["message_id"], "found_in": "smtp log"}


@app.task(queue="emails", max_attempts=10)
def send_monthly_report(user_email: str, period: str) -> None:
    key = effect_key(user_email, period)
    with app.effects.once(
        key, stale_after=timedelta(minutes=30), reconcile=was_delivered
    ) as effect:
        if effect.done:
            return  # sent before, by this job's earlier attempt or by another job
        message_id = message_id_for(key)
        send(build_message(user_email, period, message_id))
        # A crash between send() and here leaves the effect 'processing': after stale_after,
        # the next attempt asks was_delivered() before sending again.
        effect.record(message_id=message_id)


REPORTS = [
    ("ana@example.com", "2026-10"),
    ("bo@example.com", "2026-10"),
    ("ana@example.com", "2026-10"),  # enqueued twice: sent once
]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="cronbase-sink-") as folder:
        with smtp_sink.SmtpSink(Path(folder) / "sink.jsonl") as sink:
            os.environ.update(
                SMTP_HOST=sink.host, SMTP_PORT=str(sink.port), SMTP_SINK_LOG=str(sink.log_path)
            )
            # The ledger remembers sent reports across runs (that is its job); forget this
            # demo's, so that every run sends them again.
            for user_email, period in set(REPORTS):
                with contextlib.suppress(cronbase.EffectNotFoundError):
                    app.effects.forget(effect_key(user_email, period))
            ids = [send_monthly_report.defer(user_email=u, period=p) for u, p in REPORTS]
            # One job at a time, so the duplicate finds the first one done; run side by side,
            # it would find it in progress, fail with EffectInProgress and retry later.
            app.run_worker(burst=True, concurrency=1)
            statuses = [app.jobs.get(job_id).status.value for job_id in ids]
            emails = sink.received()
        app.close()
    print(f"{len(ids)} report jobs: {', '.join(statuses)}")
    print(f"the SMTP sink received {len(emails)} emails:")
    for message in emails:
        print(f"  {message['message_id']} to {', '.join(message['rcpt_tos'])}")
    return 0 if len(emails) == len(set(REPORTS)) else 1


if __name__ == "__main__":
    sys.exit(main())
