"""cronbase.contrib.celery's canvas: chain, group, chord, ``|`` and ``link=`` as Celery passes
results, inserted as cronbase workflows and run by real burst workers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

import cronbase
from cronbase.contrib.celery import (
    Celery,
    CeleryCompatibilityWarning,
    GroupResult,
    Task,
    chain,
    chord,
    group,
    signature,
    states,
)
from cronbase.errors import ConfigurationError, WorkflowError


class Tasks:
    def __init__(self, capp: Celery) -> None:
        @capp.task
        def add(x: int, y: int) -> int:
            return x + y

        @capp.task
        def mul(x: int, y: int) -> int:
            return x * y

        @capp.task
        def tsum(numbers: list[int]) -> int:
            return sum(numbers)

        @capp.task
        def label(value: object, prefix: str = "got") -> str:
            return f"{prefix} {value}"

        @capp.task
        def fail(x: int) -> None:
            raise ValueError(f"cannot take {x}")

        @capp.task(ignore_result=True)
        def silent(x: int) -> int:
            return x

        self.add, self.mul, self.tsum, self.label = add, mul, tsum, label
        self.fail, self.silent = fail, silent


@pytest.fixture
def capp(app: cronbase.App) -> Iterator[Celery]:
    return Celery("proj", cronbase_app=app)


@pytest.fixture
def t(capp: Celery) -> Tasks:
    return Tasks(capp)


def drain(capp: Celery) -> None:
    capp.cronbase_app.run_worker(burst=True, install_signal_handlers=False)


def payloads(db: psycopg.Connection[Any]) -> list[tuple[str, Any]]:
    rows = db.execute("SELECT task, payload FROM cronbase.jobs_all ORDER BY id").fetchall()
    return [(task.rsplit(".", 1)[-1], payload) for task, payload in rows]


def test_a_chain_passes_each_result_as_the_next_first_argument(
    capp: Celery, t: Tasks, db: psycopg.Connection[Any]
) -> None:
    result = chain(t.add.s(2, 2), t.add.s(4), t.mul.s(10), t.label.s(prefix="total")).apply_async()
    # The received argument is the parameter of the first place: x; the rest bind after it.
    assert payloads(db) == [
        ("add", {"x": 2, "y": 2}),
        ("add", {"y": 4}),
        ("mul", {"y": 10}),
        ("label", {"prefix": "total"}),
    ]
    drain(capp)
    assert result.get(timeout=10) == "total 80"


def test_the_pipe_operator_and_immutable_signatures(capp: Celery, t: Tasks) -> None:
    result = (t.add.s(1, 1) | t.mul.si(3, 3) | t.add.s(1))()
    drain(capp)
    assert result.get(timeout=10) == 10  # mul.si(3, 3) ignores the 2 before it


def test_a_group_returns_a_group_result_whose_get_is_the_list(capp: Celery, t: Tasks) -> None:
    result = group(t.add.s(i, i) for i in range(4)).apply_async()
    assert isinstance(result, GroupResult)
    assert len(result) == 4
    assert not result.ready()
    drain(capp)
    assert result.get(timeout=10) == [0, 2, 4, 6]
    assert result.ready()
    assert result.successful()
    assert result.completed_count() == 4


def test_a_group_of_chains_follows_each_chains_last_task(capp: Celery, t: Tasks) -> None:
    result = group(chain(t.add.s(1, 2), t.mul.s(10)), t.add.s(5, 5), t.add.s(1, 1) | t.label.s())()
    drain(capp)
    assert result.get(timeout=10) == [30, 10, "got 2"]


def test_a_chord_gives_its_body_the_list_of_the_header_results(
    capp: Celery, t: Tasks, db: psycopg.Connection[Any]
) -> None:
    first = chord([t.add.s(i, i) for i in range(3)])(t.tsum.s())
    second = chord(
        group(t.mul.s(i, 2) for i in range(3)), t.label.s(prefix="doubled")
    ).apply_async()
    third = (group(t.add.s(1, 1), t.add.s(2, 2)) | t.tsum.s()).delay()
    drain(capp)
    assert first.get(timeout=10) == 6
    assert second.get(timeout=10) == "doubled [0, 2, 4]"
    assert third.get(timeout=10) == 6
    assert first.state == states.SUCCESS


def test_a_chain_after_a_task_into_a_group_gives_each_member_the_result(
    capp: Celery, t: Tasks
) -> None:
    result = chain(t.add.s(1, 2), group(t.mul.s(2), t.mul.s(3)), t.tsum.s())()
    drain(capp)
    assert result.get(timeout=10) == 15


def test_link_runs_the_callback_with_the_result(capp: Celery, t: Tasks) -> None:
    result = t.add.apply_async((2, 3), link=t.label.s())
    drain(capp)
    assert result.get(timeout=10) == 5  # the result of the task itself, as in Celery
    done = [job.result for job in capp.wrapped.jobs.list(task=t.label.name)]
    assert done == ["got 5"]


def test_signatures_by_name_delay_and_partial_arguments(capp: Celery, t: Tasks) -> None:
    by_name = signature(t.add.name, args=(2,), kwargs={"y": 5})
    assert repr(by_name) == f"{t.add.name}.s(2, y=5)"
    assert by_name() == 7  # runs here
    delayed = t.add.s(1).delay(9)
    immutable = t.add.si(1, 1).apply_async(args=(100,))
    drain(capp)
    assert (delayed.get(timeout=10), immutable.get(timeout=10)) == (10, 2)


def test_a_failure_in_a_chain_surfaces_in_the_results_of_the_tasks_after_it(
    capp: Celery, t: Tasks
) -> None:
    result = chain(t.fail.s(1), t.add.s(1), t.label.s())()
    drain(capp)
    with pytest.warns(CeleryCompatibilityWarning, match=r"never ran: job \d+ before it"):
        assert result.state == states.FAILURE
    with (
        pytest.warns(CeleryCompatibilityWarning, match="never ran"),
        pytest.raises(ValueError, match="cannot take 1"),
    ):
        result.get(timeout=10)


def test_what_a_canvas_cannot_do_is_refused(capp: Celery, t: Tasks) -> None:
    with pytest.raises(WorkflowError, match=r"ignore_result=True: .* would receive None"):
        chain(t.silent.s(1), t.add.s(1))()
    with pytest.raises(WorkflowError, match="no error callbacks"):
        chord([t.add.s(1, 1)], t.tsum.s()).link_error(t.label.s())
    with pytest.raises(WorkflowError, match=r"option 'expires' is not supported there"):
        chain(t.add.s(1, 1).set(expires=10), t.tsum.s())()
    with pytest.raises(WorkflowError, match=r"set options on its signatures"):
        chain(t.add.s(1, 1), t.add.s(1)).apply_async(queue="x")
    with pytest.raises(WorkflowError, match="cannot take the previous task's result"):
        chain(t.add.s(1, 1), t.add.s(1, 2))()
    with pytest.raises(ConfigurationError, match="link= with task_id"):
        t.add.apply_async((1, 1), task_id="x-1", link=t.label.s())
    assert capp.wrapped.jobs.list() == []  # nothing was written


def test_a_bound_task_in_a_chain_receives_after_self(capp: Celery) -> None:
    @capp.task(bind=True)
    def tagged(self: Task, value: int, tag: str) -> str:
        return f"{tag}{value} (job {self.request.id})"

    @capp.task
    def seven() -> int:
        return 7

    result = (seven.s() | tagged.s("#"))()
    drain(capp)
    assert result.get(timeout=10) == f"#7 (job {result.id})"
