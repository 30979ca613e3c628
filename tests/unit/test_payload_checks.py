"""Values are checked at the door: a defer refuses a value its handler's annotation refuses, with
the words the worker would use, and accepts exactly what the worker will convert (a property
test of that agreement). No database: the App below never connects."""

from __future__ import annotations

import dataclasses
import enum
import json
import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, Optional

import pydantic
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import cronbase
from cronbase.errors import PayloadError
from cronbase.payload import encode_payload

if TYPE_CHECKING:
    from decimal import Context  # only for the type checker: never resolvable at run time

NOWHERE = "postgresql://nobody@127.0.0.1:1/never"
DAY = date(2026, 3, 1)
ID = uuid.UUID("0b8c7e1e-4f7a-4c55-9d43-5a1f0e2b6c11")


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclasses.dataclass
class Line:
    sku: str
    price: Decimal
    quantity: int = 1


class Address(pydantic.BaseModel):
    city: str
    since: date


@pytest.fixture
def app() -> cronbase.App:
    return cronbase.App(database_url=NOWHERE)


def taking(app: cronbase.App, annotation: Any, name: str = "handler") -> cronbase.Task[Any, Any]:
    """A task whose one argument ``value`` is annotated ``annotation`` (an object, not text)."""

    def handler(value: Any) -> None: ...

    handler.__annotations__ = {"value": annotation, "return": None}
    return app.task(name=name)(handler)


def refusal(task: cronbase.Task[Any, Any], **payload: Any) -> str:
    with pytest.raises(PayloadError) as caught:
        task.check_payload(payload)
    message = str(caught.value)
    assert "\n" not in message
    return message


# -- the handler -----------------------------------------------------------------------


def test_a_value_its_annotation_refuses_is_refused_at_defer_naming_the_path(
    app: cronbase.App,
) -> None:
    @app.task
    def typed(n: int, d: date, u: uuid.UUID) -> None: ...

    good = {"n": 1, "d": DAY, "u": ID}
    prefix = "payload for task 'typed' does not convert to argument"
    assert refusal(typed, **{**good, "n": "abc"}) == (
        f"{prefix} 'n': payload['n'] is 'abc', not an int"
    )
    assert refusal(typed, **{**good, "d": "not a date"}) == (
        f"{prefix} 'd': payload['d'] is 'not a date', not an ISO 8601 date"
    )
    assert refusal(typed, **{**good, "u": 5}) == f"{prefix} 'u': payload['u'] is 5, not a UUID"
    # Python objects, and their JSON text, are what the handler will get: both accepted.
    typed.check_payload(good)
    typed.check_payload({"n": 1, "d": DAY.isoformat(), "u": str(ID)})
    typed.check_payload({"n": 1, "d": datetime(2026, 3, 1, tzinfo=UTC), "u": ID})  # midnight


def test_the_worker_refuses_what_a_defer_refuses_in_the_same_words(app: cronbase.App) -> None:
    @app.task
    def typed(n: int, d: date, u: uuid.UUID) -> None: ...

    stored = {"n": "abc", "d": "2026-03-01", "u": str(ID)}  # as other SQL could write it
    with pytest.raises(PayloadError) as at_run:
        typed.arguments(stored)
    assert str(at_run.value) == refusal(typed, **stored)


# -- int, float, bool: strict, as the converters are at run time --------------------------------

