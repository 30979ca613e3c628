"""examples/invoices.py: the tasks of a small invoicing app."""

from datetime import datetime, timedelta

import cronbase

app = cronbase.App()  # CRONBASE_DATABASE_URL, else DATABASE_URL, else the embedded PostgreSQL


@app.task(queue="emails", max_attempts=10, retry=cronbase.Backoff(base=timedelta(seconds=10)))
def send_invoice(invoice_id: int) -> None:
    print(f"sending invoice {invoice_id}")  # sync handlers run in the worker's thread pool


@app.task
async def refresh_cache(key: str) -> None:
    print(f"refreshing {key}")  # async handlers run on the worker's event loop


@app.task(lease=timedelta(minutes=2), timeout=timedelta(minutes=30))
def weekly_report(team: str) -> None:
    job = cronbase.current_job()  # this job's id, attempt, and progress reporting
    for percent, stage in [(10, "collecting"), (60, "rendering"), (90, "emailing")]:
        job.set_progress(percent, stage=stage)
        print(f"report for {team}: {stage} (attempt {job.attempt})")


@app.task(max_attempts=3, retry=cronbase.Backoff(base=timedelta(minutes=1)))
def charge_card(invoice_id: int) -> None:
    attempt = cronbase.current_job().attempt
    if attempt == 1:  # the payment provider times out the first time, as they do
        raise ConnectionError("payment provider timed out")
    print(f"charged invoice {invoice_id} (attempt {attempt})")


@app.periodic(cron="0 8 * * MON-FRI", tz="Europe/Berlin", key="morning-reminders")
@app.task
def send_reminders(scheduled_at: datetime) -> None:
    print(f"reminders for {scheduled_at:%A %H:%M}")  # the slot's time, in UTC
