"""Payload types: what encode_payload writes comes back, through JSON, as the handler's annotated
types; what cannot is refused naming where. No database: the App below never connects."""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated, Any, NewType, Optional
from zoneinfo import ZoneInfo

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cronbase
from cronbase.errors import PayloadError
from cronbase.payload.converters import parse_duration
from cronbase.payload.encode import encode_payload, format_duration
from cronbase.worker.claim import CLAIMED_COLUMNS, read_rows

if TYPE_CHECKING:
    from decimal import Context  # only for the type checker: never resolvable at run time

NOWHERE = "postgresql://nobody@127.0.0.1:1/never"
BERLIN_SUMMER = timezone(timedelta(hours=2))
BERLIN = ZoneInfo("Europe/Berlin")


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Pair(enum.Enum):
    ORIGIN = (0, 0)
    DAY = (date(2026, 1, 1), "new year")  # a value JSON changes: a tuple and a date


class Opaque(enum.Enum):
    TOKEN = object()  # a value JSON cannot hold: the member cannot be sent


@dataclasses.dataclass
class Line:
    sku: str
    price: Decimal
    quantity: int = 1


@dataclasses.dataclass
class Order:
    id: uuid.UUID
    placed_at: datetime
    lines: list[Line]
    color: Color | None = None
    total: Decimal = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.total = sum((line.price * line.quantity for line in self.lines), Decimal(0))


@dataclasses.dataclass
class Node:
    name: str
    children: list[Node] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Positive:
    n: int

    def __post_init__(self) -> None:
        if self.n <= 0:
            raise ValueError(f"n must be positive, got {self.n}")


class Address(pydantic.BaseModel):
    city: str
    since: date


class Customer(pydantic.BaseModel):
    id: uuid.UUID
    joined_at: datetime
    addresses: list[Address]
    credit: Decimal


UserId = NewType("UserId", uuid.UUID)
ORDER = Order(
    id=uuid.UUID("0b8c7e1e-4f7a-4c55-9d43-5a1f0e2b6c11"),
    placed_at=datetime(2026, 2, 27, 9, 30, 0, 123456, tzinfo=BERLIN_SUMMER),
    lines=[Line("seat", Decimal("19.90"), 3), Line("support", Decimal("49.00"))],
    color=Color.GREEN,
)
CUSTOMER = Customer(
    id=uuid.uuid4(),
    joined_at=datetime(2020, 1, 1, tzinfo=UTC),
    addresses=[Address(city="Berlin", since=date(2021, 5, 1))],
    credit=Decimal("10.05"),
)


@pytest.fixture
def app() -> cronbase.App:
    return cronbase.App(database_url=NOWHERE)


def taking(app: cronbase.App, annotation: Any, name: str = "handler") -> cronbase.Task[Any, Any]:
    """A task whose one argument ``value`` is annotated ``annotation`` (an object, not text)."""

    def handler(value: Any = None) -> None: ...

    handler.__annotations__ = {"value": annotation, "return": None}
    return app.task(name=name)(handler)


def through_json(task: cronbase.Task[Any, Any], **payload: Any) -> dict[str, Any]:
    """What the handler gets: the payload as stored (encode_payload), read back, converted."""
    task.check_payload(payload)
    return task.arguments(json.loads(encode_payload(task.name, payload)))


