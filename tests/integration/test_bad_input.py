"""Bad input to defer is refused with one line naming the bad value, and writes no row."""

from __future__ import annotations

import asyncio
import math
import re
import uuid
from collections.abc import Callable, Iterator
from datetime import date, datetime, timedelta
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.enqueue.insert import encode_payload


def job_count(db: psycopg.Connection[Any]) -> int:
    found = db.execute("SELECT count(*) FROM cronbase.jobs_all").fetchone()
    assert found is not None
    return int(found[0])


@pytest.fixture
def refused(db: psycopg.Connection[Any]) -> Iterator[Callable[..., str]]:
    """``refused(error_type, call, *args, **kwargs)``: the one-line message of the refusal."""

    def check(error: type[Exception], call: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
        with pytest.raises(error) as caught:
            call(*args, **kwargs)
        message = str(caught.value)
        assert "\n" not in message, message
        assert isinstance(caught.value, cronbase.CronbaseError)
        return message

    yield check
    assert job_count(db) == 0


@pytest.fixture
def send(app: cronbase.App) -> cronbase.Task[Any, None]:
    @app.task
    def send_invoice(invoice_id: Any, note: Any = None) -> None: ...

    return send_invoice


class Unjsonable:
    def __repr__(self) -> str:
        return "<Unjsonable 42>"


@pytest.mark.parametrize(
    ("note", "named"),
    [
        (datetime(2030, 1, 1), "payload['note'] is datetime.datetime(2030, 1, 1, 0, 0)"),
        ({1, 2}, "payload['note'] is {1, 2} (set)"),
        (b"raw", "payload['note'] is b'raw' (bytes)"),
        ({"deep": [1, Unjsonable()]}, "payload['note']['deep'][1] is <Unjsonable 42>"),
        (math.nan, "payload['note'] is nan"),
        (-math.inf, "payload['note'] is -inf"),
        ("bad \x00 byte", r"payload['note'] contains a NUL character (\x00)"),
        ({"k\x00": 1}, r"payload['note'] has the key 'k\x00', which contains a NUL character"),
        (
            "half \ud800 pair",
            r"payload['note'] contains a lone surrogate, which is not valid UTF-8: 'half \ud800",
        ),
        ([[1.5, "ok"], {"x": math.inf}], "payload['note'][1]['x'] is inf"),
        ({1: "one"}, "payload['note'] has the key 1; JSON object keys are strings"),
        ("x" * 500 + "\x00", "payload['note'] contains a NUL"),
    ],
)
def test_a_payload_that_cannot_be_stored_is_refused_naming_where(
    send: cronbase.Task[Any, None], refused: Callable[..., str], note: Any, named: str
) -> None:
    message = refused(cronbase.PayloadError, send.defer, invoice_id=1, note=note)
    assert message.startswith("payload for task 'send_invoice' cannot be stored as JSON: ")
    assert named in message
    assert len(message) < 300  # a long value is shortened, not pasted whole


def test_a_payload_containing_itself_is_refused(
    send: cronbase.Task[Any, None], refused: Callable[..., str]
) -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert "payload['note'][0] contains itself" in refused(
        cronbase.PayloadError, send.defer, invoice_id=1, note=loop
    )


def test_an_int_too_long_for_json_is_refused(
    send: cronbase.Task[Any, None], refused: Callable[..., str]
) -> None:
    message = refused(cronbase.PayloadError, send.defer, invoice_id=10**5000)
    assert message.startswith(
        "payload for task 'send_invoice' cannot be stored as JSON: ValueError"
    )


def test_one_bad_payload_in_defer_many_writes_none_of_them(
    send: cronbase.Task[Any, None], refused: Callable[..., str]
) -> None:
    payloads: list[dict[str, Any]] = [{"invoice_id": n} for n in range(5)]
    payloads[3]["note"] = {1, 2}
    assert "payload['note'] is {1, 2}" in refused(cronbase.PayloadError, send.defer_many, payloads)


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        ({"invoice": 1}, "missing a required argument: 'invoice_id'"),
        ({"invoice_id": 1, "invoce": 2}, "got an unexpected keyword argument 'invoce'"),
    ],
)
def test_payload_keys_that_do_not_fit_the_handler_are_refused(
    app: cronbase.App,
    send: cronbase.Task[Any, None],
    refused: Callable[..., str],
    payload: dict[str, Any],
    named: str,
) -> None:
    message = refused(cronbase.PayloadError, app.defer, "send_invoice", payload)
    assert message.startswith("payload does not fit task 'send_invoice' (invoice_id, note)")
    assert named in message
    assert named in refused(cronbase.PayloadError, send.defer, **payload)
    assert named in refused(cronbase.PayloadError, send.defer_many, [{"invoice_id": 1}, payload])


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        ({"n": "abc"}, "argument 'n': payload['n'] is 'abc', not an int"),
        ({"d": "not a date"}, "argument 'd': payload['d'] is 'not a date', not an ISO 8601 date"),
        ({"u": 5}, "argument 'u': payload['u'] is 5, not a UUID"),
    ],
)
def test_a_value_its_annotation_refuses_is_refused_by_every_way_in(
    app: cronbase.App,
    refused: Callable[..., str],
    db: psycopg.Connection[Any],
    payload: dict[str, Any],
    named: str,
) -> None:
    @app.task
    def typed(n: int, d: date, u: uuid.UUID) -> None: ...

    good: dict[str, Any] = {"n": 1, "d": date(2026, 3, 1), "u": uuid.UUID(int=5)}
    bad = {**good, **payload}
    said = f"payload for task 'typed' does not convert to {named}"
    assert refused(cronbase.PayloadError, typed.defer, **bad) == said
    assert refused(cronbase.PayloadError, typed.defer_many, [good, bad, good]) == said
    assert refused(cronbase.PayloadError, typed.configure(priority=1).defer, **bad) == said
    assert refused(cronbase.PayloadError, app.defer, "typed", bad) == said
    assert refused(cronbase.PayloadError, asyncio.run, typed.defer_async(**bad)) == said
    assert refused(cronbase.PayloadError, typed.s, **bad) == said  # a workflow's signature
    assert refused(cronbase.PayloadError, app.schedules.add, "typed", cron="* * * * *", payload=bad)
    with pytest.raises(cronbase.PayloadError, match=re.escape(said)):
        app.periodic("0 * * * *", payload=bad)(typed)
    assert db.execute("SELECT count(*) FROM cronbase.schedules").fetchone() == (0,)