ACCEPTED: list[tuple[Any, Any]] = [
    (int, 5),
    (int, -(2**70)),
    (int, Level.HIGH),  # an IntEnum is stored as its number
    (int, None),  # JSON null passes every annotation, as a workflow's dead parent sends it
    (float, 1.5),
    (float, 2),  # an int is a float's value
    (bool, False),
    (str, "x"),
    (str, DAY),  # stored as its ISO text, which is a string: the handler gets "2026-03-01"
    (str, Color.RED),  # stored as "red"
    (list, (1, "a")),  # a tuple is stored as a list
    (dict, Line("a", Decimal(1))),  # a dataclass is stored as an object
    (list[int], [1, 2, Level.LOW]),
    (Sequence[date], [DAY, "2026-01-01"]),
    (dict[str, int], {"a": 1}),
    (Mapping[str, date], {"a": DAY}),
    (Optional[int], None),  # noqa: UP045 - the old spelling
    (int | None, 3),
    (int | str, "x"),
    (int | Decimal, Decimal("1.5")),
    (Literal["a", "b"], "a"),
    (Literal[1, None], None),
    (Color, "red"),
    (Color, Color.GREEN),
    (Level, 2),
    (Line, {"sku": "a", "price": "1.5"}),
    (Line, Line("a", Decimal("1.5"))),
    (list[Line], [Line("a", Decimal(1)), {"sku": "b", "price": 2}]),
    (Address, Address(city="Kyoto", since=DAY)),
    (Address, {"city": "Kyoto", "since": "2019-04-01"}),
    (tuple[int, str], [1, "a"]),
    (tuple[date, ...], (DAY, DAY)),
    (timedelta, 90),  # a number of seconds, as other SQL may write one
    (timedelta, timedelta(hours=1)),
    (Decimal, 1.5),
    (datetime, datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2)))),
    (time, time(9, 30)),
    (Any, object()),  # Any: anything JSON can hold... and the encoder decides the rest
]


@pytest.mark.parametrize(("annotation", "value"), ACCEPTED, ids=repr)
def test_values_of_the_annotated_type_or_its_stored_form_are_accepted(
    app: cronbase.App, annotation: Any, value: Any
) -> None:
    taking(app, annotation).check_payload({"value": value})


REFUSED: list[tuple[Any, Any, str]] = [
    (int, "12", "payload['value'] is '12', not an int"),
    (int, True, "payload['value'] is True, not an int"),
    (int, 1.0, "payload['value'] is 1.0, not an int"),
    (float, "1.5", "payload['value'] is '1.5', not a number"),
    (float, False, "payload['value'] is False, not a number"),
    (float, Decimal("1.5"), "payload['value'] is '1.5', not a number"),  # stored as text
    (bool, 1, "payload['value'] is 1, not a bool (true or false)"),
    (str, 5, "payload['value'] is 5, not a string"),
    (list, "abc", "payload['value'] is 'abc', not a list"),
    (dict, [1], "payload['value'] is [1], not an object"),
    (list[int], [1, "2"], "payload['value'][1] is '2', not an int"),
    (Sequence[int], "12", "payload['value'] is '12', not a list"),
    (dict[str, date], {"a": "soon"}, "payload['value']['a'] is 'soon', not an ISO 8601 date"),
    (Optional[int], "1", "payload['value'] is '1', not an int"),  # noqa: UP045
    (int | str, 1.5, "payload['value'] is 1.5, which is none of int | str"),
    (int | str, True, "payload['value'] is True, which is none of int | str"),
    (Literal["a", "b"], "c", "payload['value'] is 'c', not one of 'a', 'b'"),
    (Literal[1], True, "payload['value'] is True, not one of 1"),
    (Color, "blue", "payload['value'] is 'blue', not a value of Color ('red', 'green')"),
    (Line, {"sku": 5, "price": "1"}, "payload['value']['sku'] is 5, not a string"),
    (Line, Line(5, Decimal(1)), "payload['value']['sku'] is 5, not a string"),  # type: ignore[arg-type]
    (list[Line], [{"sku": "a"}], "payload['value'][0] does not make a Line: "),
    (Address, {"city": "Kyoto"}, "payload['value'] does not validate as Address: since: Field"),
    (tuple[int, str], [1, 2], "payload['value'][1] is 2, not a string"),
    (date, datetime(2026, 1, 1, 9, tzinfo=UTC), "a datetime with a time of day, not a date"),
    (datetime, "2026-01-01T09:00", "a datetime without a UTC offset; write one (+00:00)"),
    (uuid.UUID, 5, "payload['value'] is 5, not a UUID"),
]


