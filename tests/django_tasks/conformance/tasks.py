"""The tasks of Django's own backend tests (tests/tasks/tasks.py in Django's repository), and a
few of cronbase's: retried ones, and one per priority."""

try:
    from django.tasks import TaskContext, task
except ImportError:  # Django 4.2 to 5.2: the backport
    from django_tasks import TaskContext, task  # type: ignore[no-redef]


@task()
def noop_task(*args, **kwargs):
    return None


@task
def noop_task_from_bare_decorator(*args, **kwargs):
    return None


@task()
async def noop_task_async(*args, **kwargs):
    return None


@task()
def calculate_meaning_of_life():
    return 42


@task()
def failing_task_value_error():
    raise ValueError("This Task failed due to ValueError")


@task()
def failing_task_system_exit():
    raise SystemExit("This Task failed due to SystemExit")


@task()
def complex_exception():
    raise ValueError(ValueError("This task failed"))


@task()
def complex_return_value():
    # A value that is not JSON: the task fails with TypeError, as on Django's backends.
    return {"set": {1, 2}}


@task(takes_context=True)
def get_task_id(context):
    return context.task_result.id


@task(takes_context=True)
def test_context(context, attempt):
    assert isinstance(context, TaskContext)
    assert context.attempt == attempt


@task(takes_context=True)
def flaky(context, failures):
    """Fails its first ``failures`` attempts; returns what its context said at the end."""
    if context.attempt <= failures:
        raise ConnectionError(f"attempt {context.attempt} failed")
    return {
        "attempt": context.attempt,
        "id": context.task_result.id,
        "worker_ids": len(context.task_result.worker_ids),
        "errors": len(context.task_result.errors),
    }


@task(takes_context=True)
async def async_with_context(context, value):
    return {"value": value, "attempt": context.attempt, "id": context.task_result.id}


@task()
def echo(*args, **kwargs):
    return {"args": list(args), "kwargs": kwargs}