def test_an_unknown_task_name_is_refused_naming_the_registered_ones(
    app: cronbase.App, send: cronbase.Task[Any, None], refused: Callable[..., str]
) -> None:
    @app.task
    def refresh_cache(key: str) -> None: ...

    message = refused(cronbase.UnknownTaskError, app.defer, "send_invoce", {"invoice_id": 1})
    assert message == "unknown task 'send_invoce'; registered: refresh_cache, send_invoice"


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"queue": ""}, "invalid queue name '': use 1 to 100 letters, digits and _ - . :"),
        ({"queue": 7}, "queue name must be a string, got 7"),
        ({"queue": " "}, "invalid queue name ' '"),
        ({"queue": "a\x00b"}, "invalid queue name 'a\\x00b'"),
        ({"queue": "q" * 200}, "invalid queue name 'qqqq"),
        ({"queue": "emails; DROP TABLE jobs"}, "invalid queue name 'emails; DROP TABLE jobs'"),
        ({"idempotency_key": "k\x00"}, "idempotency_key 'k\\x00' contains a NUL character"),
        ({"dedupe_key": "k" * 1001}, "dedupe_key is 1001 characters long, more than 1000"),
        ({"lease": timedelta(days=40000)}, "lease must be a positive timedelta of at most 100"),
        ({"priority": 99999}, "priority must be within -32768..32767, got 99999"),
        ({"priority": "high"}, "priority must be an integer, got 'high'"),
        ({"max_attempts": 0}, "max_attempts must be an integer from 1 to 2147483647, got 0"),
        ({"max_attempts": 2**40}, f"got {2**40}"),
        ({"lease": timedelta(0)}, "lease must be a positive timedelta"),
        ({"delay": timedelta(seconds=-1)}, "delay must be a timedelta of zero or more"),
        ({"run_at": datetime(2030, 1, 1)}, "run_at must be timezone-aware, got naive"),
        (
            {"run_at": datetime.now().astimezone(), "delay": timedelta(seconds=5)},
            "give run_at or delay, not both",
        ),
        ({"idempotency_key": ""}, "idempotency_key must be a non-empty string, got ''"),
        ({"on_duplicate": "replace"}, "on_duplicate='replace' needs a dedupe_key"),
        ({"on_duplicate": "merge", "dedupe_key": "k"}, "got 'merge'"),
    ],
)
def test_bad_options_are_refused_before_any_write(
    app: cronbase.App,
    send: cronbase.Task[Any, None],
    refused: Callable[..., str],
    options: dict[str, Any],
    named: str,
) -> None:
    assert named in refused(cronbase.CronbaseError, send.configure, **options)
    assert named in refused(
        cronbase.CronbaseError, app.defer, "send_invoice", {"invoice_id": 1}, **options
    )