ROUND_TRIPS: list[tuple[Any, Any]] = [
    (datetime, datetime(2026, 2, 27, 9, 30, 0, 123456, tzinfo=BERLIN_SUMMER)),
    (datetime, datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC)),
    (date, date(2026, 2, 28)),
    (time, time(9, 30, 15, 500)),
    (time, time(9, 30, tzinfo=UTC)),
    (timedelta, timedelta(days=3, hours=4, microseconds=7)),
    (timedelta, timedelta(seconds=-1)),
    (timedelta, timedelta(0)),
    (uuid.UUID, uuid.UUID("0b8c7e1e-4f7a-4c55-9d43-5a1f0e2b6c11")),
    (Decimal, Decimal("19.90")),  # the trailing zero stays: exact
    (Decimal, Decimal("-1.000000000000000000000000000001")),
    (Decimal, Decimal("1E+30")),
    (Color, Color.RED),
    (Level, Level.HIGH),
    (Pair, Pair.ORIGIN),
    (Pair, Pair.DAY),
    (Line, Line("seat", Decimal("0.10"))),
    (Order, ORDER),
    (Node, Node("root", [Node("a", [Node("a1")]), Node("b")])),
    (Customer, CUSTOMER),
    (list[Customer], [CUSTOMER, CUSTOMER]),
    (list[Line], [Line("a", Decimal(1)), Line("b", Decimal("2.5"), 2)]),
    (Sequence[date], [date(2026, 1, 1)]),
    (tuple[date, ...], (date(2026, 1, 1), date(2026, 1, 2))),
    (tuple[int, ...], (1, 2, 3)),
    (tuple[uuid.UUID, Decimal], (uuid.UUID(int=5), Decimal("0.5"))),
    (dict[str, datetime], {"start": datetime(2026, 1, 1, tzinfo=UTC)}),
    (Mapping[str, list[Color]], {"a": [Color.RED], "b": []}),
    (Optional[datetime], datetime(2026, 1, 1, tzinfo=UTC)),  # noqa: UP045 - the old spelling
    (Optional[datetime], None),  # noqa: UP045
    (datetime | None, None),
    (Line | None, Line("x", Decimal(2))),
    (datetime | Line, Line("x", Decimal(2))),
    (int | Decimal, 5),
    (int | Decimal, Decimal("5.5")),
    (Annotated[Decimal, "money"], Decimal("3.30")),
    (UserId, UserId(uuid.UUID(int=7))),
]


@pytest.mark.parametrize(("annotation", "value"), ROUND_TRIPS, ids=repr)
def test_a_value_arrives_as_its_annotation_asks(
    app: cronbase.App, annotation: Any, value: Any
) -> None:
    got = through_json(taking(app, annotation), value=value)["value"]
    assert got == value
    assert type(got) is type(value)
    if isinstance(value, list | tuple):
        assert [type(x) for x in got] == [type(x) for x in value]


def test_an_aware_datetime_keeps_its_offset_and_a_decimal_its_digits(app: cronbase.App) -> None:
    got = through_json(taking(app, Order), value=ORDER)["value"]
    assert got.placed_at.utcoffset() == timedelta(hours=2)
    assert got.placed_at == ORDER.placed_at
    assert str(got.lines[0].price) == "19.90"
    assert got.total == Decimal("108.70")  # __post_init__ ran on the converted fields
    stored = json.loads(encode_payload("t", {"order": ORDER}))["order"]
    assert stored["placed_at"] == "2026-02-27T09:30:00.123456+02:00"
    assert stored["color"] == "green"  # an Enum as its value
    assert stored["lines"][0] == {"sku": "seat", "price": "19.90", "quantity": 3}


def test_what_is_stored_for_each_type(app: cronbase.App) -> None:
    stored = json.loads(
        encode_payload(
            "t",
            {
                "at": datetime(2026, 1, 1, tzinfo=UTC),
                "day": date(2026, 1, 1),
                "gap": timedelta(days=1, hours=2, minutes=3, seconds=4.5),
                "id": uuid.UUID(int=1),
                "money": Decimal("0.10"),
                "level": Level.HIGH,
                "pair": Pair.DAY,
                "model": Address(city="Rome", since=date(2020, 2, 29)),
            },
        )
    )
    assert stored == {
        "at": "2026-01-01T00:00:00+00:00",
        "day": "2026-01-01",
        "gap": "P1DT2H3M4.5S",
        "id": "00000000-0000-0000-0000-000000000001",
        "money": "0.10",
        "level": 2,
        "pair": ["2026-01-01", "new year"],
        "model": {"city": "Rome", "since": "2020-02-29"},
    }


