"""Payload types on the real database: deferred as Python values, stored as JSON, received by a
real worker's handler as the types its annotations ask for; rows other SQL wrote that do not
convert die alone, with the reason; App(json_dumps=, json_loads=) on both sides."""

from __future__ import annotations

import asyncio
import dataclasses
import enum
import json
import threading
import uuid
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import psycopg
import pydantic
import pytest

import cronbase
from cronbase.worker.claim import claim_jobs_sync, claim_params
from tests.conftest import SCHEMA
from tests.e2e.harness import run_example
from tests.e2e.test_cli import cli_env
from tests.integration.test_worker_resilience import insert_by_sql, job_state


class Plan(enum.Enum):
    MONTHLY = "monthly"
    YEARLY = "yearly"


@dataclasses.dataclass
class Line:
    sku: str
    price: Decimal
    quantity: int = 1


class Address(pydantic.BaseModel):
    city: str
    since: date


TOKYO = timezone(timedelta(hours=9))
ARGUMENTS: dict[str, Any] = {
    "customer": uuid.UUID("0b8c7e1e-4f7a-4c55-9d43-5a1f0e2b6c11"),
    "plan": Plan.YEARLY,
    "lines": [Line("seat", Decimal("19.90"), 3), Line("support", Decimal("49.00"))],
    "due": datetime(2026, 3, 1, 9, 0, 0, 250, tzinfo=TOKYO),
    "day": date(2026, 3, 1),
    "cutoff": time(17, 30),
    "grace": timedelta(days=14, seconds=0.5),
    "addresses": [Address(city="Kyoto", since=date(2019, 4, 1))],
    "note": None,
}


def register(app: cronbase.App, received: list[dict[str, Any]]) -> cronbase.Task[Any, None]:
    @app.task
    def send_bill(
        customer: uuid.UUID,
        plan: Plan,
        lines: list[Line],
        due: datetime,
        day: date,
        cutoff: time,
        grace: timedelta,
        addresses: list[Address],
        note: Decimal | None = None,
    ) -> None:
        received.append(
            {
                "customer": customer,
                "plan": plan,
                "lines": lines,
                "due": due,
                "day": day,
                "cutoff": cutoff,
                "grace": grace,
                "addresses": addresses,
                "note": note,
            }
        )

    return send_bill


