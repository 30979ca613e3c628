"""The supervisor's decisions, without processes: the delay before a worker process starts again,
what a crash loop is, exit statuses, ``--processes`` values, and what a child reads from its
environment (tests/e2e/test_supervisor.py runs the real thing)."""

from __future__ import annotations

import os
import signal

import click
import pytest

from cronbase.cli.run import Processes
from cronbase.worker.supervised import CHILD_ENV, PIPE_ENV, SUPERVISOR_ENV, Supervised
from cronbase.worker.supervisor import (
    CRASH_LOOP_EXITS,
    CRASH_LOOP_WINDOW,
    MOST_DELAY,
    STABLE_AFTER,
    Restarts,
    available_cores,
    describe_exit,
    exit_status,
)


def test_the_delay_doubles_from_one_second_up_to_a_minute() -> None:
    restarts = Restarts()
    delays = [restarts.exited(at=float(n), lived=0.5) for n in range(9)]
    assert delays == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert restarts.count == 9


def test_a_process_that_ran_a_minute_starts_again_after_the_first_delay() -> None:
    restarts = Restarts()
    for n in range(5):
        restarts.exited(at=float(n), lived=1.0)
    assert restarts.delay == 16
    assert restarts.exited(at=1000.0, lived=STABLE_AFTER) == 1
    assert list(restarts.exits) == [1000.0]  # what came before is forgotten


def test_a_crash_loop_is_three_exits_within_five_minutes() -> None:
    restarts = Restarts()
    restarts.exited(at=0.0, lived=1.0)
    restarts.exited(at=10.0, lived=1.0)
    assert not restarts.is_crash_looping(now=10.0)
    restarts.exited(at=20.0, lived=1.0)
    assert CRASH_LOOP_EXITS == 3
    assert restarts.is_crash_looping(now=20.0)
    # Still one while the window holds three exits, unless the process has run a minute since.
    assert restarts.is_crash_looping(now=60.0, running_since=21.0)
    assert not restarts.is_crash_looping(now=21.0 + STABLE_AFTER, running_since=21.0)
    # The window moves on: the first exit is out of it.
    assert not restarts.is_crash_looping(now=CRASH_LOOP_WINDOW + 1.0)


def test_exits_spread_wider_than_the_window_are_no_crash_loop() -> None:
    restarts = Restarts()
    step = CRASH_LOOP_WINDOW / 2 + 1
    for n in range(4):
        restarts.exited(at=n * step, lived=30.0)
        assert not restarts.is_crash_looping(now=n * step)
    assert restarts.delay == 8  # short lives: the delay still grows
    assert restarts.delay <= MOST_DELAY


def test_exit_statuses_as_a_shell_sees_them() -> None:
    assert [exit_status(code) for code in (0, 1, 3, -signal.SIGKILL)] == [0, 1, 3, 137]
    assert describe_exit(3) == "status 3"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(-200) == "killed by signal 200"


@pytest.mark.parametrize(("given", "expected"), [("1", 1), ("4", 4), (" 2 ", 2), ("AUTO", None)])
def test_processes_values(given: str, expected: int | None) -> None:
    assert Processes().convert(given, None, None) == (expected or available_cores())


def test_auto_is_the_affinity_not_the_machine() -> None:
    assert available_cores() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("given", ["0", "-1", "two", "1.5", ""])
def test_bad_processes_values_name_the_value(given: str) -> None:
    with pytest.raises(click.BadParameter, match=repr(given)):
        Processes().convert(given, None, None)


def test_a_child_reads_its_supervisor_and_takes_it_out_of_the_environment() -> None:
    env = {SUPERVISOR_ENV: "web-1:4242", CHILD_ENV: "3", PIPE_ENV: "7", "OTHER": "kept"}
    assert Supervised.from_environment(env) == Supervised("web-1:4242", 3, 7)
    assert env == {"OTHER": "kept"}  # processes it starts are not the supervisor's
    assert Supervised.from_environment({"OTHER": "kept"}) is None
