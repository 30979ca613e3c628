"""examples/fastapi_app.py, driven with httpx: its lifespan opens and closes the pools, POST
/orders commits the order and its job before answering, a declined order leaves neither, the
dashboard answers at /jobs-admin (this machine only), and ``uvicorn examples.fastapi_app:api``
serves it all."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import psycopg
import pytest
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from cronbase.dashboard.auth import ENV_PASSWORD, ENV_TOKEN, ENV_USER
from tests.conftest import wait_for
from tests.e2e.harness import after_inherited
from tests.integration.test_sqlalchemy import sqlalchemy_url

REPO = Path(__file__).resolve().parents[2]
MODULE = "examples.fastapi_app"


def url_of(conninfo: str) -> str:
    """The test database as the postgresql:// URL the example reads (libpq's form, no driver)."""
    return sqlalchemy_url(conninfo, "postgresql").render_as_string(hide_password=False)


def jobs(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return db.execute(
        "SELECT id, task, queue, payload FROM cronbase.jobs_all ORDER BY id"
    ).fetchall()


def orders(db: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
    return db.execute("SELECT id, item, amount_cents FROM public.orders ORDER BY id").fetchall()


@pytest.fixture
def example(
    database_url: str, db: psycopg.Connection[Any], monkeypatch: pytest.MonkeyPatch
) -> Iterator[ModuleType]:
    """The example imported afresh on the test database, its orders table not yet created."""
    monkeypatch.setenv("CRONBASE_DATABASE_URL", url_of(database_url))
    for name in (ENV_USER, ENV_PASSWORD, ENV_TOKEN):
        monkeypatch.delenv(name, raising=False)
    db.execute("DROP TABLE IF EXISTS public.orders")  # the lifespan creates it
    sys.modules.pop(MODULE, None)
    module = importlib.import_module(MODULE)
    yield module
    module.app.close()
    sys.modules.pop(MODULE, None)


def committed_at_response_start(
    api: ASGIApp, db: psycopg.Connection[Any], seen: list[list[tuple[Any, ...]]]
) -> ASGIApp:
    """``api``, noting the jobs another connection sees as each response starts: what a client
    holding the answer may rely on."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        async def noting(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen.append(jobs(db))
            await send(message)

        await api(scope, receive, noting)

    return app


def test_orders_commit_with_their_job_a_declined_one_leaves_neither_and_the_job_runs(
    example: ModuleType, db: psycopg.Connection[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    api = example.api
    seen: list[list[tuple[Any, ...]]] = []

    async def scenario() -> tuple[Any, dict[str, int]]:
        transport = httpx.ASGITransport(committed_at_response_start(api, db, seen))
        async with (
            api.router.lifespan_context(api),
            httpx.AsyncClient(transport=transport, base_url="http://localhost") as client,
        ):
            pool = await example.app.async_pool()
            placed = await client.post("/orders", json={"item": "teapot", "amount_cents": 25_00})
            assert placed.status_code == 201, placed.text
            declined = await client.post("/orders", json={"item": "piano", "amount_cents": 900_00})
            assert declined.status_code == 402
            assert declined.json() == {"detail": "card declined for 90000 cents"}
            invalid = await client.post("/orders", json={"item": "kettle"})
            assert invalid.status_code == 422
            page = await client.get("/jobs-admin/jobs")
            assert page.status_code == 200
            assert "send_confirmation" in page.text
            assert not pool.closed
        return pool, placed.json()

    pool, placed = asyncio.run(scenario())
    job = (placed["job_id"], "send_confirmation", "emails", {"order_id": placed["order_id"]})
    # The 201 started only once the order and its job were committed.
    assert seen[0] == [job]
    assert jobs(db) == [job]
    assert orders(db) == [(placed["order_id"], "teapot", 2500)]
    # The lifespan closed cronbase's pool and SQLAlchemy's.
    assert pool.closed
    assert example.engine.pool.checkedin() == 0

    example.app.run_worker(
        burst=True, install_signal_handlers=False, schedule=False, retention=None
    )
    status = db.execute("SELECT status FROM cronbase.jobs_all WHERE id = %s", [placed["job_id"]])
    assert status.fetchone() == ("succeeded",)
    assert f"order {placed['order_id']} confirmed" in capsys.readouterr().out


def test_the_dashboard_answers_this_machine_only_without_credentials(
    example: ModuleType,
) -> None:
    api = example.api

    async def scenario() -> tuple[int, int]:
        async with api.router.lifespan_context(api):
            answers = []
            for client in (("127.0.0.1", 40000), ("203.0.113.9", 40000)):
                transport = httpx.ASGITransport(api, client=client)
                async with httpx.AsyncClient(
                    transport=transport, base_url="http://localhost"
                ) as http:
                    answers.append((await http.get("/jobs-admin/")).status_code)
            return answers[0], answers[1]

    assert asyncio.run(scenario()) == (200, 403)


def test_uvicorn_serves_the_example_and_shuts_down_cleanly(
    database_url: str, db: psycopg.Connection[Any], tmp_path: Path
) -> None:
    db.execute("DROP TABLE IF EXISTS public.orders")
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DATABASE_URL", ENV_USER, ENV_PASSWORD, ENV_TOKEN)
    }
    env.update(CRONBASE_DATABASE_URL=url_of(database_url), PYTHONPATH=after_inherited(str(REPO)))
    log_path = tmp_path / "uvicorn.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "examples.fastapi_app:api", "--port", "0"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            running = wait_for(
                lambda: (
                    re.search(r"running on (http://\S+)", log_path.read_text())
                    or server.poll() is not None
                ),
                timeout=60,
                what="uvicorn to start",
            )
            assert server.poll() is None, log_path.read_text()
            base = running.group(1)
            with httpx.Client(base_url=base, timeout=30) as client:
                placed = client.post("/orders", json={"item": "teapot", "amount_cents": 25_00})
                assert placed.status_code == 201, placed.text
                assert client.get("/jobs-admin/").status_code == 200
            assert [(r[0], r[3]) for r in jobs(db)] == [
                (placed.json()["job_id"], {"order_id": placed.json()["order_id"]})
            ]
            server.send_signal(signal.SIGINT)
            assert server.wait(30) == 0
        finally:
            if server.poll() is None:
                server.kill()
                server.wait(30)
    output = log_path.read_text()
    assert "Application shutdown complete." in output, output
    assert "Traceback" not in output, output
    assert json.loads(placed.text)["order_id"] == orders(db)[0][0]
