"""The Django tasks backend's pure mappings (contrib/django/results.py, arguments.py): priorities
both ways, every status, error paths, and a call stored by parameter name and given back as made.
No Django settings and no database: this runs under Django 5.2 with the django-tasks backport."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cronbase.contrib.django import tasks_api as api
from cronbase.contrib.django.arguments import POSITIONAL, from_payload, to_payload
from cronbase.contrib.django.results import (
    STATUSES,
    cronbase_priority,
    django_priority,
    django_status,
    exception_class_path,
)
from cronbase.job import JobStatus


@given(st.integers(min_value=api.TASK_MIN_PRIORITY, max_value=api.TASK_MAX_PRIORITY))
def test_priorities_map_both_ways_and_keep_their_order(priority: int) -> None:
    assert django_priority(cronbase_priority(priority)) == priority
    if priority < api.TASK_MAX_PRIORITY:
        # Higher first in Django is lower first in cronbase.
        assert cronbase_priority(priority + 1) < cronbase_priority(priority)


def test_djangos_default_priority_is_cronbases_and_the_ends_are_0_and_200() -> None:
    assert cronbase_priority(api.DEFAULT_TASK_PRIORITY) == 100
    assert (cronbase_priority(100), cronbase_priority(-100)) == (0, 200)
    # A row other code wrote with any smallint reads back within Django's range.
    assert (django_priority(-32768), django_priority(32767)) == (100, -100)


def test_every_job_status_has_a_django_status() -> None:
    assert set(STATUSES) == set(JobStatus)
    finished = {s for s in JobStatus if django_status(s).value in ("SUCCESSFUL", "FAILED")}
    assert finished == {s for s in JobStatus if s.is_final}
    assert django_status(JobStatus.FAILED) == api.TaskResultStatus.READY  # a retry follows


@pytest.mark.parametrize(
    ("error_type", "path"),
    [
        ("ValueError", "builtins.ValueError"),
        ("newsletter.tasks.CrmUnavailable", "newsletter.tasks.CrmUnavailable"),
        ("cronbase.errors.PayloadError", "cronbase.errors.PayloadError"),
    ],
)
def test_exception_class_paths_are_djangos(error_type: str, path: str) -> None:
    assert exception_class_path(error_type) == path


@dataclass
class FakeTask:
    func: Any
    takes_context: bool = False

    @property
    def module_path(self) -> str:
        return f"tests.{self.func.__name__}"


def plain(a: int, b: int = 2, *, c: int = 3) -> None: ...


def varargs(first: int, *rest: int, **extra: int) -> None: ...


def positional_only(a: int, /, b: int) -> None: ...


def with_context(context: object, order_id: int) -> None: ...


@pytest.mark.parametrize(
    ("func", "takes_context", "args", "kwargs", "payload"),
    [
        (plain, False, (1,), {}, {"a": 1, POSITIONAL: 1}),
        (plain, False, (), {"a": 1, "c": 4}, {"a": 1, "c": 4}),
        (plain, False, (1, 5), {"c": 4}, {"a": 1, "b": 5, "c": 4, POSITIONAL: 2}),
        (varargs, False, (1, 2, 3), {"x": 9}, {"first": 1, "rest": [2, 3], "x": 9, POSITIONAL: 3}),
        (varargs, False, (1,), {}, {"first": 1, POSITIONAL: 1}),
        (positional_only, False, (1,), {"b": 2}, {"a": 1, "b": 2, POSITIONAL: 1}),
        (with_context, True, (7,), {}, {"order_id": 7, POSITIONAL: 1}),
    ],
)
def test_a_call_is_stored_by_name_and_given_back_as_it_was_made(
    func: Any, takes_context: bool, args: tuple[Any, ...], kwargs: dict[str, Any], payload: Any
) -> None:
    task = FakeTask(func, takes_context)
    assert to_payload(task, args, kwargs) == payload
    assert from_payload(func, takes_context, payload) == (list(args), kwargs)


def test_arguments_that_do_not_fit_or_are_not_json_are_refused_at_enqueue() -> None:
    with pytest.raises(TypeError, match=r"tests\.plain: missing a required argument: 'a'"):
        to_payload(FakeTask(plain), (), {})
    with pytest.raises(TypeError, match="Unsupported type"):
        to_payload(FakeTask(plain), (object(),), {})
    with pytest.raises(TypeError, match="has the name of its \\*args parameter"):
        to_payload(FakeTask(varargs), (1, 2), {"rest": 3})


def test_a_schedules_slot_reaches_only_a_task_that_takes_it() -> None:
    def nightly(scheduled_at: str) -> None: ...

    slot = {"scheduled_at": "2026-11-24T03:00:00+00:00"}
    assert from_payload(plain, False, {"a": 1, **slot}) == ([], {"a": 1})
    assert from_payload(nightly, False, slot) == ([], slot)