@pytest.mark.parametrize(
    "sent",
    [
        datetime(2026, 3, 1, tzinfo=UTC),
        datetime(2026, 3, 1, tzinfo=timezone(timedelta(hours=9))),  # its own date, not UTC's
        datetime(2026, 3, 1, tzinfo=BERLIN),
    ],
    ids=repr,
)
def test_a_date_argument_takes_a_datetime_at_midnight_as_its_date(
    app: cronbase.App, sent: datetime
) -> None:
    task = taking(app, date)
    got = through_json(task, value=sent)["value"]
    assert (got, type(got)) == (date(2026, 3, 1), date)
    in_process = task.arguments({"value": sent})["value"]  # no JSON on the way: the object
    assert (in_process, type(in_process)) == (date(2026, 3, 1), date)


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("2026-03-01T09:00:00+00:00", "'2026-03-01T09:00:00+00:00'"),  # as a worker reads it
        (datetime(2026, 3, 1, 0, 0, 1, tzinfo=UTC), "datetime.datetime(2026, 3, 1, 0, 0, 1, "),
    ],
)
def test_a_date_argument_refuses_a_datetime_with_a_time_of_day(
    app: cronbase.App, stored: Any, shown: str
) -> None:
    task = taking(app, list[date], "close_books")
    with pytest.raises(PayloadError) as caught:
        task.arguments({"value": [stored]})
    message = str(caught.value)
    assert message.startswith(
        "payload for task 'close_books' does not convert to argument 'value': "
        f"payload['value'][0] is {shown}"
    )
    assert message.endswith(
        ", a datetime with a time of day, not a date; pass a date (.date()), "
        "or a datetime at midnight"
    )


@pytest.mark.parametrize("annotation", [date | datetime, datetime | date, date | datetime | None])
def test_a_union_of_date_and_datetime_keeps_each_as_it_was(
    app: cronbase.App, annotation: Any
) -> None:
    task = taking(app, annotation)
    midnight = datetime(2026, 3, 1, tzinfo=UTC)
    assert through_json(task, value=midnight)["value"] == midnight
    assert type(through_json(task, value=midnight)["value"]) is datetime
    assert type(through_json(task, value=date(2026, 3, 1))["value"]) is date


def test_a_task_of_plain_json_types_checks_its_values_without_copying_them(
    app: cronbase.App,
) -> None:
    @app.task
    def plain(
        a: int, b: str, c: float, d: bool, e: list[int], f: dict[str, Any], g: Any = None
    ) -> None: ...

    assert plain._conversions is not None
    assert "g" not in plain._conversions.arguments  # Any: nothing to check
    payload = {"a": 1, "b": "x", "c": 1.5, "d": True, "e": [1], "f": {"k": [1]}, "g": None}
    got = plain.arguments(payload)
    assert got == payload
    assert got["e"] is payload["e"]  # a list of ints is checked, not rebuilt

    @app.task
    def unannotated(when, count=0):  # type: ignore[no-untyped-def]
        ...

    assert unannotated._conversions is None  # arguments() and defers skip the step entirely
    assert unannotated.arguments({"when": "2026-01-01"}) == {"when": "2026-01-01"}


def test_values_already_of_their_type_and_none_pass_as_they_are(app: cronbase.App) -> None:
    # What an in-process run (no JSON on the way) hands over; None for an argument that
    # defaults to it, whatever its annotation.
    task = taking(app, list[Order])
    assert task.arguments({"value": [ORDER]})["value"][0] is ORDER
    assert task.arguments({"value": None}) == {"value": None}
    assert taking(app, datetime, "t2").arguments({}) == {}


def test_scheduled_at_still_arrives_as_a_datetime(app: cronbase.App) -> None:
    @app.task
    def nightly(scheduled_at: datetime, keep: timedelta) -> None: ...

    @app.task
    def loose(scheduled_at, **rest):  # type: ignore[no-untyped-def]
        ...

    slot = "2026-01-01T02:00:00+01:00"
    assert nightly.arguments({"scheduled_at": slot, "keep": "P7D"}) == {
        "scheduled_at": datetime.fromisoformat(slot),
        "keep": timedelta(days=7),
    }
    assert loose.arguments({"scheduled_at": slot})["scheduled_at"] == datetime.fromisoformat(slot)


