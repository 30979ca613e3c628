"""examples/schedules.py: tasks that run on a schedule.

Run them from crontab with ``cronbase tick --app examples.schedules:app`` every minute, or let a
long-running ``cronbase worker --app examples.schedules:app`` fire them.
"""

from datetime import datetime

import cronbase

app = cronbase.App()


# Declared in code: upserted into cronbase.schedules whenever a worker or a tick starts.
@app.periodic(cron="0 2 * * *", tz="Europe/Berlin", key="nightly-cleanup")
@app.task(queue="maintenance")
def cleanup(scheduled_at: datetime) -> None:
    print(f"cleaning up for the slot of {scheduled_at.isoformat()}")


# Scheduled at run time, per user: app.schedules.add("send_weekly_report", ...).
@app.task
def send_weekly_report(user_id: int, scheduled_at: datetime) -> None:
    print(f"weekly report for user {user_id}, slot {scheduled_at.isoformat()}")
