"""The workers an operator sees, grouped by host and supervisor (``cronbase worker --processes
N`` registers each of its processes with the supervisor's host:pid): the order app.workers()
gives the command and the dashboard, and the command's table."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from rich.console import Console

import cronbase
from cronbase.cli.workers import workers_table
from cronbase.operations.fleet import group_key
from cronbase.worker import startup

ROWS = """
INSERT INTO cronbase.workers (id, hostname, pid, supervisor, concurrency, started_at, last_seen_at)
VALUES
  -- web-2: a supervisor's three processes, one of them killed (gone) and started again.
  ('web-2:11', 'web-2', 11, 'web-2:10', 4, now() - interval '9 minutes', now() - interval '5 minutes'),
  ('web-2:12', 'web-2', 12, 'web-2:10', 4, now() - interval '8 minutes', now()),
  ('web-2:13', 'web-2', 13, 'web-2:10', 4, now() - interval '1 minute', now()),
  -- web-1: a worker started on its own, and a supervisor's two processes.
  ('web-1:5', 'web-1', 5, NULL, 10, now() - interval '7 minutes', now()),
  ('web-1:21', 'web-1', 21, 'web-1:20', 4, now() - interval '6 minutes', now()),
  ('web-1:22', 'web-1', 22, 'web-1:20', 4, now() - interval '6 minutes' + interval '1 second', now()),
  -- a-host: a supervisor whose processes are all gone (the host is down): last.
  ('a-host:31', 'a-host', 31, 'a-host:30', 4, now() - interval '9 minutes', now() - interval '9 minutes')
"""


def test_workers_come_grouped_by_host_and_supervisor_live_groups_first(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    db.execute(ROWS)
    found = app.workers()
    assert [w.id for w in found] == [
        "web-1:5",  # web-1's workers started on their own
        "web-1:21",  # web-1's supervisor
        "web-1:22",
        "web-2:12",  # web-2's supervisor: live processes first, oldest first
        "web-2:13",
        "web-2:11",
        "a-host:31",  # no live worker in the group
    ]
    assert [group_key(w) for w in found][:4] == [
        ("web-1", None),
        ("web-1", "web-1:20"),
        ("web-1", "web-1:20"),
        ("web-2", "web-2:10"),
    ]
    assert found[-1].supervisor == "a-host:30"
    assert not found[-1].alive
    assert found[0].to_json()["supervisor"] is None
    assert found[1].to_json()["supervisor"] == "web-1:20"


def test_the_workers_table_shows_the_supervisor_and_draws_a_line_between_groups(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    db.execute(ROWS)
    console = Console(width=300, record=True, highlight=False, markup=False)
    console.print(workers_table(app.workers()))
    lines = console.export_text().splitlines()
    rows = [line for line in lines if line.startswith("│")]
    assert [row.split("│")[3].strip() for row in rows] == [
        "-",
        "web-1:20",
        "web-1:20",
        "web-2:10",
        "web-2:10",
        "web-2:10",
        "a-host:30",
    ]
    # A rule between groups (host web-1 alone | web-1:20 | web-2:10 | a-host:30), none inside.
    body = lines[lines.index(next(line for line in lines if line.startswith("┡"))) + 1 : -1]
    assert sum(1 for line in body if line.startswith("├")) == 3


def test_without_supervisors_the_table_has_no_supervisor_column(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    db.execute(
        "INSERT INTO cronbase.workers (id, hostname, pid, concurrency) VALUES ('w', 'h', 1, 2)"
    )
    console = Console(width=300, record=True, highlight=False, markup=False)
    console.print(workers_table(app.workers()))
    assert "supervisor" not in console.export_text()


@pytest.mark.anyio
async def test_a_worker_cancelled_while_it_registers_leaves_no_row(
    app: cronbase.App, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A supervisor's stop before a process has started cancels its start (worker/supervised.py);
    # a row already committed goes too, or `cronbase workers` shows a worker that never ran.
    written = asyncio.Event()
    register = startup._register

    async def register_then_wait(*args: Any) -> None:
        await register(*args)
        written.set()
        await asyncio.sleep(60)  # cancelled here, its row committed

    monkeypatch.setattr(startup, "_register", register_then_wait)
    worker = app.worker(install_signal_handlers=False, schedule=False)
    running = asyncio.create_task(worker.run())
    await asyncio.wait_for(written.wait(), timeout=30)
    assert db.execute("SELECT count(*) FROM cronbase.workers").fetchone() == (1,)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    assert db.execute("SELECT count(*) FROM cronbase.workers").fetchone() == (0,)