# -- refused at defer time -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        (
            {"items": [1, 2, 3, {"when": datetime(2026, 1, 1)}]},
            "payload['items'][3]['when'] is datetime.datetime(2026, 1, 1, 0, 0), a naive datetime",
        ),
        ({"line": Line("a", {1, 2})}, "payload['line']['price'] is {1, 2} (set)"),  # type: ignore[arg-type]
        ({"color": [Pair.ORIGIN, b"raw"]}, "payload['color'][1] is b'raw' (bytes)"),
        ({"note": Node("x\x00y")}, "payload['note']['name'] contains a NUL character"),
        ({"when": {"at": time(1), "many": frozenset({1})}}, "payload['when']['many'] is frozenset"),
        ({"k": {Color.RED: 1}}, "payload['k'] has the key <Color.RED: 'red'>; JSON object keys"),
        (  # the member, not only the value inside it
            {"plan": [Opaque.TOKEN]},
            "payload['plan'][0] is <Opaque.TOKEN: <object object at 0x",
        ),
        (
            {"plan": Opaque.TOKEN},
            ">>, whose value is <object object at 0x",
        ),
        (  # a zone's offset depends on the date, which a time has not: it would be lost
            {"shift": {"opens": time(9, tzinfo=BERLIN)}},
            "payload['shift']['opens'] is datetime.time(9, 0, tzinfo=zoneinfo.ZoneInfo(key='Europe/...,"
            " a time in a zone with no fixed offset (it depends on the date); pass a datetime, "
            "or a time with a fixed-offset timezone (timezone(timedelta(hours=1)))",
        ),
    ],
)
def test_what_cannot_be_stored_is_refused_naming_where(payload: Any, named: str) -> None:
    with pytest.raises(PayloadError) as caught:
        encode_payload("import_orders", payload)
    message = str(caught.value)
    assert message.startswith("payload for task 'import_orders' cannot be stored as JSON: ")
    assert named in message
    assert "\n" not in message


def test_a_zoned_datetime_comes_back_at_the_same_instant_with_a_fixed_offset(
    app: cronbase.App,
) -> None:
    # ISO 8601 has offsets, not zone names: Europe/Berlin in winter comes back as +01:00.
    sent = datetime(2026, 1, 15, 9, 30, tzinfo=BERLIN)
    got = through_json(taking(app, datetime), value=sent)["value"]
    assert got == sent
    assert got.tzinfo == timezone(timedelta(hours=1))
    assert (got.tzname(), sent.tzname()) == ("UTC+01:00", "CET")


def test_a_time_with_a_fixed_offset_keeps_it(app: cronbase.App) -> None:
    task = taking(app, time)
    for zone in (BERLIN_SUMMER, ZoneInfo("UTC")):  # a ZoneInfo without rules has one offset
        sent = time(9, 30, tzinfo=zone)
        got = through_json(task, value=sent)["value"]
        assert (got, got.utcoffset()) == (sent, sent.utcoffset())


def test_a_dataclass_that_contains_itself_is_refused() -> None:
    node = Node("loop")
    node.children.append(node)
    with pytest.raises(PayloadError, match=r"payload\['tree'\]\['children'\]\[0\] contains itself"):
        encode_payload("t", {"tree": node})


