"""``cronbase workers`` as an operator runs it: a live worker process holding a job, and a worker
that was SIGKILLed (its row stays, not alive, its job still in its hands until reaped)."""

from __future__ import annotations

import json
import signal
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
import pytest

from cronbase.db.migrate import LATEST_VERSION
from cronbase.worker.startup import package_version
from tests.conftest import wait_for
from tests.e2e.harness import WorkerProcesses, is_registered, reset_test_tables, set_flag
from tests.e2e.test_cli import cronbase, ok
from tests.e2e.worker_app import make_app

pytestmark = [pytest.mark.slow]


def test_workers_lists_the_live_and_the_gone_with_the_jobs_in_their_hands(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    reset_test_tables(db)
    assert ok(cronbase(database_url, "workers")).strip() == (
        "no workers registered: start one with `cronbase worker`"
    )
    app = make_app(database_url)
    blocking = app.get_task("blocking")
    held = blocking.defer(flag="never")
    with WorkerProcesses(database_url, tmp_path) as workers:
        killed = workers.start("killed", "--concurrency", "3", "--queue", "default")
        wait_for(partial(is_registered, db, "killed"), timeout=60, what="worker killed")
        wait_for(
            lambda: (
                db.execute(
                    "SELECT locked_by FROM cronbase.jobs_all WHERE id = %s", (held,)
                ).fetchone()
                == ("killed",)
            ),
            timeout=60,
            what="the job in the first worker's hands",
        )
        killed.send(signal.SIGKILL)
        killed.wait_exit(timeout=30)
        # Not seen for over a minute, as a killed worker's row is after a while.
        db.execute(
            "UPDATE cronbase.workers SET last_seen_at = now() - interval '5 minutes' "
            "WHERE id = 'killed'"
        )
        live = workers.start("live", "--concurrency", "4")
        wait_for(partial(is_registered, db, "live"), timeout=60, what="worker live")
        second = blocking.defer(flag="release")
        wait_for(
            lambda: (
                db.execute(
                    "SELECT locked_by FROM cronbase.jobs_all WHERE id = %s", (second,)
                ).fetchone()
                == ("live",)
            ),
            timeout=60,
            what="the second job in the live worker's hands",
        )
        listed = {w["id"]: w for w in json.loads(ok(cronbase(database_url, "workers", "--json")))}
        assert set(listed) == {"killed", "live"}
        assert (listed["live"]["alive"], listed["live"]["busy"]) == (True, 1)
        assert listed["live"]["concurrency"] == 4
        assert listed["live"]["jobs"] == [{"id": second, "task": "blocking"}]
        assert listed["live"]["queues"] is None
        assert "blocking" in listed["live"]["tasks"]
        assert listed["live"]["pid"] == live.pid
        # The code it runs (docs/guides/upgrade.md): this checkout's version and migrations.
        assert listed["live"]["schema_version"] == LATEST_VERSION
        assert listed["live"]["version"] == package_version()
        gone = listed["killed"]
        assert (gone["alive"], gone["busy"], gone["queues"]) == (False, 1, ["default"])
        assert gone["jobs"] == [{"id": held, "task": "blocking"}]
        assert gone["heartbeat_age"] >= 299

        table = ok(cronbase(database_url, "workers"))
        assert "alive" in table
        assert "gone" in table
        assert "1/4" in table
        assert f"m{LATEST_VERSION}" in table
        assert "1 worker(s) not seen for over a minute" in table
        set_flag(db, "release")
        live.send(signal.SIGTERM)
        assert live.wait_exit(timeout=60) == 0
    app.close()
