"""examples/celery_port: a Celery project (before/) and its port to cronbase (after/) end the same
way, and the port differs from the original only in its imports and in lines marked
``# cronbase:``, so "port by changing the imports" stays true as both change.

Each project runs in a child process (``python -m tests.integration.test_celery_port MODE``):
the original in Celery's eager mode (no broker), so that Celery's global state (its current
app, its shared tasks) never reaches this process; the port against the test database, with a
burst worker run in the child, whose fakes (mailbox, gateway) are then the worker's. The port
also runs by the command: ``cronbase --app examples.celery_port.after.celery_app:app worker
--burst`` and ``tick``, and as the example's README runs it, a worker beside ``main()``.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import json
import os
import re
import signal
import subprocess
import sys
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any
from zoneinfo import ZoneInfo

import psycopg

from cronbase.schedule.cron import Cron
from tests.e2e.harness import python_path
from tests.e2e.test_cli import CRONBASE, cli_env, cronbase, ok

REPO = Path(__file__).resolve().parents[2]
PORT = REPO / "examples" / "celery_port"
GUIDE = REPO / "docs" / "guides" / "from-celery.md"
RESULT = "RESULT "  # the child's last line: this, then its observations as JSON
DAY = "2026-11-27"
# Friday 27 November 2026, 12:00 in Berlin: the sales report's next slots are Monday's and
# Tuesday's 06:30 there, in Celery's reading of its crontab and in cronbase's of the schedule.
FRIDAY = datetime(2026, 11, 27, 11, 0, tzinfo=UTC)
REPORTS = [datetime(2026, 11, 30, 5, 30, tzinfo=UTC), datetime(2026, 12, 1, 5, 30, tzinfo=UTC)]
# The one warning the port prints, at every start: beat's interval entry becomes a clock-aligned
# cron schedule (the README says why the example keeps it rather than writing the crontab).
INTERVAL_WARNING = (
    "beat_schedule 'sweep-abandoned-carts': every datetime.timedelta(seconds=900) fires at "
    "clock-aligned slots (cron '0 */15 * * * *'), not counted from when beat started"
)


def run_child(mode: str, env: dict[str, str]) -> dict[str, Any]:
    """Run one of this module's child modes (the end of the file) and read what it observed."""
    result = subprocess.run(
        [sys.executable, "-m", "tests.integration.test_celery_port", mode],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    last = result.stdout.splitlines()[-1]
    assert last.startswith(RESULT), result.stdout
    observed: dict[str, Any] = json.loads(last[len(RESULT) :])
    return observed


# -- what both projects must show --------------------------------------------------------------

OUTCOMES = {
    # The chain: the gateway timed out twice (autoretry_for), the mail server greylisted the
    # first try (self.retry), and the last step's result is the chain's.
    "shipped": "order 7 shipped (TRK000007): mailed after 1 retries",
    # An exception autoretry_for does not name fails the task at once; get(propagate=False)
    # returns it, of the class the task raised.
    "declined": "PaymentDeclined: order 8: cannot charge 0 cents",
    "total": 2750,
    # The chord: the callback got the list of the group's results.
    "day": f"{DAY}: 3 orders, 9750 cents",
}
STATES = {
    "shipped": {"state": "SUCCESS", "ready": True, "ok": True},
    "declined": {"state": "FAILURE", "ready": True, "ok": False},
    "total": {"state": "SUCCESS", "ready": True, "ok": True},
    "day": {"state": "SUCCESS", "ready": True, "ok": True},
}
MAILBOX = ["ada@example.com: order 7 shipped (TRK000007)"]
TRIES = {"charge 7": 3, "mail ada@example.com": 2}


def original_env() -> dict[str, str]:
    """The original needs no database: the repository (and a worktree's src) on the path."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("DATABASE_URL")}
    return {**env, "PYTHONPATH": python_path()}


def test_the_celery_original_in_eager_mode() -> None:
    observed = run_child("before", original_env())
    assert observed["outcomes"] == OUTCOMES
    assert observed["states"] == STATES
    assert observed["mailbox"] == MAILBOX
    assert observed["tries"] == TRIES
    # Eager mode runs a countdown at once: the review request ran with the order.
    assert observed["reviews"] == ["review of order 7 requested from ada@example.com"]
    assert observed["beat"] == {
        "nightly-sales-report": ["shop.sales_report", [t.isoformat() for t in REPORTS]],
        "sweep-abandoned-carts": ["shop.sweep_carts", 900.0],
    }


def test_the_port_on_cronbase_ends_as_the_original(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    observed = run_child("after", cli_env(database_url))
    assert observed["outcomes"] == OUTCOMES
    assert observed["states"] == STATES
    assert observed["mailbox"] == MAILBOX
    assert observed["tries"] == TRIES
    assert observed["warnings"] == [INTERVAL_WARNING]

    # The retries as cronbase ran them: each a failed attempt (the job reads RETRY), then the
    # job waits its countdown: self.retry's 5 s, and retry_backoff's 0-1 s, then 0-2 s (full
    # jitter: a wait of 0 is retried within the same burst, so it is not seen waiting here).
    attempts = dict(db.execute("SELECT task, attempts FROM cronbase.jobs_all").fetchall())
    assert attempts["shop.charge_card"] == 3
    assert attempts["shop.notify_customer"] == 2
    waits: dict[str, list[float]] = {}
    for task, seconds in observed["waits"]:
        waits.setdefault(task, []).append(seconds)
    assert waits.pop("shop.notify_customer") == [5.0], observed["waits"]
    backoff = waits.pop("shop.charge_card", [])
    assert len(backoff) <= 2, observed["waits"]
    assert all(0 < seconds <= 2 for seconds in backoff), observed["waits"]
    assert not waits, observed["waits"]

    # Routed as task_routes and the task's queue= say; the rest to task_default_queue.
    queues = dict(db.execute("SELECT task, queue FROM cronbase.jobs_all").fetchall())
    assert queues["shop.charge_card"] == "payments"
    assert queues["shop.notify_customer"] == "emails"
    assert queues["shop.ask_for_review"] == "emails"
    assert queues["shop.reserve_stock"] == queues["shop.daily_report"] == "default"

    # countdown= is honoured (eager mode ran it at once): the review request waits 3 days.
    review = db.execute(
        "SELECT status, run_at - created_at FROM cronbase.jobs_all "
        "WHERE task = 'shop.ask_for_review'"
    ).fetchone()
    assert review is not None
    assert review[0] == "queued"
    assert abs(review[1] - timedelta(days=3)) < timedelta(minutes=1)


def assert_beat_is_declared(db: psycopg.Connection[Any]) -> None:
    """beat_schedule as cronbase schedules: the crontab in the app's timezone, the interval as
    the cron expression of its period; the slots agree with Celery's entries."""
    rows = db.execute(
        "SELECT key, task, cron, tz, source FROM cronbase.schedules ORDER BY key"
    ).fetchall()
    assert rows == [
        ("nightly-sales-report", "shop.sales_report", "30 6 * * mon-fri", "Europe/Berlin", "code"),
        ("sweep-abandoned-carts", "shop.sweep_carts", "0 */15 * * * *", "Europe/Berlin", "code"),
    ]
    reports = Cron.parse(rows[0][2], rows[0][3]).iter_after(FRIDAY)
    assert [next(reports), next(reports)] == REPORTS
    sweeps = Cron.parse(rows[1][2], rows[1][3]).iter_after(FRIDAY)
    assert next(sweeps) - next(sweeps) == -timedelta(minutes=15)


def test_the_command_runs_the_port_and_declares_its_beat_schedule(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    app = "examples.celery_port.after.celery_app:app"  # the Celery object, as Celery's -A takes it
    day = run_child("close-day", cli_env(database_url))["id"]
    worker = ok(cronbase(database_url, "--app", app, "worker", "--burst"))
    row = db.execute("SELECT status, result FROM cronbase.jobs_all WHERE id = %s", [int(day)])
    assert row.fetchone() == ("succeeded", OUTCOMES["day"]), worker
    totals = db.execute(
        "SELECT count(*) FROM cronbase.jobs_all "
        "WHERE task = 'shop.order_total' AND status = 'succeeded'"
    ).fetchone()
    assert totals == (3,)

    # A burst worker runs what is due and fires no schedule; a long-running worker or a tick
    # declares beat_schedule (once per start, as Celery beat reads it), saying so of the interval.
    tick = cronbase(database_url, "--app", app, "tick", "--no-run")
    ok(tick)
    assert "CeleryCompatibilityWarning: " + INTERVAL_WARNING in tick.stderr
    assert_beat_is_declared(db)


def test_the_readme_run_prints_what_the_original_prints(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    """As examples/celery_port/README.md runs the port: a worker, and ``python -m
    examples.celery_port.after.orders`` beside it, which waits for each outcome (the retries'
    countdowns are waited for here, a few seconds)."""
    env = cli_env(database_url)
    original = run_child("before-main", original_env())["printed"]
    log_path = tmp_path / "worker.log"
    with log_path.open("w") as log:
        worker = subprocess.Popen(
            [str(CRONBASE), "--app", "examples.celery_port.after.celery_app:app", "worker"],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            printed = subprocess.run(
                [sys.executable, "-m", "examples.celery_port.after.orders"],
                env=env,
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=100,
                check=False,
            )
        finally:
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(timeout=60)
    assert printed.returncode == 0, printed.stdout + printed.stderr
    assert code == 0, log_path.read_text()
    assert printed.stdout.splitlines() == original
    assert len(original) == 4
    # A long-running worker declares beat_schedule as it starts.
    assert INTERVAL_WARNING in log_path.read_text()
    assert_beat_is_declared(db)


# -- the diff: imports, and lines that say why ---------------------------------------------------

_IMPORT = re.compile(
    r"^(from celery[\w.]* import |import celery\b|from cronbase\.contrib\.celery\b)"
)
MARK = "# cronbase:"


def changed_hunks(before: list[str], after: list[str]) -> list[tuple[list[str], list[str]]]:
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    return [
        (before[i1:i2], after[j1:j2])
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag != "equal"
    ]


def test_the_port_differs_only_in_imports_and_marked_lines() -> None:
    names = sorted(p.name for p in (PORT / "before").glob("*.py"))
    assert names == sorted(p.name for p in (PORT / "after").glob("*.py"))
    assert {"celery_app.py", "tasks.py", "orders.py"} <= set(names)
    marked = 0
    for name in names:
        before = (PORT / "before" / name).read_text("utf-8").splitlines()
        after = (PORT / "after" / name).read_text("utf-8").splitlines()
        assert not any("cronbase" in line for line in before), f"before/{name} mentions cronbase"
        assert not any(re.match(r"(from|import) celery\b", line) for line in after), name
        for removed, added in changed_hunks(before, after):
            hunk = (
                f"before/{name} -> after/{name}:\n-"
                + "\n-".join(removed)
                + "\n+"
                + "\n+".join(added)
            )
            said_why = [line for line in added if MARK in line]
            marked += len(said_why)
            for line in added:
                assert _IMPORT.match(line) or MARK in line or not line.strip(), hunk
            # A line of the original that is not an import goes only where a mark says why.
            if any(line.strip() and not _IMPORT.match(line) for line in removed):
                assert said_why, hunk
    assert 0 < marked <= 6, "the port should stay a change of imports, with few exceptions"


def port_diff() -> str:
    """``diff -U0 before after``, file by file, as the guide shows it."""
    lines: list[str] = []
    for name in sorted(p.name for p in (PORT / "before").glob("*.py")):
        before = (PORT / "before" / name).read_text("utf-8").splitlines()
        after = (PORT / "after" / name).read_text("utf-8").splitlines()
        lines += difflib.unified_diff(
            before, after, f"before/{name}", f"after/{name}", n=0, lineterm=""
        )
    return "\n".join(lines) + "\n"


def test_the_guide_shows_the_whole_diff() -> None:
    page = GUIDE.read_text("utf-8")
    shown = re.search(
        r"^<!-- output: tests/integration/test_celery_port.py -->\n```diff\n(.*?)^```$",
        page,
        re.MULTILINE | re.DOTALL,
    )
    assert shown is not None, f"no diff block in {GUIDE}"
    assert shown[1].startswith("--- before/celery_app.py")
    assert shown[1] == port_diff()


def test_the_guide_s_inline_test_runs_the_port_as_eager_mode_ran_the_original() -> None:
    """The guide's replacement for task_always_eager: cronbase's inline mode, no database, the
    retries run at once."""
    ran = run_child("inline", original_env())["jobs"]
    assert ran == [
        ["shop.reserve_stock", "succeeded", 1],
        ["shop.charge_card", "succeeded", 3],
        ["shop.ship_order", "succeeded", 1],
        ["shop.notify_customer", "succeeded", 2],
        ["shop.ask_for_review", "succeeded", 1],  # its countdown not waited for
    ]


# -- the children ------------------------------------------------------------------------------


def describe(outcome: object) -> object:
    """A result as JSON, an exception as ``Class: message`` (its class name, as both show it)."""
    if isinstance(outcome, BaseException):
        return f"{type(outcome).__name__}: {outcome}"
    return outcome


def place_orders(orders: ModuleType) -> dict[str, str]:
    """The call sites, as the web app calls them: each gives a task id to follow."""
    return {
        "shipped": orders.place_order(7, "ada@example.com", cents=2750),
        "declined": orders.charge_again(8, cents=0),
        "total": orders.order_total.delay(7).id,
        "day": orders.close_day(DAY, [7, 9, 11]),
    }


def observe(orders: ModuleType, services: ModuleType, ids: dict[str, str]) -> dict[str, Any]:
    return {
        "outcomes": {name: describe(orders.outcome(id_, timeout=30)) for name, id_ in ids.items()},
        "states": {name: orders.order_status(id_) for name, id_ in ids.items()},
        "mailbox": services.mailbox,
        "tries": dict(services.tries),
    }


# Celery's eager mode: each call runs at once, here; results are kept in memory so that
# AsyncResult(id) finds them, as a result backend would; a failure is kept, not raised.
EAGER = {
    "task_always_eager": True,
    "task_eager_propagates": False,
    "task_store_eager_result": True,
    "broker_url": "memory://",
    "result_backend": "cache+memory://",
}


def celery_fires(schedule: Any, zone: ZoneInfo) -> list[str]:
    """The next two minutes after FRIDAY that Celery's own expansion of a crontab's fields
    matches (a minute by minute scan; no DST change falls in it)."""
    moment, found = FRIDAY.astimezone(zone), []
    while len(found) < 2:
        moment += timedelta(minutes=1)
        if (
            moment.minute in schedule.minute
            and moment.hour in schedule.hour
            and moment.isoweekday() % 7 in schedule.day_of_week  # Celery's Sunday is 0
            and moment.day in schedule.day_of_month
            and moment.month in schedule.month_of_year
        ):
            found.append(moment.astimezone(UTC).isoformat())
    return found


def run_before() -> dict[str, Any]:
    from celery.schedules import crontab
    from celery.signals import task_success

    from examples.celery_port.before.celery_app import app

    app.conf.update(EAGER)
    from examples.celery_port.before import orders, services

    reviews: list[str] = []

    def succeeded(sender: Any, result: Any, **_: Any) -> None:
        if sender.name == "shop.ask_for_review":
            reviews.append(result)

    task_success.connect(succeeded, weak=False)
    ids = place_orders(orders)
    observed = observe(orders, services, ids)
    observed["reviews"] = reviews
    beat: dict[str, Any] = {}
    for key, entry in app.conf.beat_schedule.items():
        when = entry["schedule"]
        if isinstance(when, crontab):
            beat[key] = [entry["task"], celery_fires(when, ZoneInfo(app.conf.timezone))]
        else:
            beat[key] = [entry["task"], when.total_seconds()]
    observed["beat"] = beat
    return observed


def run_after() -> dict[str, Any]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from examples.celery_port.after import orders, services
        from examples.celery_port.after.celery_app import app

        ids = place_orders(orders)
        jobs = app.cronbase_app.jobs  # the finalized App the command would run
        waits: list[tuple[str, float]] = []
        for _ in range(10):  # bounded: three retries are expected
            app.cronbase_app.run_worker(burst=True)
            waiting = jobs.list(status="failed")
            if not waiting:
                break
            for job in waiting:
                # How long the job was told to wait after its failed attempt; then, as an
                # operator's "retry now", run it without waiting (a burst worker would not).
                ended = jobs.attempts(job.id)[-1].finished_at
                assert ended is not None
                waits.append((job.task, (job.run_at - ended).total_seconds()))
                jobs.retry(job.id)
        observed = observe(orders, services, ids)
    observed["waits"] = waits
    # Every warning, as pytest's filterwarnings=error would see them: the port's must be known.
    observed["warnings"] = sorted({str(w.message) for w in caught})
    return observed


def run_before_main() -> dict[str, Any]:
    """What the original's ``main()`` prints, eagerly."""
    from examples.celery_port.before.celery_app import app

    app.conf.update(EAGER)
    from examples.celery_port.before import orders

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        orders.main()
    return {"printed": printed.getvalue().splitlines()}


def run_inline() -> dict[str, Any]:
    """The guide's inline test, on the example (inline mode needs no database)."""
    import cronbase.testing
    from examples.celery_port.after import orders, tasks
    from examples.celery_port.after.celery_app import app

    with cronbase.testing.inline(app.cronbase_app, retries=True) as run:
        orders.place_order(7, "ada@example.com", cents=2750)
    [mail] = run.jobs_of(tasks.notify_customer.name)
    assert (mail.status, mail.attempts) == ("succeeded", 2)
    return {"jobs": [[job.task, job.status, job.attempts] for job in run.jobs]}


def close_day() -> dict[str, Any]:
    from examples.celery_port.after import orders

    return {"id": orders.close_day(DAY, [7, 9, 11])}


if __name__ == "__main__":
    modes = {
        "before": run_before,
        "before-main": run_before_main,
        "after": run_after,
        "inline": run_inline,
        "close-day": close_day,
    }
    print(RESULT + json.dumps(modes[sys.argv[1]]()))
