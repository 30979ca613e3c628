"""cronbase's backend held to what Django's own tests ask of a task backend (tests/tasks in Django's
repository: test_tasks.py, test_immediate_backend.py, test_dummy_backend.py,
test_custom_backend.py), on the real database: enqueue, results, priorities, deferral, async,
context and signals; and what a database backend adds: transactions, retries, Django's test cases.

Run by Django's test runner (tests/integration/test_django_tasks.py starts it under Django 5.2 with
the backport and under Django 6); jobs run in the test's process through
``cronbase.testing.drain``, the real worker.
"""

# Django's test runner is unittest's, as Django's own tests: its assertions say what differed.
# ruff: noqa: PT009, PT027

import dataclasses
import pickle
from datetime import datetime, timedelta
from unittest import skipUnless

from django.db import connection, transaction
from django.test import SimpleTestCase, TestCase, TransactionTestCase, override_settings
from django.utils import timezone

import cronbase.testing
from cronbase.contrib.django import get_app
from cronbase.contrib.django.tasks import CronbaseBackend, SystemExitError
from cronbase.contrib.django.tasks_api import API

from . import tasks as test_tasks

if API == "django.tasks":
    from django.tasks import (
        DEFAULT_TASK_QUEUE_NAME,
        TaskResultStatus,
        default_task_backend,
        task,
        task_backends,
    )
    from django.tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, Task
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
    from django.tasks.signals import task_enqueued, task_finished, task_started
else:
    from django_tasks import (
        DEFAULT_TASK_QUEUE_NAME,
        TaskResultStatus,
        default_task_backend,
        task,
        task_backends,
    )
    from django_tasks.base import TASK_MAX_PRIORITY, TASK_MIN_PRIORITY, Task
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
    from django_tasks.signals import task_enqueued, task_finished, task_started

app = get_app()


def drain_until_finished(*results, rounds=20):
    """Run due jobs (the real worker, in this process) until each result is finished."""
    for _ in range(rounds):
        cronbase.testing.drain(app)
        for result in results:
            result.refresh()
        if all(result.is_finished for result in results):
            return
    raise AssertionError(f"not finished after {rounds} drains: {[r.status for r in results]}")


class Recorder:
    """Receives the three task signals: (signal name, task path, status), in order."""

    def __init__(self):
        self.seen = []
        self.results = []

    def __enter__(self):
        for name, signal in self.signals():
            signal.connect(self.receiver(name), weak=False, dispatch_uid=f"recorder-{name}")
        return self

    def __exit__(self, *exc):
        for name, signal in self.signals():
            signal.disconnect(dispatch_uid=f"recorder-{name}")

    @staticmethod
    def signals():
        return [("enqueued", task_enqueued), ("started", task_started), ("finished", task_finished)]

    def receiver(self, name):
        def receive(sender, task_result, **kwargs):
            assert sender is CronbaseBackend, sender
            self.seen.append((name, task_result.task.name, task_result.status))
            self.results.append(task_result)

        return receive