def test_keys_are_refused_for_defer_many(
    send: cronbase.Task[Any, None], refused: Callable[..., str]
) -> None:
    deferral = send.configure(idempotency_key="k")
    assert "defer_many takes no idempotency_key or dedupe_key" in refused(
        cronbase.CronbaseError, deferral.defer_many, [{"invoice_id": 1}]
    )


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("host=db password=secret port", "'host=db password=*** port'"),
        ("postgresql://u:secret@db/x?opt", "'postgresql://u:***@db/x?opt'"),
        # libpq's reason quotes the whole URL: check_url masks the reason too.
        ("postgresql://u:secret@[::1/db", "'postgresql://u:***@[::1/db'"),
    ],
)
def test_an_unparsable_database_url_is_refused_when_the_app_is_made(url: str, shown: str) -> None:
    with pytest.raises(cronbase.DatabaseURLError) as caught:
        cronbase.App(database_url=url)
    message = str(caught.value)
    assert message.startswith(f"invalid database URL {shown}: ")
    assert "\n" not in message
    assert "secret" not in message


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:secret@/db?host=/nonexistent",  # no such socket folder
        "postgresql://u:secret@localhost:notaport/db",
    ],
)
def test_an_unreachable_database_url_is_refused_at_the_first_defer(
    db: psycopg.Connection[Any], url: str
) -> None:
    app = cronbase.App(database_url=url)

    @app.task
    def t() -> None: ...

    with pytest.raises(cronbase.DatabaseURLError) as caught:
        t.defer()
    message = str(caught.value)
    assert message.startswith("cannot connect to database 'postgresql://u:***@")
    assert "secret" not in message
    assert "\n" not in message
    assert job_count(db) == 0


def test_defer_by_name_refuses_unknown_options_and_non_object_payloads(app: cronbase.App) -> None:
    @app.task
    def ping(n: int) -> None:
        pass

    with pytest.raises(cronbase.ConfigurationError, match="unknown defer option 'prority'"):
        app.defer("ping", {"n": 1}, prority=3)
    with pytest.raises(cronbase.PayloadError, match="must be a JSON object, got 5"):
        app.defer("ping", 5)  # type: ignore[arg-type]
    with pytest.raises(cronbase.PayloadError, match="must be a JSON object, got 5"):
        ping.defer_many([5])  # type: ignore[list-item]
    assert ping.defer_many({"n": n} for n in range(3))  # a generator is read once, fully
    assert len(app.jobs.list(task="ping")) == 3


@pytest.mark.parametrize(
    ("name", "shown"),
    [("", "''"), (" ", "' '"), ("a\x00b", "'a\\x00b'"), ("t" * 101, "'tttt"), ("über", "'über'")],
)
def test_a_bad_task_name_is_refused_at_registration(
    app: cronbase.App, name: str, shown: str, refused: Callable[..., str]
) -> None:
    message = refused(cronbase.InvalidNameError, app.task(name=name), lambda: None)
    assert message.startswith(f"invalid task name {shown}")
    assert name not in app.tasks


def test_a_payload_over_the_limit_is_refused_and_nothing_is_written(
    app: cronbase.App, db: psycopg.Connection[Any], refused: Callable[..., str]
) -> None:
    @app.task
    def upload(data: str) -> None: ...

    big = "x" * (16 * 1024 * 1024)
    message = refused(cronbase.PayloadError, upload.defer, data=big)
    assert message.startswith("payload for task 'upload' is 16,777,227 bytes of JSON, more than")
    assert "1,048,576 allowed" in message
    assert isinstance(cronbase.PayloadError("x"), ValueError)
    small = cronbase.App(app.database_url, max_payload_bytes=100)
    wide = small.task(name="wide")(lambda s: None)
    message = refused(cronbase.PayloadError, wide.defer, s="é" * 20)
    # What counts is the JSON as stored (non-ASCII characters escaped: 6 bytes each).
    assert message.startswith("payload for task 'wide' is 128 bytes of JSON, more than the 100")
    assert len(encode_payload("wide", {"s": "x" * 92}, 100)) == 100  # exactly the limit: fits
    small.close()


def test_hostile_queue_names_are_refused_by_the_queue_calls(
    app: cronbase.App, refused: Callable[..., str]
) -> None:
    for bad in ("", "x" * 200, "a\x00b"):
        assert "invalid queue name" in refused(cronbase.InvalidNameError, app.queues.pause, bad)