@pytest.mark.parametrize(("annotation", "value", "said"), REFUSED, ids=repr)
def test_a_value_of_another_type_is_refused_at_defer_naming_where(
    app: cronbase.App, annotation: Any, value: Any, said: str
) -> None:
    message = refusal(taking(app, annotation, "remind"), value=value)
    assert message.startswith("payload for task 'remind' does not convert to argument 'value': ")
    assert said in message


def test_a_value_that_cannot_be_stored_says_so_as_the_encoder_would(app: cronbase.App) -> None:
    task = taking(app, list[int])
    message = refusal(task, value=[1, {2}])
    assert message == (
        "payload for task 'handler' cannot be stored as JSON: payload['value'][1] is {2} (set), "
        "which JSON cannot hold; pass JSON values, datetime, date, time, timedelta, UUID, "
        "Decimal, Enum, dataclass, pydantic model"
    )


def test_unannotated_and_any_arguments_pass_anything_json_holds(app: cronbase.App) -> None:
    @app.task
    def loose(a, b: Any, c: object = None, **rest):  # type: ignore[no-untyped-def]
        ...

    assert loose._conversions is None  # the defer's fast path: keys only
    loose.check_payload({"a": "abc", "b": [1, {"x": None}], "c": 1.5, "extra": True})


def test_keyword_arguments_are_checked_against_the_kwargs_annotation(app: cronbase.App) -> None:
    @app.task
    def totals(label: str, **amounts: Decimal) -> None: ...

    totals.check_payload({"label": "q1", "north": Decimal("1.5"), "south": "2"})
    assert totals.arguments({"label": "q1", "north": "1.5"}) == {
        "label": "q1",
        "north": Decimal("1.5"),
    }
    assert refusal(totals, label="q1", north="lots") == (
        "payload for task 'totals' does not convert to argument 'north': "
        "payload['north'] is 'lots', not a decimal number"
    )
    assert "argument 'label'" in refusal(totals, label=5, north=1)


def test_scheduled_at_is_an_aware_time_whatever_the_handler_annotates(app: cronbase.App) -> None:
    @app.task
    def nightly(scheduled_at: str, **rest: int) -> None: ...

    slot = datetime(2026, 1, 1, 2, tzinfo=UTC)
    nightly.check_payload({"scheduled_at": slot})
    nightly.check_payload({"scheduled_at": slot.isoformat(), "n": 1})
    # Not checked against `str` (nor **rest's int): the worker hands it over as a datetime.
    assert nightly.arguments({"scheduled_at": slot.isoformat()}) == {"scheduled_at": slot}
    assert refusal(nightly, scheduled_at=5) == (
        "task 'nightly': scheduled_at is 5, not an ISO 8601 datetime"
    )
    assert refusal(nightly, scheduled_at="2026-01-01T02:00") == (
        "task 'nightly': scheduled_at is '2026-01-01T02:00', a datetime without a UTC offset; "
        "write one (+00:00)"
    )


def test_an_annotation_defined_after_the_handler_is_checked_from_the_first_defer(
    app: cronbase.App,
) -> None:
    @app.task
    def ship(parcel: Crate, at: datetime) -> None: ...  # noqa: F821 - defined below

    assert ship._conversions is not None
    assert not ship._conversions.arguments  # not resolved: Crate is not defined yet
    globals()["Crate"] = Line  # as a class defined further down the handler's module is
    try:
        message = refusal(ship, parcel={"sku": "a", "price": "x"}, at=datetime.now(UTC))
    finally:
        del globals()["Crate"]
    assert "payload['parcel']['price'] is 'x', not a decimal number" in message
    assert ship._conversions.arguments == ["parcel", "at"]