class BackendTests(TestCase):
    """Enqueue and results, inside the test's transaction (TestCase): nothing runs here."""

    def test_using_correct_backend(self):
        self.assertEqual(default_task_backend, task_backends["default"])
        self.assertIsInstance(task_backends["default"], CronbaseBackend)
        self.assertEqual(default_task_backend.alias, "default")
        self.assertIs(default_task_backend.supports_defer, True)
        self.assertIs(default_task_backend.supports_async_task, True)
        self.assertIs(default_task_backend.supports_get_result, True)
        self.assertIs(default_task_backend.supports_priority, True)

    def test_task_decorator(self):
        self.assertIsInstance(test_tasks.noop_task, Task)
        self.assertIsInstance(test_tasks.noop_task_async, Task)
        self.assertIsInstance(test_tasks.noop_task_from_bare_decorator, Task)

    def test_enqueue_task(self):
        for task_ in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task_):
                result = task_.enqueue(1, two=3)

                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertIs(result.is_finished, False)
                self.assertIsNone(result.started_at)
                self.assertIsNone(result.last_attempted_at)
                self.assertIsNone(result.finished_at)
                self.assertIsNotNone(result.enqueued_at)
                with self.assertRaisesMessage(ValueError, "Task has not finished yet"):
                    result.return_value  # noqa: B018
                self.assertEqual(result.task, task_)
                self.assertEqual(result.args, [1])
                self.assertEqual(result.kwargs, {"two": 3})
                self.assertEqual(result.attempts, 0)
                self.assertEqual(result.backend, "default")

    async def test_enqueue_task_async(self):
        for task_ in [test_tasks.noop_task, test_tasks.noop_task_async]:
            with self.subTest(task_):
                result = await task_.aenqueue()

                self.assertEqual(result.status, TaskResultStatus.READY)
                self.assertEqual(result.task, task_)
                self.assertEqual(result.args, [])
                self.assertEqual(result.kwargs, {})

    def test_enqueue_with_invalid_argument(self):
        with self.assertRaisesMessage(TypeError, "Unsupported type"):
            test_tasks.noop_task.enqueue(datetime.now())

    async def test_aenqueue_with_invalid_argument(self):
        with self.assertRaisesMessage(TypeError, "Unsupported type"):
            await test_tasks.noop_task.aenqueue(datetime.now())

    def test_enqueue_arguments_that_do_not_fit_the_function(self):
        with self.assertRaisesMessage(TypeError, "conformance.tasks.calculate_meaning_of_life"):
            test_tasks.calculate_meaning_of_life.enqueue(1)

    def test_get_result(self):
        # Read on Django's connection, in the test's transaction: the job is not committed.
        result = default_task_backend.enqueue(test_tasks.noop_task, (), {})
        new_result = test_tasks.noop_task.get_result(result.id)
        self.assertEqual(result, new_result)

    async def test_get_result_async(self):
        result = await default_task_backend.aenqueue(test_tasks.noop_task, (), {})
        new_result = await test_tasks.noop_task.aget_result(result.id)
        self.assertEqual(result.id, new_result.id)

    def test_refresh_result(self):
        result = test_tasks.noop_task.enqueue()
        original = dataclasses.asdict(result)
        result.refresh()
        self.assertEqual(dataclasses.asdict(result), original)

    async def test_get_missing_result(self):
        for missing in ["123456789", "not-a-number", "0", str(2**70)]:
            with self.subTest(missing), self.assertRaises(TaskResultDoesNotExist):
                test_tasks.noop_task.get_result(missing)
        with self.assertRaises(TaskResultDoesNotExist):
            await test_tasks.noop_task.aget_result("123456789")

    def test_get_incorrect_result(self):
        result = default_task_backend.enqueue(test_tasks.noop_task_async, (), {})
        with self.assertRaisesMessage(TaskResultMismatch, "Task does not match"):
            test_tasks.noop_task.get_result(result.id)

    def test_a_cronbase_job_is_no_task_result(self):
        job_id = app.defer("conformance.tasks.echo", {"x": 1})
        self.assertEqual(default_task_backend.get_result(str(job_id)).kwargs, {"x": 1})
        other = cronbase.App(app.database_url, schema=app.schema)

        @other.task(name="not_a_django_task")
        def plain() -> None: ...

        plain_id = plain.configure(connection=connection.connection).defer()
        with self.assertRaises(TaskResultDoesNotExist):
            default_task_backend.get_result(str(plain_id))

    def test_using_priority(self):
        self.assertEqual(test_tasks.noop_task.priority, 0)
        self.assertEqual(test_tasks.noop_task.using(priority=1).priority, 1)

    def test_invalid_priority(self):
        message = (
            f"priority must be a whole number between {TASK_MIN_PRIORITY} and {TASK_MAX_PRIORITY}."
        )
        for priority in [-101, 101, 3.1]:
            with self.subTest(priority), self.assertRaisesMessage(InvalidTask, message):
                test_tasks.noop_task.using(priority=priority)
        for priority in [100, -100, 0]:
            test_tasks.noop_task.using(priority=priority).enqueue()

    def test_priority_is_stored_as_cronbases_order(self):
        # Django's -100..100 (higher first) is cronbase's 200..0 (lower first): 100 - priority.
        stored = {}
        for priority in [100, 0, -100]:
            result = test_tasks.noop_task.using(priority=priority).enqueue()
            stored[priority] = app.jobs.get(int(result.id)).priority
            self.assertEqual(result.task.priority, priority)
            self.assertEqual(test_tasks.noop_task.get_result(result.id).task.priority, priority)
        self.assertEqual(stored, {100: 0, 0: 100, -100: 200})

    def test_using_queue_name(self):
        result = test_tasks.noop_task.using(queue_name="queue_1").enqueue()
        self.assertEqual(result.task.queue_name, "queue_1")
        self.assertEqual(app.jobs.get(int(result.id)).queue, "queue_1")
        self.assertEqual(test_tasks.noop_task.queue_name, DEFAULT_TASK_QUEUE_NAME)

    def test_unknown_queue_name(self):
        with self.assertRaisesMessage(InvalidTask, "Queue 'queue-2' is not valid for backend."):
            test_tasks.noop_task.using(queue_name="queue-2")

    def test_using_run_after(self):
        later = timezone.now() + timedelta(hours=1)
        result = test_tasks.noop_task.using(run_after=later).enqueue()
        self.assertEqual(result.task.run_after, later)
        self.assertEqual(app.jobs.get(int(result.id)).run_at, later)
        self.assertEqual(test_tasks.noop_task.get_result(result.id).task.run_after, later)
        self.assertIsNone(test_tasks.noop_task.run_after)

    def test_naive_datetime(self):
        with self.assertRaisesMessage(InvalidTask, "run_after must be an aware datetime."):
            test_tasks.noop_task.using(run_after=datetime.now())

    def test_invalid_function(self):
        for invalid_function in [any, self.test_invalid_function]:
            with (
                self.subTest(invalid_function),
                self.assertRaisesMessage(
                    InvalidTask, "Task function must be defined at a module level."
                ),
            ):
                task()(invalid_function)

    def test_takes_context_without_taking_context(self):
        with self.assertRaisesMessage(
            InvalidTask, "Task takes context but does not have a first argument of 'context'."
        ):
            task(takes_context=True)(test_tasks.calculate_meaning_of_life.func)

    def test_a_function_of_main_is_refused(self):
        def runs_in_a_script():
            pass

        runs_in_a_script.__module__ = "__main__"
        runs_in_a_script.__qualname__ = "runs_in_a_script"
        with self.assertRaisesMessage(InvalidTask, "defined in __main__"):
            task()(runs_in_a_script)

    @skipUnless(API == "django.tasks", "the backport's Task does not pickle (no __reduce__)")
    def test_pickle_task_and_result(self):
        result = test_tasks.noop_task.enqueue()
        self.assertEqual(pickle.loads(pickle.dumps(result)), result)

    def test_enqueue_sends_task_enqueued(self):
        with Recorder() as recorder:
            result = test_tasks.noop_task.enqueue()
        self.assertEqual(recorder.seen, [("enqueued", "noop_task", TaskResultStatus.READY)])
        self.assertEqual(recorder.results[0].id, result.id)

    def test_enqueued_sees_the_job_inside_the_test(self):
        # The job is in the test's transaction (never committed): cronbase.testing reads there.
        test_tasks.echo.enqueue(7, colour="blue")
        job = cronbase.testing.enqueued(app, task=test_tasks.echo.module_path).assert_one()
        self.assertEqual(job.payload, {"args": [7], "colour": "blue", "__args__": 1})
        cronbase.testing.enqueued(app, task=test_tasks.echo.module_path, colour="blue").assert_one()

    def test_inline_mode_refuses_a_django_task_and_says_what_to_use(self):
        from cronbase import ConfigurationError

        with (
            cronbase.testing.inline(app),
            self.assertRaisesMessage(ConfigurationError, "Django's ImmediateBackend"),
        ):
            test_tasks.noop_task.enqueue()

    def test_a_rolled_back_savepoint_takes_its_job(self):
        kept = test_tasks.noop_task.enqueue()
        try:
            with transaction.atomic():
                dropped = test_tasks.noop_task.enqueue()
                raise RuntimeError("rolled back")
        except RuntimeError:
            pass
        test_tasks.noop_task.get_result(kept.id)
        with self.assertRaises(TaskResultDoesNotExist):
            test_tasks.noop_task.get_result(dropped.id)