def test_a_worker_hands_the_handler_the_types_it_asks_for(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    received: list[dict[str, Any]] = []
    send_bill = register(app, received)
    first = send_bill.defer(**ARGUMENTS)
    many = send_bill.defer_many([ARGUMENTS, {**ARGUMENTS, "note": Decimal("0.1")}])
    later = asyncio.run(send_bill.defer_async(**ARGUMENTS))
    app.run_worker(burst=True, install_signal_handlers=False)

    assert {job_state(db, i)[:2] for i in [first, *many, later]} == {("succeeded", 1)}
    assert len(received) == 4
    for got in received:
        assert {k: v for k, v in got.items() if k != "note"} == {
            k: v for k, v in ARGUMENTS.items() if k != "note"
        }
        assert got["due"].utcoffset() == timedelta(hours=9)  # aware, in its own offset
        assert type(got["lines"][0]) is Line
        assert type(got["lines"][0].price) is Decimal
        assert type(got["addresses"][0]) is Address
    assert sorted(str(r["note"]) for r in received) == ["0.1", "None", "None", "None"]
    # What the row holds: JSON any other reader (the dashboard, SQL) can read.
    stored = app.jobs.get(first).payload
    assert stored["due"] == "2026-03-01T09:00:00.000250+09:00"
    assert stored["lines"] == [
        {"sku": "seat", "price": "19.90", "quantity": 3},
        {"sku": "support", "price": "49.00", "quantity": 1},
    ]
    assert (stored["plan"], stored["grace"], stored["cutoff"]) == (
        "yearly",
        "P14DT0.5S",
        "17:30:00",
    )


def test_a_row_other_sql_wrote_with_a_bad_datetime_dies_alone_with_the_reason(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    ran: list[datetime] = []

    @app.task
    def remind(when: datetime, user: uuid.UUID | None = None) -> None:
        ran.append(when)

    good = remind.defer_many([{"when": datetime(2026, 1, d, tzinfo=UTC)} for d in range(1, 4)])
    bad = insert_by_sql(db, "remind", """'{"when": "next tuesday"}'""")
    naive = insert_by_sql(db, "remind", """'{"when": "2026-01-05T10:00:00"}'""")
    nested = insert_by_sql(db, "remind", """'{"when": "2026-01-05T10:00Z", "user": "bob"}'""")
    by_sql = insert_by_sql(db, "remind", """'{"when": "2026-01-04T10:00:00+01:00"}'""")
    # One claim for all: the bad rows share a batch with the good ones.
    app.run_worker(burst=True, install_signal_handlers=False, concurrency=20)

    assert {job_state(db, i)[:2] for i in [*good, by_sql]} == {("succeeded", 1)}
    assert sorted(ran)[-1] == datetime(2026, 1, 4, 9, tzinfo=UTC)
    expected = {
        bad: "payload['when'] is 'next tuesday', not an ISO 8601 datetime",
        naive: "payload['when'] is '2026-01-05T10:00:00', a datetime without a UTC offset",
        nested: "argument 'user': payload['user'] is 'bob', not a UUID",
    }
    for job_id, said in expected.items():
        status, attempts, error = job_state(db, job_id)
        assert (status, attempts) == ("dead", 1)  # at once: retrying cannot convert it
        assert error is not None
        assert error.startswith("PayloadError: payload for task 'remind' does not convert")
        assert said in error


def test_a_payload_that_cannot_be_stored_writes_no_job(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    @app.task
    def remind(when: datetime) -> None: ...

    payloads = [{"when": datetime(2026, 1, 1, tzinfo=UTC)}, {"when": datetime(2026, 1, 2)}]
    with pytest.raises(cronbase.PayloadError, match=r"payload\['when'\] is datetime.datetime\("):
        remind.defer_many(payloads)
    with pytest.raises(cronbase.PayloadError, match="a naive datetime; give it a time zone"):
        asyncio.run(remind.defer_async(when=datetime(2026, 1, 2)))
    assert db.execute(f"SELECT count(*) FROM {SCHEMA}.jobs").fetchone() == (0,)


def test_a_date_argument_takes_a_midnight_datetime_and_refuses_a_later_one(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    got: list[date] = []

    @app.task
    def close_books(day: date) -> None:
        got.append(day)

    # mypy lets a datetime through where a date is asked for: a datetime is a date.
    midnight = close_books.defer(day=datetime(2026, 3, 1, tzinfo=TOKYO))
    said = (
        "payload for task 'close_books' does not convert to argument 'day': "
        "payload['day'] is '2026-03-02T09:00:00+00:00', a datetime with a time of day, not a "
        "date; pass a date (.date()), or a datetime at midnight"
    )
    with pytest.raises(cronbase.PayloadError) as refused:
        close_books.defer(day=datetime(2026, 3, 2, 9, tzinfo=UTC))
    assert str(refused.value) == said  # at defer, as the worker would say it
    assert [job.id for job in app.jobs.list()] == [midnight]  # nothing written
    # The same row written by other SQL dies on the worker with the same words.
    morning = insert_by_sql(db, "close_books", """'{"day": "2026-03-02T09:00:00+00:00"}'""")
    app.run_worker(burst=True, install_signal_handlers=False)

    assert got == [date(2026, 3, 1)]
    assert type(got[0]) is date
    assert job_state(db, midnight)[:2] == ("succeeded", 1)
    assert job_state(db, morning) == ("dead", 1, f"PayloadError: {said}")


def test_a_stored_value_of_another_json_type_kills_its_job_instead_of_reaching_the_handler(
    app: cronbase.App, db: psycopg.Connection[Any]
) -> None:
    got: list[Any] = []

    @app.task
    def charge(cents: int, note: str = "") -> None:
        got.append(cents)

    good = insert_by_sql(db, "charge", """'{"cents": 250}'""")
    text = insert_by_sql(db, "charge", """'{"cents": "abc"}'""")  # other SQL, an old release
    flag = insert_by_sql(db, "charge", """'{"cents": true}'""")
    app.run_worker(burst=True, install_signal_handlers=False)

    assert got == [250]
    assert job_state(db, good)[0] == "succeeded"
    prefix = "PayloadError: payload for task 'charge' does not convert to argument 'cents': "
    assert job_state(db, text) == ("dead", 1, prefix + "payload['cents'] is 'abc', not an int")
    assert job_state(db, flag) == ("dead", 1, prefix + "payload['cents'] is True, not an int")


# -- App(json_dumps=..., json_loads=...) -----------------------------------------------------------


class Codec:
    """orjson's shape over the json module (orjson is not installed): dumps returns bytes and
    takes datetimes, UUIDs, enums and dataclasses; loads counts what it read."""

    def __init__(self) -> None:
        self.loaded: list[str] = []
        self.lock = threading.Lock()

    def dumps(self, payload: dict[str, Any]) -> bytes:
        return json.dumps(payload, default=self._default, separators=(",", ":")).encode()

    def loads(self, text: str) -> Any:
        with self.lock:
            self.loaded.append(text)
        return json.loads(text, parse_float=Decimal)  # what a custom loads is for

    @staticmethod
    def _default(value: object) -> object:
        if isinstance(value, datetime | date | time):
            return value.isoformat()
        if isinstance(value, uuid.UUID | Decimal):
            return str(value)
        if isinstance(value, enum.Enum):
            return value.value
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.asdict(value)
        raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


@pytest.fixture
def codec_app(database_url: str, db: psycopg.Connection[Any]) -> Any:
    codec = Codec()
    app = cronbase.App(database_url, schema=SCHEMA, json_dumps=codec.dumps, json_loads=codec.loads)
    yield app, codec
    app.close()


def test_custom_dumps_writes_the_rows_and_custom_loads_reads_the_claim(
    codec_app: tuple[cronbase.App, Codec], db: psycopg.Connection[Any]
) -> None:
    app, codec = codec_app

    @app.task
    def weigh(parcel: Line, at: datetime, grams: float) -> None: ...

    at = datetime(2026, 1, 1, 12, tzinfo=UTC)
    job_id = weigh.defer(parcel=Line("box", Decimal("2.50")), at=at, grams=1.1)
    assert app.jobs.get(job_id).payload == {
        "parcel": {"sku": "box", "price": "2.50", "quantity": 1},
        "at": "2026-01-01T12:00:00+00:00",
        "grams": 1.1,
    }
    result = claim_jobs_sync(db, app.queries, claim_params(limit=10, worker="w"), app.db.json_loads)
    assert [j.id for j in result.jobs] == [job_id]
    assert result.jobs[0].payload["grams"] == Decimal("1.1")  # read by codec.loads
    assert len(codec.loaded) == 1


def test_custom_dumps_errors_name_the_task_and_write_nothing(
    codec_app: tuple[cronbase.App, Codec], db: psycopg.Connection[Any]
) -> None:
    app, _ = codec_app

    @app.task
    def export(rows: Any) -> None: ...

    with pytest.raises(cronbase.PayloadError) as caught:
        export.defer_many([{"rows": [1]}, {"rows": [{"ok": 1}, {"bad": {1, 2}}]}])
    assert str(caught.value) == (
        "payload for task 'export' cannot be stored as JSON: payload['rows'][1]['bad'] is "
        "{1, 2} (set), which JSON cannot hold; pass JSON values, datetime, date, time, "
        "timedelta, UUID, Decimal, Enum, dataclass, pydantic model"
    )
    with pytest.raises(cronbase.PayloadError, match="which PostgreSQL cannot store"):
        export.defer(rows="nul \x00 here")
    # The codec writes naive datetimes as they are; the same rule as without it refuses them.
    with pytest.raises(cronbase.PayloadError) as caught:
        export.defer(rows=[{"at": datetime(2026, 1, 1, 9)}])
    assert str(caught.value) == (
        "payload for task 'export' cannot be stored as JSON: payload['rows'][0]['at'] is "
        "datetime.datetime(2026, 1, 1, 9, 0), a naive datetime; give it a time zone "
        "(datetime.now(UTC), .replace(tzinfo=UTC))"
    )
    assert db.execute(f"SELECT count(*) FROM {SCHEMA}.jobs").fetchone() == (0,)


def test_a_worker_decodes_payloads_with_custom_loads(
    codec_app: tuple[cronbase.App, Codec], db: psycopg.Connection[Any]
) -> None:
    app, codec = codec_app
    got: list[Any] = []

    @app.task
    def weigh(grams: Any) -> None:
        got.append(grams)

    weigh.defer(grams=1.1)
    app.run_worker(burst=True, install_signal_handlers=False)
    assert got == [Decimal("1.1")]  # parse_float=Decimal: 1.1 as written, not the float
    assert len(codec.loaded) == 1


# -- the guide's example ---------------------------------------------------------------------------


def test_the_example_refuses_a_naive_datetime_and_bills_in_the_handlers_types(
    database_url: str, db: psycopg.Connection[Any]
) -> None:
    result = run_example("payload_types", cli_env(database_url))
    assert result.stdout.splitlines() == [
        "payload for task 'send_bill' cannot be stored as JSON: payload['due'] is "
        "datetime.datetime(2026, 3, 1, 9, 0), a naive datetime; give it a time zone "
        "(datetime.now(UTC), .replace(tzinfo=UTC))",
        "YEARLY bill of 108.70 for 0b8c7e1e-4f7a-4c55-9d43-5a1f0e2b6c11, due 2026-03-15T09:00+00:00",
    ]
