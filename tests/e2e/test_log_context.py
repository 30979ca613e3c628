"""A handler's own log lines carry its job's id, task and attempt: in this process, and from the
``cronbase worker`` command in text and in JSON."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.logs import JsonFormatter, TextFormatter, install_job_context
from tests.e2e.test_cli import cronbase as run_cronbase
from tests.e2e.test_cli import ok

APP = "tests.e2e.log_app:app"


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def collected() -> Any:
    handler = Collect()
    logger = logging.getLogger("shop")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield handler.records
    logger.removeHandler(handler)


def test_concurrent_jobs_each_log_their_own_fields(
    app: cronbase.App, collected: list[logging.LogRecord]
) -> None:
    log = logging.getLogger("shop.orders")
    both_running = asyncio.Event()
    started: list[int] = []

    @app.task
    async def pack(order: int) -> None:
        log.info("packing %d", order)
        started.append(order)
        if len(started) == 2:
            both_running.set()
        await asyncio.wait_for(both_running.wait(), 10)  # interleave the two jobs
        log.info("packed %d", order)

    @app.task
    def label(order: int) -> None:
        log.info("label %d", order)

    ids = {pack.defer(order=1): 1, pack.defer(order=2): 2, label.defer(order=3): 3}
    app.run_worker(burst=True, install_signal_handlers=False, concurrency=4, retention=None)
    log.info("outside any job")
    fields = [
        (r.getMessage(), getattr(r, "job_id", None), getattr(r, "task", None),
         getattr(r, "attempt", None))
        for r in collected
    ]  # fmt: skip
    assert ("outside any job", None, None, None) in fields
    for job_id, order in ids.items():
        mine = [f for f in fields if f[0].endswith(f" {order}")]
        assert mine, fields
        assert {f[1:] for f in mine} == {(job_id, "label" if order == 3 else "pack", 1)}, mine


def test_the_formatters_show_the_fields_and_install_is_idempotent() -> None:
    install_job_context()
    factory = logging.getLogRecordFactory()
    install_job_context()
    assert logging.getLogRecordFactory() is factory
    record = logging.LogRecord("shop", logging.INFO, __file__, 1, "hello %s", ("you",), None)
    record.job_id, record.task, record.attempt = 12, "send_invoice", 3
    assert (
        TextFormatter()
        .format(record)
        .endswith("INFO    shop: hello you [job_id=12 task=send_invoice attempt=3]")
    )
    out = json.loads(JsonFormatter().format(record))
    assert (out["message"], out["job_id"], out["task"], out["attempt"]) == (
        "hello you",
        12,
        "send_invoice",
        3,
    )


@pytest.mark.slow
@pytest.mark.parametrize("log_format", ["json", "text"])
def test_the_worker_command_logs_handler_lines_with_the_job(
    database_url: str, db: psycopg.Connection[Any], log_format: str
) -> None:
    sent = int(ok(run_cronbase(database_url, "--app", APP, "enqueue", "send_invoice",
                               "--payload", '{"invoice_id": 812}')))  # fmt: skip
    refunded = int(ok(run_cronbase(database_url, "--app", APP, "enqueue", "refund",
                                   "--payload", '{"order_id": 7}')))  # fmt: skip
    result = run_cronbase(
        database_url, "--app", APP, "--log-format", log_format, "worker", "--burst"
    )
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    if log_format == "text":
        assert any(
            line.endswith(f"shop.invoices: sending invoice 812 [job_id={sent} "
                          "task=send_invoice attempt=1]")
            for line in lines
        ), lines  # fmt: skip
        return
    records = [json.loads(line) for line in lines if line.startswith("{")]
    mine = {r["message"]: r for r in records if r["logger"] == "shop.invoices"}
    assert {k: (v["job_id"], v["task"], v["attempt"]) for k, v in mine.items()} == {
        "sending invoice 812": (sent, "send_invoice", 1),
        "refunding order 7": (refunded, "refund", 1),
    }
    # The worker's own lines outside any job carry none.
    assert any(r["logger"] == "cronbase" and "job_id" not in r for r in records), records


def test_a_handlers_own_extra_fields_win_and_do_not_fail_the_job(
    app: cronbase.App, collected: list[logging.LogRecord]
) -> None:
    log = logging.getLogger("shop.sync")

    @app.task
    def sync(n: int) -> None:
        # Without care, logging refuses an extra key the record already has (KeyError).
        log.info("syncing %d", n, extra={"task": "nightly-sync", "attempt": "third"})
        log.info("synced %d", n)

    job_id = sync.defer(n=1)
    app.run_worker(burst=True, install_signal_handlers=False, retention=None)
    assert app.jobs.get(job_id).status is cronbase.JobStatus.SUCCEEDED
    fields = {
        r.getMessage(): (getattr(r, "job_id", None), getattr(r, "task", None), r.attempt)
        for r in collected
    }
    assert fields == {
        "syncing 1": (job_id, "nightly-sync", "third"),
        "synced 1": (job_id, "sync", 1),
    }