class ExecutionTests(TransactionTestCase):
    """Jobs committed and run by the real worker (``cronbase.testing.drain``)."""

    def test_result(self):
        result = test_tasks.calculate_meaning_of_life.enqueue()
        drain_until_finished(result)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.return_value, 42)
        self.assertEqual(result.attempts, 1)
        self.assertEqual(len(result.worker_ids), 1)
        self.assertGreaterEqual(result.started_at, result.enqueued_at)
        self.assertEqual(result.last_attempted_at, result.started_at)
        self.assertGreaterEqual(result.finished_at, result.started_at)
        self.assertEqual(result.errors, [])

    def test_enqueue_and_run_sync_and_async(self):
        results = [t.enqueue(1, two=3) for t in [test_tasks.noop_task, test_tasks.noop_task_async]]
        drain_until_finished(*results)
        for result in results:
            self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
            self.assertIsNone(result.return_value)
            self.assertEqual(result.args, [1])
            self.assertEqual(result.kwargs, {"two": 3})

    def test_catches_exception(self):
        test_data = [
            (test_tasks.failing_task_value_error, "builtins.ValueError", ValueError,
             "ValueError: This Task failed due to ValueError\n"),
            (test_tasks.complex_return_value, "builtins.TypeError", TypeError,
             "Unsupported type"),
        ]  # fmt: skip
        for task_, path, exception, message in test_data:
            with self.subTest(task_):
                result = task_.enqueue()
                drain_until_finished(result)
                self.assertEqual(result.status, TaskResultStatus.FAILED)
                with self.assertRaisesMessage(ValueError, "Task failed"):
                    result.return_value  # noqa: B018
                self.assertIs(result.is_finished, True)
                self.assertIsNotNone(result.finished_at)
                self.assertEqual(result.errors[-1].exception_class_path, path)
                self.assertEqual(result.errors[-1].exception_class, exception)
                self.assertIn(message, result.errors[-1].traceback)
        # OPTIONS give failing_task_value_error two attempts: two errors, two workers.
        retried = test_tasks.failing_task_value_error.enqueue()
        drain_until_finished(retried)
        self.assertEqual(retried.attempts, 2)
        self.assertEqual(len(retried.errors), 2)
        self.assertTrue(retried.errors[0].traceback.endswith(test_data[0][3]))

    def test_complex_exception(self):
        result = test_tasks.complex_exception.enqueue()
        drain_until_finished(result)
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertEqual(result.errors[0].exception_class, ValueError)
        self.assertIn('ValueError(ValueError("This task failed"))', result.errors[0].traceback)

    def test_system_exit_fails_the_task_not_the_worker(self):
        result = test_tasks.failing_task_system_exit.enqueue()
        after = test_tasks.calculate_meaning_of_life.enqueue()
        drain_until_finished(result, after)
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertEqual(result.errors[0].exception_class, SystemExitError)
        self.assertIn("SystemExit: This Task failed due to SystemExit", result.errors[0].traceback)
        self.assertEqual(after.return_value, 42)

    def test_retries_until_it_succeeds_with_every_error_kept(self):
        result = test_tasks.flaky.enqueue(failures=2)
        with Recorder() as recorder:
            drain_until_finished(result)
        self.assertEqual(result.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(result.attempts, 3)
        self.assertEqual(len(result.worker_ids), 3)
        # What the task saw of itself on its third attempt: its context was right.
        self.assertEqual(
            result.return_value, {"attempt": 3, "id": result.id, "worker_ids": 3, "errors": 2}
        )
        self.assertEqual(
            [e.exception_class_path for e in result.errors], ["builtins.ConnectionError"] * 2
        )
        self.assertTrue(result.errors[1].traceback.endswith("ConnectionError: attempt 2 failed\n"))
        self.assertGreater(result.last_attempted_at, result.started_at)
        # One task_started per attempt; task_finished once, when the task is finished.
        self.assertEqual(
            recorder.seen,
            [("started", "flaky", TaskResultStatus.RUNNING)] * 3
            + [("finished", "flaky", TaskResultStatus.SUCCESSFUL)],
        )

    def test_out_of_attempts_it_fails(self):
        result = test_tasks.flaky.enqueue(failures=5)
        with Recorder() as recorder:
            drain_until_finished(result)
        self.assertEqual(result.status, TaskResultStatus.FAILED)
        self.assertEqual(result.attempts, 3)
        self.assertEqual(len(result.errors), 3)
        finished = [
            r for r in recorder.results if recorder.seen[recorder.results.index(r)][0] == "finished"
        ]
        self.assertEqual(len(finished), 1)
        self.assertEqual(finished[0].status, TaskResultStatus.FAILED)
        self.assertEqual(len(finished[0].errors), 3)

    def test_signals(self):
        with Recorder() as recorder:
            ok = test_tasks.calculate_meaning_of_life.enqueue()
            failed = test_tasks.complex_exception.enqueue()
            drain_until_finished(ok, failed)
        by_task = {}
        for name, task_name, status in recorder.seen:
            by_task.setdefault(task_name, []).append((name, status))
        self.assertEqual(
            by_task["calculate_meaning_of_life"],
            [
                ("enqueued", TaskResultStatus.READY),
                ("started", TaskResultStatus.RUNNING),
                ("finished", TaskResultStatus.SUCCESSFUL),
            ],
        )
        self.assertEqual(
            by_task["complex_exception"],
            [
                ("enqueued", TaskResultStatus.READY),
                ("started", TaskResultStatus.RUNNING),
                ("finished", TaskResultStatus.FAILED),
            ],
        )
        finished = recorder.results[[s[0] for s in recorder.seen].index("finished")]
        self.assertIsNotNone(finished.finished_at)

    def test_takes_context(self):
        result = test_tasks.get_task_id.enqueue()
        checked = test_tasks.test_context.enqueue(1)
        async_result = test_tasks.async_with_context.enqueue("x")
        drain_until_finished(result, checked, async_result)
        self.assertEqual(result.return_value, result.id)
        self.assertEqual(checked.status, TaskResultStatus.SUCCESSFUL)
        self.assertEqual(
            async_result.return_value, {"value": "x", "attempt": 1, "id": async_result.id}
        )

    def test_priorities_run_higher_first(self):
        order = []

        def started(sender, task_result, **kwargs):
            order.append(task_result.kwargs["n"])

        low = test_tasks.echo.using(priority=-50).enqueue(n="low")
        default = test_tasks.echo.enqueue(n="default")
        high = test_tasks.echo.using(priority=50).enqueue(n="high")
        task_started.connect(started, dispatch_uid="order")
        try:
            drain_until_finished(low, default, high)
        finally:
            task_started.disconnect(dispatch_uid="order")
        self.assertEqual(order, ["high", "default", "low"])

    def test_a_deferred_task_waits_for_run_after(self):
        later = test_tasks.echo.using(run_after=timezone.now() + timedelta(hours=1)).enqueue()
        now = test_tasks.echo.enqueue()
        drain_until_finished(now)
        later.refresh()
        self.assertEqual(later.status, TaskResultStatus.READY)
        self.assertIsNone(later.started_at)

    def test_commit_keeps_the_job_and_rollback_drops_it(self):
        with transaction.atomic():
            kept = test_tasks.noop_task.enqueue()
        try:
            with transaction.atomic():
                dropped = test_tasks.noop_task.enqueue()
                raise RuntimeError("rolled back")
        except RuntimeError:
            pass
        drain_until_finished(kept)
        with self.assertRaises(TaskResultDoesNotExist):
            test_tasks.noop_task.get_result(dropped.id)


class FlushTests(TransactionTestCase):
    """Django's flush after each TransactionTestCase empties cronbase's tables too (tests run in
    name order: the first leaves a job and a schedule, the second finds none)."""

    def test_1_leaves_a_job_behind(self):
        test_tasks.noop_task.using(run_after=timezone.now() + timedelta(days=1)).enqueue()
        app.queues.pause("default", actor="test")  # a queue row and an audit row
        self.assertEqual(len(cronbase.testing.enqueued(app)), 1)

    def test_2_finds_none(self):
        self.assertEqual(len(cronbase.testing.enqueued(app, status="any")), 0)
        self.assertEqual(app.audit.list(), [])


@override_settings(
    TASKS={
        "default": {
            "BACKEND": "cronbase.contrib.django.tasks.CronbaseBackend",
            "OPTIONS": {"max_attmpts": 3},
        }
    }
)
class OptionsTests(SimpleTestCase):
    def test_an_unknown_option_is_refused_with_the_known_ones(self):
        from django.core.exceptions import ImproperlyConfigured

        with self.assertRaisesMessage(
            ImproperlyConfigured,
            "TASKS['default']['OPTIONS']: unknown option 'max_attmpts'; known: max_attempts,",
        ):
            task_backends["default"]