def test_a_name_never_resolvable_leaves_its_argument_unchecked_at_defer(
    app: cronbase.App, caplog: pytest.LogCaptureFixture
) -> None:
    @app.task
    def precise(ctx: Context, at: datetime) -> None: ...

    with caplog.at_level(logging.WARNING, logger="cronbase"):
        precise.check_payload({"ctx": {"prec": 5}, "at": datetime.now(UTC)})
        assert "argument 'at'" in refusal(precise, ctx={}, at="noon")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings  # resolved once, at the first defer
    assert "cannot resolve the annotation of argument 'ctx'" in warnings[0]


def test_a_workflow_signature_is_checked_but_for_the_result_it_receives(
    app: cronbase.App,
) -> None:
    @app.task
    def add(previous: int, k: int) -> int:
        return previous + k

    add.s(k=1)  # previous: the parent's result, known when the parent ran
    with pytest.raises(PayloadError, match=r"payload\['k'\] is '1', not an int"):
        add.s(k="1")
    with pytest.raises(PayloadError, match=r"payload\['previous'\] is 'x', not an int"):
        add.arguments({"previous": "x", "k": 1})  # a parent that returned the wrong type


# -- defer and run agree -----------------------------------------------------------------------

ANNOTATIONS: list[Any] = [
    int,
    float,
    str,
    bool,
    type(None),
    list,
    dict,
    list[int],
    dict[str, int],
    dict[str, date],
    Optional[int],  # noqa: UP045
    int | str,
    float | None,
    int | Decimal,
    date | datetime,
    Literal["a", "b", 1],
    Literal[True],
    date,
    datetime,
    time,
    timedelta,
    uuid.UUID,
    Decimal,
    Color,
    Level,
    Line,
    list[Line],
    Address,
    tuple[int, str],
    tuple[date, ...],
    Any,
]
_APP = cronbase.App(database_url=NOWHERE)
TASKS = [taking(_APP, annotation, f"t{i}") for i, annotation in enumerate(ANNOTATIONS)]

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5),
    st.sampled_from(["a", "b", "red", "1", "1.5", "2026-03-01", "2026-03-01T00:00:00+00:00"]),
    st.dates(),
    st.dates().map(date.isoformat),
    st.datetimes(timezones=st.sampled_from([UTC, timezone(timedelta(hours=-3))])),
    st.datetimes(timezones=st.just(UTC)).map(datetime.isoformat),
    st.times(),
    st.times().map(time.isoformat),
    st.timedeltas(),
    st.uuids(),
    st.uuids().map(str),
    st.decimals(allow_nan=False, places=3),
    st.sampled_from([*Color, *Level]),
    st.builds(Line, sku=st.text(max_size=3) | st.integers(), price=st.decimals(places=2)),
    st.builds(Address, city=st.text(max_size=3), since=st.dates()),
)
VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.sampled_from(["sku", "price", "quantity", "city", "since"]), inner),
    ),
    max_leaves=6,
)


def _outcome(call: Any) -> str | None:
    try:
        call()
    except PayloadError as exc:
        return str(exc)
    return None


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(index=st.integers(0, len(ANNOTATIONS) - 1), value=VALUES)
def test_a_defer_accepts_exactly_what_the_worker_converts(index: int, value: Any) -> None:
    task = TASKS[index]
    payload = {"value": value}
    try:
        stored = json.loads(encode_payload(task.name, payload))
    except PayloadError:
        return  # refused before anything is written either way (the encoder says why)
    at_defer = _outcome(lambda: task.check_payload(payload))
    at_run = _outcome(lambda: task.arguments(stored))
    event("refused" if at_run else "accepted")
    assert (at_defer is None) == (at_run is None), (ANNOTATIONS[index], value, at_defer, at_run)
    if at_defer is not None:  # the same place named (the value as given, or as stored)
        assert _where(at_defer) == _where(at_run), (at_defer, at_run)


def _where(message: str | None) -> str:
    match = re.search(r": (payload(\[[^\]]*\])*)", message or "")
    assert match is not None, message
    return match[1]