def test_a_model_pydantic_cannot_dump_is_refused() -> None:
    class Holder(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
        thing: object

    with pytest.raises(PayloadError, match=r"payload\['h'\] is a Holder that pydantic cannot dump"):
        encode_payload("t", {"h": Holder(thing=object())})


def test_the_size_limit_counts_the_json_as_stored() -> None:
    many = {"lines": [Line("x" * 10, Decimal("1.00"))] * 50}
    size = len(encode_payload("t", many))
    assert size > 1000
    with pytest.raises(PayloadError, match=f"is {size:,} bytes of JSON, more than the 1,000"):
        encode_payload("t", many, 1000)


# -- refused at handler time -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotation", "value", "said"),
    [
        (datetime, "next tuesday", "payload['value'] is 'next tuesday', not an ISO 8601 datetime"),
        (datetime, 1767225600, "payload['value'] is 1767225600, not an ISO 8601 datetime"),
        (datetime, "2026-01-01T10:00:00", "'2026-01-01T10:00:00', a datetime without a UTC offset"),
        (date, "2026-02-30", "payload['value'] is '2026-02-30', not an ISO 8601 date"),
        (time, "25:00", "is '25:00', not an ISO 8601 time"),
        (timedelta, "3 days", "is '3 days', not an ISO 8601 duration or a number of seconds"),
        (timedelta, True, "is True, not an ISO 8601 duration"),
        (uuid.UUID, "not-a-uuid", "payload['value'] is 'not-a-uuid', not a UUID"),
        (Decimal, "1,5", "payload['value'] is '1,5', not a decimal number"),
        (Decimal, [1], "is [1], not a decimal number"),
        (Color, "blue", "payload['value'] is 'blue', not a value of Color ('red', 'green')"),
        (list[datetime], ["2026-01-01T00:00Z", "x"], "payload['value'][1] is 'x', not an ISO"),
        (list[Line], {"sku": "a"}, "payload['value'] is {'sku': 'a'}, not a list"),
        (
            list[Order],
            [{"id": str(uuid.UUID(int=1)), "placed_at": "2026-01-01T00:00Z", "lines": [{}]}],
            "payload['value'][0]['lines'][0] does not make a Line: ",
        ),
        (Line, {"sku": "a", "price": "1", "qty": 2}, "has the key 'qty', which Line does not take"),
        (Line, "seat", "payload['value'] is 'seat', not an object for Line"),
        (dict[str, uuid.UUID], {"a": "b"}, "payload['value']['a'] is 'b', not a UUID"),
        (tuple[int, date], [1], "payload['value'] is [1], not a list of 2"),
        (datetime | Line, 5, "payload['value'] is 5, which is none of datetime | Line"),
        (Customer, {"id": "x"}, "payload['value'] does not validate as Customer: id: Input should"),
        (Positive, {"n": -1}, "-1} raised ValueError: n must be positive, got -1"),
    ],
)
def test_a_value_that_does_not_convert_names_task_argument_and_value(
    app: cronbase.App, annotation: Any, value: Any, said: str
) -> None:
    task = taking(app, annotation, "remind")
    with pytest.raises(PayloadError) as caught:
        task.arguments({"value": value})
    message = str(caught.value)
    assert message.startswith("payload for task 'remind' does not convert to argument 'value': ")
    assert said in message
    assert "\n" not in message


# -- annotations resolved late or never ------------------------------------------------------------


def test_an_annotation_defined_after_the_handler_is_resolved_on_the_first_job(
    app: cronbase.App,
) -> None:
    @app.task
    def ship(parcel: Crate, at: datetime) -> None: ...  # noqa: F821 - defined below

    assert ship._conversions is not None
    assert not ship._conversions.arguments  # not resolved: Crate is not defined yet
    globals()["Crate"] = Parcel  # as a class defined further down the handler's module is
    try:
        got = ship.arguments({"parcel": {"weight": "2.50"}, "at": "2026-01-01T00:00Z"})
    finally:
        del globals()["Crate"]
    assert got == {"parcel": Parcel(Decimal("2.50")), "at": datetime(2026, 1, 1, tzinfo=UTC)}
    assert ship._conversions is not None
    assert ship._conversions.arguments == ["parcel", "at"]


