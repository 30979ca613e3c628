"""The job list's selections on real PostgreSQL: text search in payloads and errors (bounded),
the ids a filter matches, and the dead or failed jobs grouped by error."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.operations import search as admin


def run_burst(app: cronbase.App) -> None:
    app.run_worker(burst=True, install_signal_handlers=False)


def ids_of(jobs: list[Any]) -> list[int]:
    return [j.id for j in jobs]


def test_search_finds_text_in_payloads_and_errors_case_insensitively(app: cronbase.App) -> None:
    @app.task(max_attempts=1)
    def charge(customer: str, fail: bool = False) -> None:
        if fail:
            raise RuntimeError("Gateway TIMEOUT talking to acquirer 50%_off")

    alice = charge.defer(customer="Alice-Blue")
    bob = charge.defer(customer="bob", fail=True)
    carol = charge.defer(customer="carol")
    run_burst(app)
    assert ids_of(admin.search_jobs(app.db, search="alice-blue")) == [alice]
    assert ids_of(admin.search_jobs(app.db, search="gateway timeout")) == [bob]
    # LIKE's wildcards are literal: "%" and "_" match only themselves.
    assert ids_of(admin.search_jobs(app.db, search="50%_off")) == [bob]
    assert admin.search_jobs(app.db, search="50%off") == []
    assert admin.search_jobs(app.db, search="a_ice") == []
    # The other filters still apply, and an id still matches exactly.
    assert admin.search_jobs(app.db, search="gateway", status="succeeded") == []
    assert ids_of(admin.search_jobs(app.db, search=str(carol))) == [carol]


def test_the_text_match_reads_only_the_newest_jobs_but_ids_and_keys_any(
    app: cronbase.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    @app.task
    def note(text: str) -> None:
        pass

    old = note.configure(idempotency_key="old-note").defer(text="needle")
    newer = [note.defer(text=f"hay {n}") for n in range(3)]
    monkeypatch.setattr(admin, "TEXT_SCAN", 3)
    assert admin.search_jobs(app.db, search="needle") == []  # beyond the newest 3
    assert ids_of(admin.search_jobs(app.db, search="old-note")) == [old]
    # A whole number is an id only, never text in the newer payloads ("hay 1", "hay 2").
    assert ids_of(admin.search_jobs(app.db, search=str(old))) == [old]
    assert ids_of(admin.search_jobs(app.db, search="hay 1")) == [newer[1]]
    assert ids_of(admin.search_jobs(app.db, search="hay")) == newer[::-1]
    monkeypatch.setattr(admin, "TEXT_SCAN", 4)
    assert ids_of(admin.search_jobs(app.db, search="needle")) == [old]


def test_search_ids_are_every_match_newest_first_within_the_limit(app: cronbase.App) -> None:
    @app.task
    def work(n: int) -> None:
        pass

    emails = [work.configure(queue="emails").defer(n=n) for n in range(7)]
    work.configure(queue="reports").defer(n=100)
    assert app.jobs.search_ids(queue="emails", limit=100) == emails[::-1]
    assert app.jobs.search_ids(queue="emails", limit=3) == emails[::-1][:3]
    # The offset of a page does not apply: "all matching" is all, from the newest.
    assert app.jobs.search_ids(queue="emails", limit=100, offset=5) == emails[::-1]
    assert app.jobs.search_ids(queue="emails", search='n": 3') == [emails[3]]


def test_search_count_counts_every_match_but_no_more_than_the_limit(app: cronbase.App) -> None:
    @app.task
    def work(n: int) -> None:
        pass

    for n in range(7):
        work.configure(queue="emails").defer(n=n)
    work.configure(queue="reports").defer(n=100)
    # The same filter as search and search_ids (one fragment): queue, text, status.
    assert app.jobs.search_count(queue="emails", limit=100) == 7
    assert app.jobs.search_count(queue="emails", search='n": 3', limit=100) == 1
    assert app.jobs.search_count(status="succeeded", limit=100) == 0
    assert app.jobs.search_count(limit=100) == 8
    # Bounded: it stops counting at the limit (the page asks one more than it allows, to say
    # "more than"), and a page's offset does not apply.
    assert app.jobs.search_count(queue="emails", limit=3) == 3
    assert app.jobs.search_count(queue="emails", limit=100, offset=5) == 7


def test_dead_jobs_group_by_task_error_class_and_first_line(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task(max_attempts=1)
    def pay(kind: str, n: int) -> None:
        if kind == "value":
            raise ValueError(f"bad amount\n  detail {n}")
        if kind == "long":
            raise KeyError("x" * 500)
        # Request numbers and ids differ from job to job: one error all the same.
        raise RuntimeError(f"service down for request {n + 810} ({uuid.uuid4()})")

    values = [pay.defer(kind="value", n=n) for n in range(3)]
    downs = [pay.defer(kind="down", n=n) for n in range(2)]
    long = pay.defer(kind="long", n=0)
    run_burst(app)
    found = app.jobs.error_groups("dead")
    keys = [(g.task, g.error_type, g.message, g.count) for g in found.groups]
    assert keys[:2] == [
        ("pay", "ValueError", "ValueError: bad amount", 3),
        ("pay", "RuntimeError", "RuntimeError: service down for request <n> (<id>)", 2),
    ]
    [(task, error_type, message, count)] = keys[2:]
    assert (task, error_type, count) == ("pay", "KeyError", 1)
    assert len(message) == 200
    assert message.startswith("KeyError: 'xxx")
    assert (found.scanned, found.bounded) == (6, False)
    assert found.groups[0].newest is not None

    group = app.jobs.error_group_ids("dead", "pay", "ValueError", "ValueError: bad amount")
    assert group == values[::-1]
    down = "RuntimeError: service down for request <n> (<id>)"
    assert app.jobs.error_group_ids("dead", "pay", "RuntimeError", down) == downs[::-1]
    assert app.jobs.error_group_ids("dead", "pay", "KeyError", message) == [long]
    assert app.jobs.error_group_ids("dead", "pay", "ValueError", "ValueError: bad") == []
    assert app.jobs.error_group_ids("failed", "pay", "RuntimeError", down) == []

    # Each task's count is its groups' sum while every group came back; counted by task when not.
    assert found.per_task() == {"pay": 6}
    assert app.jobs.error_counts_by_task("dead") == {"pay": 6}

    bounded = app.jobs.error_groups("dead", scan=2)  # the newest two: the long one, a down one
    assert (bounded.scanned, bounded.bounded) == (2, True)
    assert sorted((g.error_type, g.count) for g in bounded.groups) == [
        ("KeyError", 1),
        ("RuntimeError", 1),
    ]
