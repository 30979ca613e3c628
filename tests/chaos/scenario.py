"""One chaos scenario's world: a PostgreSQL cluster of its own with a migrated database (behind a
pgbouncer if asked), worker processes of ``chaos_app`` to kill, stop and restart, the test's own
connection (which outlives the server's restarts), and the figures it reports.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, LiteralString

import psycopg
import pytest

import cronbase
from tests.chaos.chaos_app import CHAOS_TABLES, HEALTHY_TASKS, LEASE, TRANSACTION_EVERY, make_app
from tests.chaos.figures import Figures
from tests.conftest import wait_for
from tests.e2e.harness import WorkerProcess, WorkerProcesses
from tests.servers import PgBouncer, PostgresCluster

POLL_SECONDS = 0.2
# A drain that makes no progress for this long is given up; its figures then show what was lost.
STALL_SECONDS = 60.0
# How long the test's own connection waits for a restarting server.
RECONNECT_SECONDS = 60.0
ENQUEUE_BATCH = 5000
# How long past its lease a stopped worker's job may stay running before it counts as unreaped
# (the reapers run every 0.2 s).
REAP_GRACE = timedelta(seconds=5)
# How long hold_success makes one job's success write take on the server.
HOLD_SECONDS = 2
# A worker to be killed or stopped mid-drain is first given this long to hold BUSY jobs.
BUSY = 4
BUSY_SECONDS = 5.0
# Lines of a worker's log shown when a test fails: its warnings and errors, then its last lines.
LOG_LINES = 40


def chaos_scale() -> float:
    """CRONBASE_CHAOS_SCALE: 1 (the default) is full scale, 0.1 is CI's."""
    text = os.environ.get("CRONBASE_CHAOS_SCALE", "1")
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value <= 10:
        raise ValueError(
            f"CRONBASE_CHAOS_SCALE must be a number above 0 and at most 10 (1 = full scale, "
            f"0.1 = CI's reduced one), got {text!r}"
        )
    return value


SCALE = chaos_scale()


def scaled(full: int, *, least: int) -> int:
    """``full`` at scale 1, proportionally less (at least ``least``) below."""
    return max(least, round(full * SCALE))