def test_a_name_never_defined_leaves_only_its_argument_unconverted(
    app: cronbase.App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task
    def precise(ctx: Context, at: datetime) -> None: ...

    with caplog.at_level(logging.WARNING, logger="cronbase"):
        got = precise.arguments({"ctx": {"prec": 5}, "at": "2026-01-01T00:00Z"})
        precise.arguments({"ctx": {}, "at": "2026-01-01T00:00Z"})
    assert got == {"ctx": {"prec": 5}, "at": datetime(2026, 1, 1, tzinfo=UTC)}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # resolved once, not on every job
    assert "cannot resolve the annotation of argument 'ctx'" in warnings[0]
    assert "'Context'" in warnings[0]


# -- durations -------------------------------------------------------------------------------------


@given(st.timedeltas())
def test_every_timedelta_survives_its_iso_duration(delta: timedelta) -> None:
    text = format_duration(delta)
    assert parse_duration(text) == delta
    assert pydantic.TypeAdapter(timedelta).validate_python(text) == delta


@given(st.timedeltas(min_value=timedelta(days=-9999), max_value=timedelta(days=9999)))
def test_pydantic_durations_are_read_as_pydantic_reads_them(delta: timedelta) -> None:
    written = pydantic.TypeAdapter(timedelta).dump_python(delta, mode="json")  # P1Y35D...
    assert parse_duration(written) == delta


@pytest.mark.parametrize(
    ("text", "delta"),
    [
        ("P1W", timedelta(weeks=1)),
        ("-P1DT1H", -timedelta(days=1, hours=1)),
        ("+PT0.000001S", timedelta(microseconds=1)),
        ("PT1.5H", timedelta(minutes=90)),
        ("P1Y2M", timedelta(days=365 + 60)),
    ],
)
def test_iso_durations_are_read(text: str, delta: timedelta) -> None:
    assert parse_duration(text) == delta


@pytest.mark.parametrize("text", ["P", "PT", "1 day", "P1.2.3D", "PT-1S", "P1S", "p1d", ""])
def test_what_is_not_an_iso_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not an ISO 8601 duration"):
        parse_duration(text)


def test_a_number_of_seconds_is_read_as_a_duration(app: cronbase.App) -> None:
    task = taking(app, timedelta)
    assert task.arguments({"value": 90})["value"] == timedelta(seconds=90)
    assert task.arguments({"value": 0.5})["value"] == timedelta(milliseconds=500)


# -- App(json_dumps=..., json_loads=...) -----------------------------------------------------------


def orjson_like(payload: dict[str, Any]) -> bytes:
    """What orjson.dumps does for these types (it returns bytes), over the json module."""

    def default(value: object) -> object:
        if isinstance(value, datetime | date):
            return value.isoformat()
        if isinstance(value, uuid.UUID | Decimal):
            return str(value)
        if isinstance(value, enum.Enum):
            return value.value
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.asdict(value)
        raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")

    return json.dumps(payload, default=default, separators=(",", ":")).encode()


def test_custom_dumps_gets_what_the_default_encoder_would_write() -> None:
    got: list[dict[str, Any]] = []

    def dumps(payload: dict[str, Any]) -> bytes:
        got.append(payload)
        return orjson_like(payload)

    plain = {"n": 1, "tags": ["a"]}
    encode_payload("t", plain, dumps=dumps)
    assert got.pop() is plain  # JSON's own types: handed over as they are, no copy
    text = encode_payload("t", {"order": ORDER, "gap": timedelta(hours=1)}, dumps=dumps)
    assert got.pop() == json.loads(encode_payload("t", {"order": ORDER, "gap": timedelta(hours=1)}))
    assert json.loads(text)["gap"] == "PT1H"  # not orjson's own idea of a timedelta


@pytest.mark.parametrize(
    ("payload", "said"),
    [
        (  # orjson would write it: the worker would then refuse it
            {"when": [datetime(2026, 1, 1)]},
            "payload['when'][0] is datetime.datetime(2026, 1, 1, 0, 0), a naive datetime",
        ),
        ({"rate": float("nan")}, "payload['rate'] is nan, which JSON cannot hold"),  # orjson: null
        ({"k": {1: "a"}}, "payload['k'] has the key 1; JSON object keys are strings"),
        ({"day": Opaque.TOKEN}, "payload['day'] is <Opaque.TOKEN: <object object at 0x"),
    ],
)
def test_custom_dumps_is_held_to_the_same_rules(payload: dict[str, Any], said: str) -> None:
    calls: list[object] = []

    def dumps(payload: dict[str, Any]) -> bytes:
        calls.append(payload)
        return orjson_like(payload)

    with pytest.raises(PayloadError) as caught:
        encode_payload("export", payload, dumps=dumps)
    assert str(caught.value).startswith(
        f"payload for task 'export' cannot be stored as JSON: {said}"
    )
    assert calls == []


def test_custom_dumps_may_return_bytes_and_is_still_checked() -> None:
    text = encode_payload("t", {"order": ORDER, "é": "ü"}, dumps=orjson_like)
    assert isinstance(text, str)
    assert json.loads(text)["order"]["placed_at"] == "2026-02-27T09:30:00.123456+02:00"
    with pytest.raises(PayloadError, match="is 1,008 bytes of JSON, more than the 1,000 allowed"):
        encode_payload("t", {"s": "x" * 1000}, 1000, dumps=orjson_like)


@pytest.mark.parametrize(
    ("dumps", "said"),
    [
        (lambda p: "[1, 2]", "json_dumps wrote '[1, 2]', not a JSON object"),
        (lambda p: b"\xff{}", "json_dumps wrote bytes that are not UTF-8"),
        (lambda p: 42, "json_dumps must return str or bytes, got int 42"),
        (lambda p: '{"a": "\\u0000"}', "json_dumps wrote \\u0000, which PostgreSQL cannot store"),
        (json.dumps, "payload['x']['deep'] contains a NUL character"),
        (orjson_like, "payload['when'][0] is {1} (set), which JSON cannot hold"),
        (lambda p: 1 / 0, "json_dumps raised ZeroDivisionError: division by zero"),
    ],
)
def test_custom_dumps_failures_name_the_task_and_where(
    dumps: Callable[[dict[str, Any]], Any], said: str
) -> None:
    payload: dict[str, Any] = {"x": {"deep": "a\x00b"}} if dumps is json.dumps else {}
    if dumps is orjson_like:
        payload = {"when": [{1}]}
    with pytest.raises(PayloadError) as caught:
        encode_payload("export", payload, dumps=dumps)
    message = str(caught.value)
    assert message.startswith("payload for task 'export' cannot be stored as JSON: ")
    assert said in message


def test_an_escaped_backslash_before_u0000_is_not_a_nul() -> None:
    # The JSON text \\u0000 is a backslash and "u0000", which jsonb stores.
    assert encode_payload("t", {"path": "C:\\u0000"}, dumps=json.dumps) == '{"path": "C:\\\\u0000"}'


def test_the_codec_must_be_functions() -> None:
    with pytest.raises(cronbase.ConfigurationError, match="json_dumps must be a function"):
        cronbase.App(database_url=NOWHERE, json_dumps="orjson")  # type: ignore[arg-type]
    with pytest.raises(cronbase.ConfigurationError, match="json_loads must be a function"):
        cronbase.App(database_url=NOWHERE, json_loads=5)  # type: ignore[arg-type]
    app = cronbase.App(database_url=NOWHERE, json_dumps=orjson_like)
    assert app.db.json_dumps is orjson_like
    assert app.db.json_loads is json.loads


def claimed_row(job_id: int, payload: str) -> tuple[Any, ...]:
    return (job_id, "t", "default", payload, 100, 1, 20, uuid.uuid4(), 60.0, None, None, None)


def test_read_rows_decodes_payloads_with_the_given_loads() -> None:
    seen: list[str] = []

    def loads(text: str) -> Any:
        seen.append(text)
        if "boom" in text:
            raise ValueError("cannot read boom")
        return json.loads(text)

    rows = [claimed_row(1, '{"a": 1}'), claimed_row(2, '{"boom": 1}')]
    result = read_rows(rows, (*CLAIMED_COLUMNS,), loads)
    assert seen == ['{"a": 1}', '{"boom": 1}']
    assert [(j.id, j.payload) for j in result.jobs] == [(1, {"a": 1})]
    assert [(u.job.id, str(u.error)) for u in result.undecodable] == [(2, "cannot read boom")]


@dataclasses.dataclass
class Parcel:
    weight: Decimal
