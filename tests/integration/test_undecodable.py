"""Stored JSON deeper than MAX_JSON_DEPTH, as other SQL may write it: every view reads the row
with its JSON as an UndecodableJSON (raw text, marked), every action works on it, and a defer
past the limit is refused naming it. Also: a succeeded job shows no earlier attempt's error."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from typing import Any

import httpx
import psycopg
import pytest

import cronbase
from cronbase import JobStatus, UndecodableJSON
from cronbase.dashboard import create_app
from tests.integration.test_worker_resilience import insert_by_sql, job_state

# 10,000 levels: far past the limit, and past Python's own recursion limit.
DEEP = "'{\"x\": ' || repeat('[', 10000) || repeat(']', 10000) || '}'"
TOO_DEEP = "nested deeper than 100 levels (at character 105)"
MARKED = f'undecodable JSON, {TOO_DEEP}: {{"x": [[['


def run_burst(app: cronbase.App) -> None:
    app.run_worker(burst=True, install_signal_handlers=False)


def nested(levels: int) -> list[Any]:
    """A list ``levels`` deep: [[[...]]]."""
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


@pytest.fixture
def work(app: cronbase.App) -> cronbase.Task[Any, Any]:
    @app.task
    def work(x: Any = None) -> str:
        return "done"

    return work


def poison_job(db: psycopg.Connection[Any]) -> int:
    """A job of task ``work`` whose payload, result and metadata are 10,000 levels deep."""
    return insert_by_sql(db, "work", DEEP, metadata=f"({DEEP})::jsonb", result=f"({DEEP})::jsonb")


def assert_marked(value: object) -> None:
    assert isinstance(value, UndecodableJSON), value
    assert value.reason == TOO_DEEP
    assert value.text.startswith('{"x": [[[')
    assert len(value.text) == 20_007
    assert str(value).startswith(MARKED)
    assert str(value).endswith("…")


# -- the library's views -------------------------------------------------------------------------


def test_every_view_reads_a_row_too_deep_to_decode_as_marked_raw_text(
    app: cronbase.App, db: psycopg.Connection[Any], work: cronbase.Task[Any, Any]
) -> None:
    healthy = work.defer(x=[1])
    poison = poison_job(db)

    job = app.jobs.get(poison)
    for value in (job.payload, job.result, job.metadata):
        assert_marked(value)
    assert [j.id for j in app.jobs.list()] == [poison, healthy]
    assert app.jobs.list()[1].payload == {"x": [1]}
    assert [j.id for j in app.jobs.search(search=str(poison))] == [poison]
    assert app.jobs.attempts(poison) == []
    [node] = app.jobs.graph(poison).jobs
    assert_marked(node.result)
    shown = job.to_json()["payload"]
    assert shown == {"undecodable": TOO_DEEP, "start": '{"x": ' + "[" * 194, "length": 20_007}

    async def async_views() -> list[object]:
        try:
            found = await app.jobs.get_async(poison)
            listed = await app.jobs.list_async()
            return [found.payload, listed[0].payload]
        finally:
            await app.aclose()

    for value in asyncio.run(async_views()):
        assert_marked(value)


def test_the_claim_makes_it_dead_by_the_same_limit_and_every_action_works_on_it(
    app: cronbase.App, db: psycopg.Connection[Any], work: cronbase.Task[Any, Any]
) -> None:
    poison = poison_job(db)
    run_burst(app)
    status, attempts, error = job_state(db, poison)
    assert (status, attempts) == ("dead", 1)
    assert f"cannot be decoded: PayloadError: the payload is {TOO_DEEP}" in (error or "")

    # Retried, it runs again and goes dead again at its claim, for the same reason.
    retried = app.jobs.retry(poison)
    assert retried.status is JobStatus.QUEUED
    assert_marked(retried.payload)
    run_burst(app)
    assert job_state(db, poison)[:2] == ("dead", 2)
    assert app.jobs.requeue_dead(task="work") == [poison]
    cancelled = app.jobs.cancel(poison)
    assert cancelled.status is JobStatus.CANCELLED
    assert_marked(cancelled.payload)
    assert app.jobs.delete_many([poison]).done == [poison]

    again = poison_job(db)
    app.jobs.cancel(again)
    assert app.jobs.prune(timedelta(0), ["cancelled"]) == 1
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (0,)


# -- the dashboard -------------------------------------------------------------------------------


def test_the_dashboard_shows_a_row_too_deep_to_decode_and_acts_on_it(
    app: cronbase.App, db: psycopg.Connection[Any], work: cronbase.Task[Any, Any]
) -> None:
    poison = poison_job(db)
    run_burst(app)  # dead
    origin = {"Origin": "http://localhost"}

    async def visit() -> dict[str, httpx.Response]:
        transport = httpx.ASGITransport(app=create_app(app), client=("127.0.0.1", 50000))
        seen: dict[str, httpx.Response] = {}
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
                for path in ("/jobs", "/dead", f"/jobs/{poison}", f"/jobs/{poison}/live"):
                    seen[path] = await http.get(path)
                found = re.search(r'name="csrf_token" value="([^"]+)"', seen["/jobs"].text)
                assert found is not None
                token = {"csrf_token": found.group(1)}
                seen["retry"] = await http.post(f"/jobs/{poison}/retry", data=token, headers=origin)
                seen["queued"] = await http.get("/jobs?status=queued")
                seen["cancel"] = await http.post(
                    f"/jobs/{poison}/cancel", data=token, headers=origin
                )
                seen["delete"] = await http.post(
                    "/jobs/bulk", data={**token, "action": "delete", "ids": poison}, headers=origin
                )
            return seen
        finally:
            await app.aclose()

    seen = asyncio.run(visit())
    for path in ("/jobs", "/dead", f"/jobs/{poison}", "queued"):
        assert seen[path].status_code == 200, (path, seen[path].text[:500])
        assert "undecodable JSON, nested deeper than 100 levels" in seen[path].text, path
    # The job's page: the payload and the result marked, each cut to its start.
    page = seen[f"/jobs/{poison}"].text
    assert page.count(MARKED.replace('"', "&#34;")) == 2, page
    assert "[" * 1000 not in page
    assert seen[f"/jobs/{poison}/live"].status_code == 200
    for action in ("retry", "cancel", "delete"):
        assert seen[action].status_code == 303, (action, seen[action].text[:500])
    assert db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone() == (0,)


# -- defer ---------------------------------------------------------------------------------------


def test_a_defer_deeper_than_the_limit_is_refused_naming_the_limit_and_where(
    app: cronbase.App, work: cronbase.Task[Any, Any]
) -> None:
    @app.task
    def typed(rows: list[Any]) -> None: ...

    # The payload object is level 1: its value x may nest 99 levels.
    assert app.jobs.get(work.defer(x=nested(99))).payload == {"x": nested(99)}
    for task, key in ((work, "x"), (typed, "rows")):
        with pytest.raises(cronbase.PayloadError) as refused:
            task.defer(**{key: nested(100)})
        assert str(refused.value) == (
            f"payload for task {task.name!r} cannot be stored as JSON: "
            f"payload[{key!r}][0][0][0][…94 more…][0][0] is nested deeper than 100 levels, the "
            "most cronbase stores; flatten it, or store the data elsewhere and pass its key"
        )
    with pytest.raises(cronbase.PayloadError, match="nested deeper than 100 levels"):
        work.defer(x=nested(2000))  # no RecursionError on the way
    assert [j.payload for j in app.jobs.list()] == [{"x": nested(99)}]


def test_a_result_deeper_than_the_limit_makes_its_job_dead_naming_the_limit(
    app: cronbase.App,
) -> None:
    @app.task
    def deep() -> list[Any]:
        return nested(101)

    job_id = deep.defer()
    run_burst(app)
    job = app.jobs.get(job_id)
    assert job.status is JobStatus.DEAD
    assert "its result cannot be stored as JSON" in (job.last_error or "")
    assert "is nested deeper than 100 levels" in (job.last_error or "")


# -- a succeeded job's error ---------------------------------------------------------------------


def test_a_succeeded_job_shows_no_error_of_an_earlier_attempt(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    calls: list[int] = []

    @app.task
    def flaky() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("first attempt failed")

    job_id = flaky.defer()
    run_burst(app)
    db.execute("UPDATE cronbase.jobs SET run_at = now() WHERE id = %s", [job_id])  # the retry
    run_burst(app)
    job = app.jobs.get(job_id)
    assert (job.status, job.attempts) == (JobStatus.SUCCEEDED, 2)
    assert job.last_error == "RuntimeError: first attempt failed"  # the row keeps it
    assert job.current_error is None

    async def visit() -> tuple[str, str]:
        transport = httpx.ASGITransport(app=create_app(app), client=("127.0.0.1", 50000))
        try:
            async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
                return (await http.get("/jobs")).text, (await http.get(f"/jobs/{job_id}")).text
        finally:
            await app.aclose()

    listed, page = asyncio.run(visit())
    assert "first attempt failed" not in listed
    assert "<th>last error</th>" not in page
    # The attempts keep each one's error.
    assert '<p class="error-text">RuntimeError: first attempt failed</p>' in page