class Observer:
    """The test's autocommit connection, connected again after the server restarted."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: psycopg.Connection[Any] | None = None

    def rows(
        self, query: LiteralString, params: Sequence[Any] | None = None
    ) -> list[tuple[Any, ...]]:
        deadline = time.monotonic() + RECONNECT_SECONDS
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = psycopg.connect(self.url, autocommit=True, connect_timeout=5)
                cur = self._conn.execute(query, params)
                return cur.fetchall() if cur.description else []
            except psycopg.OperationalError:
                self.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(POLL_SECONDS)

    def value(self, query: LiteralString, params: Sequence[Any] | None = None) -> Any:
        """The first column of the first row."""
        rows = self.rows(query, params)
        assert rows, f"no row from {query}"
        return rows[0][0]

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(psycopg.Error):
                self._conn.close()
        self._conn = None


class ChaosWorkers(WorkerProcesses):
    """WorkerProcesses whose logs, shown when a test fails, are cut to what matters: a drain of
    20,000 jobs logs every claim."""

    def report(self, process: WorkerProcess) -> None:
        lines = process.log().splitlines()
        notable = [line for line in lines if " WARNING " in line or " ERROR " in line]
        print(f"---- worker {process.name} (exit {process.popen.returncode}), {process.log_path}")
        print("\n".join([*notable[-LOG_LINES:], "...", *lines[-5:]]))


class Scenario:
    """A cluster, its database ``chaos`` (migrated, with the chaos tables), worker processes."""

    def __init__(
        self,
        name: str,
        cluster: PostgresCluster,
        folder: Path,
        *,
        bouncer: PgBouncer | None = None,
        schedule: bool = False,
    ) -> None:
        self.figures = Figures(name, SCALE)
        self.cluster = cluster
        self.direct = cluster.create_database("chaos")
        migrator = cronbase.App(self.direct)
        migrator.migrate()
        migrator.close()
        self.db = Observer(self.direct)
        self.db.rows(CHAOS_TABLES)
        # Workers and the test's enqueues go through the pooler when there is one.
        self.url = bouncer.url("chaos") if bouncer else self.direct
        pooler = "transaction" if bouncer else None
        env = {"CRONBASE_POOLER": "transaction"} if bouncer else {}
        if schedule:
            env["CHAOS_SCHEDULE"] = "1"
        self.app = make_app(self.url, pooler=pooler)
        folder.mkdir(parents=True, exist_ok=True)
        self.workers = ChaosWorkers(self.url, folder, module="tests.chaos.chaos_app", env=env)
        self.live: dict[str, WorkerProcess] = {}
        self.killed: set[int] = set()
        self.stopped: set[int] = set()
        # (job id, attempt, worker, when) of the attempts a SIGSTOPped worker held.
        self.held: list[tuple[int, int, str, datetime]] = []
        # Jobs a stopped worker held that no reaper could take back while it was stopped.
        self.unreaped: list[str] = []
        self._generation: dict[str, int] = {}
        self._started = time.monotonic()
        self._background: list[threading.Thread] = []
        self._errors: list[BaseException] = []
        self._held_n = -1

    # -- workers ---------------------------------------------------------------------------------

    def start(self, slot: str) -> WorkerProcess:
        """A new worker process in ``slot`` (A, B, ...); named A1, then A2 after a restart."""
        self._generation[slot] = self._generation.get(slot, 0) + 1
        process = self.workers.start(f"{slot}{self._generation[slot]}")
        self.live[slot] = process
        return process

    def start_all(self, slots: str) -> None:
        self.wait_registered([self.start(slot) for slot in slots])

    def wait_registered(self, processes: Sequence[WorkerProcess]) -> None:
        names = [p.name for p in processes]

        def registered() -> bool:
            for process in processes:
                if process.popen.poll() is not None:
                    pytest.fail(f"worker {process.name} exited at start:\n{process.log()}")
            found = self.db.value(
                "SELECT count(*) FROM cronbase.workers WHERE id = ANY(%s)", [names]
            )
            return bool(found == len(names))

        wait_for(registered, timeout=60, what=f"workers {', '.join(names)} to start")

    def wait_busy(self, process: WorkerProcess | None = None) -> int:
        """Wait (a few seconds at most) until ``process`` holds BUSY running jobs (or, with
        none, every live worker does on average), so a blow lands on work in flight: a worker's
        jobs come in bursts, a claim of up to its concurrency, then fewer as they finish. How
        many running jobs there were."""
        names = [process.name] if process else [p.name for p in self.live.values()]
        deadline = time.monotonic() + BUSY_SECONDS
        while True:
            holds = int(
                self.db.value(
                    "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'running' "
                    "AND locked_by = ANY(%s)",
                    [names],
                )
            )
            if holds >= BUSY * len(names) or time.monotonic() > deadline:
                return holds
            time.sleep(POLL_SECONDS / 10)

    def kill(self, slot: str, *, replace: bool = True, when_busy: bool = False) -> None:
        """SIGKILL the worker in ``slot`` (once it is busy, if asked); start another in its
        place unless told not to."""
        if when_busy:
            holds = self.wait_busy(self.live[slot])
            notes = self.figures.notes
            notes["held_when_killed"] = notes.get("held_when_killed", 0) + holds
        process = self.live.pop(slot)
        process.send(signal.SIGKILL)
        process.wait_exit()
        self.killed.add(process.pid)
        self.figures.kills += 1
        if replace:
            self.start(slot)

    def stop_past_lease(
        self, slot: str | None = None, *, process: WorkerProcess | None = None
    ) -> None:
        """SIGSTOP the worker in ``slot`` once it is busy (or ``process`` at once); SIGCONT it
        once every job it held has had its lease expire and been reaped by the others (or has
        been past its lease for REAP_GRACE: those are kept in ``self.unreaped``, with what held
        them). The wait runs in a thread, so the drain (and its other chaos) goes on meanwhile;
        :meth:`drain` waits for it. What the worker held is kept in ``self.held`` for
        :meth:`check_fenced`."""
        notes = self.figures.notes
        if process is None:
            process = self.live[slot or next(iter(self.live))]
            self.wait_busy(process)
        process.send(signal.SIGSTOP)
        self.stopped.add(process.pid)
        stopped_at = self.db_now()
        held = self.db.rows(
            "SELECT id, attempts FROM cronbase.jobs_all WHERE status = 'running' AND locked_by = %s",
            [process.name],
        )
        self.held += [(job_id, attempt, process.name, stopped_at) for job_id, attempt in held]
        self.figures.stops += 1
        notes["held_when_stopped"] = notes.get("held_when_stopped", 0) + len(held)

        def resume_when_reaped() -> None:
            db = Observer(self.direct)  # the test's connection is the drain loop's
            name = [process.name]

            def reaped_or_overdue() -> bool:
                # True once nothing it held is running, or what is still running has been past
                # its lease for longer than the reapers (every 0.2 s) could take.
                return not db.value(
                    "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'running' "
                    "AND locked_by = %s AND locked_until > now() - %s::interval",
                    [process.name, REAP_GRACE],
                )

            try:
                wait_for(reaped_or_overdue, timeout=60, what=f"the leases of {process.name}")
                unreaped = db.rows(
                    "SELECT id, task, attempts, round(extract(epoch FROM now() - locked_until)) "
                    "FROM cronbase.jobs_all WHERE status = 'running' AND locked_by = %s",
                    name,
                )
                if unreaped:
                    self.unreaped += describe_unreaped(db, process.name, unreaped)
                    notes["unreaped_at_resume"] = len(self.unreaped)
                stopped_for = (db.value("SELECT now()") - stopped_at).total_seconds()
                notes.setdefault("stopped_s", []).append(round(stopped_for, 1))
            finally:
                process.send(signal.SIGCONT)
                self.stopped.discard(process.pid)
                db.close()

        self._in_background(resume_when_reaped)

    def hold_success(self, n: int) -> None:
        """Make the write of ``work_in_transaction(n)``'s success (complete_jobs, in the job's
        transaction()) take HOLD_SECONDS on the server, in its first attempt: long enough to
        SIGSTOP its worker between that write and its COMMIT (see :meth:`stop_holder`). A
        success moves the running row to the history (migration 0015): the trigger is on that
        DELETE (a retry or a snooze is an UPDATE and is not held)."""
        self.db.rows(
            "CREATE FUNCTION chaos_hold_success() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN PERFORM pg_sleep({HOLD_SECONDS}); RETURN OLD; END $$"
        )
        self.db.rows(
            "CREATE TRIGGER chaos_hold_success BEFORE DELETE ON cronbase.jobs FOR EACH ROW "
            "WHEN (OLD.task = 'work_in_transaction' AND OLD.attempts = 1 "
            f"AND OLD.payload->>'n' = '{int(n)}' AND OLD.status = 'running') "
            "EXECUTE FUNCTION chaos_hold_success()"
        )
        self._held_n = n

    def stop_holder(self) -> None:
        """Once the held success write of :meth:`hold_success` runs, SIGSTOP its worker (which
        waits for the statement's result), then as :meth:`stop_past_lease`. When the write ends,
        its transaction stays open with the job's row locked."""

        def holder() -> str | None:
            rows = self.db.rows(
                "SELECT j.locked_by FROM pg_stat_activity a, cronbase.jobs j "
                "WHERE a.datname = current_database() AND a.wait_event = 'PgSleep' "
                "AND j.task = 'work_in_transaction' AND j.payload->>'n' = %s",
                [str(self._held_n)],
            )
            return rows[0][0] if rows else None

        name = wait_for(holder, timeout=120, what=f"the held success of job n={self._held_n}")
        process = next(p for p in self.live.values() if p.name == name)
        self.stop_past_lease(process=process)
        self.figures.notes["stopped_holding_success"] = name

    def _in_background(self, action: Callable[[], None]) -> None:
        def run() -> None:
            try:
                action()
            except BaseException as exc:  # pytest.fail raises a BaseException
                self._errors.append(exc)

        thread = threading.Thread(target=run, name="chaos-background")
        thread.start()
        self._background.append(thread)

    def _join_background(self) -> None:
        for thread in self._background:
            thread.join(120)
        self._background.clear()
        if self._errors:
            raise self._errors[0]

    def check_fenced(self) -> int:
        """How many attempts a stopped worker held had their result written late anyway.

        Each job it held must succeed in a later attempt (the stopped one was reaped, its
        result fenced out), unless that attempt's success was already on its way to the server
        at the SIGSTOP (committed within a second of it, long before its lease ran out), or the
        job was one no reaper could take back (``self.unreaped``, reported on its own).
        """
        unreaped = {int(line.split()[1]) for line in self.unreaped}
        late = 0
        for job_id, attempt, worker, stopped_at in self.held:
            status, attempts, locked_by, finished_at = self.db.rows(
                "SELECT status, attempts, locked_by, finished_at FROM cronbase.jobs_all WHERE id = %s",
                [job_id],
            )[0]
            if status != "succeeded" or attempts > attempt or job_id in unreaped:
                continue  # not succeeded: counted as lost; a later attempt: fenced as it should
            assert locked_by == worker
            if finished_at - stopped_at > timedelta(seconds=1):
                late += 1
        self.figures.notes["late_results_written"] = late
        return late

    def restart_postgres(self) -> None:
        """An immediate stop (no checkpoint; crash recovery at start) and a start, once the
        workers are busy: every connection breaks, the workers keep running."""
        running = self.wait_busy()
        notes = self.figures.notes
        notes["running_at_restarts"] = notes.get("running_at_restarts", 0) + running
        self.cluster.restart("immediate")
        self.figures.restarts += 1

    def exited(self) -> list[WorkerProcess]:
        """Workers that ended though nobody killed them."""
        return [
            p
            for p in self.workers.started
            if p.popen.poll() is not None and p.pid not in self.killed
        ]

    # -- jobs ------------------------------------------------------------------------------------

    def enqueue(self, count: int, *, first: int = 0) -> list[int]:
        """``count`` healthy jobs, n from ``first``: ``work(n)``, and ``work_in_transaction(n)``
        for every TRANSACTION_EVERY-th n; their ids."""
        ids: list[int] = []
        for start in range(first, first + count, ENQUEUE_BATCH):
            numbers = range(start, min(start + ENQUEUE_BATCH, first + count))
            for task, every in [("work", False), ("work_in_transaction", True)]:
                chosen = [n for n in numbers if (n % TRANSACTION_EVERY == 0) == every]
                ids += self.app.get_task(task).defer_many([{"n": n} for n in chosen])
        self.figures.jobs += count
        return ids

    def succeeded(self) -> int:
        """Healthy jobs succeeded (poison rows never do)."""
        return int(
            self.db.value(
                "SELECT count(*) FROM cronbase.jobs_all WHERE task = ANY(%s) AND status = 'succeeded'",
                [HEALTHY_TASKS],
            )
        )

    def drain(
        self,
        total: int,
        actions: Sequence[tuple[float, Callable[[], None]]] = (),
        *,
        done: Callable[[], int] | None = None,
    ) -> None:
        """Wait until ``done()`` (default: healthy jobs succeeded) reaches ``total``, running each
        action once the progress passes its fraction; stop waiting after STALL_SECONDS without
        progress. The drain time counts from the scenario's start (jobs enqueued after it)."""
        count = done or self.succeeded
        pending = sorted(actions, key=lambda action: action[0])
        fired: list[str] = []
        last, last_change = -1, time.monotonic()
        while True:
            now_done = count()
            while pending and now_done >= pending[0][0] * total:
                fired.append(f"{100 * now_done / total:.0f}%")
                pending.pop(0)[1]()
            if now_done >= total and not pending:
                break
            if now_done != last:
                last, last_change = now_done, time.monotonic()
            elif time.monotonic() - last_change > STALL_SECONDS:
                self.figures.notes["stalled_at"] = f"{now_done}/{total}"
                break
            time.sleep(POLL_SECONDS)
        self.figures.drain_seconds = round(time.monotonic() - self._started, 1)
        self._join_background()
        if fired:
            self.figures.notes["chaos_at"] = ",".join(fired)

    def begin(self) -> None:
        """The drain time counts from here."""
        self._started = time.monotonic()

    def tally(self, ids: Sequence[int], *, missing: int = 0) -> None:
        """Lost (of the jobs ``ids``, plus ``missing`` jobs that should exist and do not),
        re-runs, duplicate and missing effects; stuck jobs."""
        ids = list(ids)
        f = self.figures
        succeeded = self.db.value(
            "SELECT count(*) FROM cronbase.jobs_all WHERE id = ANY(%s) AND status = 'succeeded'",
            [ids],
        )
        f.lost = len(ids) - int(succeeded) + missing
        f.reruns = int(
            self.db.value(
                "SELECT count(*) - count(DISTINCT job_id) FROM chaos_runs WHERE job_id = ANY(%s)",
                [ids],
            )
        )
        f.notes["extra_attempts"] = int(
            self.db.value(
                "SELECT coalesce(sum(attempts - 1), 0) FROM cronbase.jobs_all WHERE id = ANY(%s)",
                [ids],
            )
        )
        f.duplicate_effects = int(
            self.db.value("SELECT count(*) - count(DISTINCT key) FROM chaos_effects")
        )
        # A job that succeeded without its effect lost the effect (its key as chaos_app makes it).
        f.missing_effects = int(
            self.db.value(
                """
                SELECT count(*) FROM cronbase.jobs_all j
                WHERE j.id = ANY(%s) AND j.status = 'succeeded' AND NOT EXISTS (
                    SELECT FROM chaos_effects e
                    WHERE e.key = CASE j.task
                        WHEN 'work' THEN 'job:' || (j.payload->>'n')
                        WHEN 'work_in_transaction' THEN 'tx:' || (j.payload->>'n')
                        ELSE 'slot:' || (j.payload->>'scheduled_at') END)
                """,
                [ids],
            )
        )
        # Running, and either one of ours (all should be done) or past its lease by far more
        # than the reapers (every 0.2 s) would let it be.
        f.stuck = int(
            self.db.value(
                "SELECT count(*) FROM cronbase.jobs_all WHERE status = 'running' "
                "AND (id = ANY(%s) OR locked_until < now() - %s::interval)",
                [ids, LEASE + timedelta(seconds=5)],
            )
        )

    def finish(self, ids: Sequence[int], *, missing: int = 0) -> None:
        """Tally, stop the workers (SIGTERM: each must exit 0), save the figures."""
        self.tally(ids, missing=missing)
        died = self.exited()
        live = [p for p in self.live.values() if p.popen.poll() is None]
        for process in live:
            process.send(signal.SIGTERM)
        unclean = [p for p in live if p.wait_exit(timeout=60) != 0]
        self.figures.worker_exits = len(died) + len(unclean)
        if died or unclean:
            self.figures.notes["exited"] = ",".join(
                f"{p.name}:{p.popen.returncode}" for p in [*died, *unclean]
            )
        self.figures.save()

    def check(self) -> None:
        """The four zeros every scenario promises."""
        f = self.figures
        logs = f"(worker logs in {self.workers.folder})"
        assert f.lost == 0, f"{f.lost} jobs lost: {f.line()} {logs}"
        assert f.duplicate_effects == 0, f"duplicate effects: {f.line()} {logs}"
        assert f.missing_effects == 0, f"succeeded without their effect: {f.line()} {logs}"
        assert f.stuck == 0, f"jobs stuck running: {f.line()} {logs}"
        assert f.worker_exits == 0, f"workers exited: {f.line()} {logs}"

    def db_now(self) -> datetime:
        now: datetime = self.db.value("SELECT now()")
        return now

    def close(self) -> None:
        self.workers.__exit__(None, None, None)  # SIGKILL, which also ends a SIGSTOP
        for thread in self._background:
            thread.join(120)
        self.app.close()
        self.db.close()


def describe_unreaped(db: Observer, worker: str, rows: list[tuple[Any, ...]]) -> list[str]:
    """One line per job a stopped worker still holds past its lease: its task, whether its row
    is locked (by an open transaction of the stopped worker: the reapers skip locked rows), and
    what the server's idle-in-transaction sessions last ran."""
    ids = [job_id for job_id, *_ in rows]
    # In autocommit: the locks it takes are released at once.
    free = {
        job_id
        for (job_id,) in db.rows(
            "SELECT id FROM cronbase.jobs_all WHERE id = ANY(%s) FOR UPDATE SKIP LOCKED", [ids]
        )
    }
    sessions = db.rows(
        "SELECT pid, round(extract(epoch FROM now() - state_change)), "
        "regexp_replace(left(query, 120), '\\s+', ' ', 'g') FROM pg_stat_activity "
        "WHERE state LIKE 'idle in transaction%%' AND datname = current_database()"
    )
    idle = "; ".join(
        f"pid {pid} idle in transaction {age}s after: {query}" for pid, age, query in sessions
    )
    return [
        f"job {job_id} ({task}, attempt {attempt}) of stopped {worker}: running {past}s past its "
        f"lease, row {'free' if job_id in free else 'locked'}; {idle or 'no idle transaction'}"
        for job_id, task, attempt, past in rows
    ]
