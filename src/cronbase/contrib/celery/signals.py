"""Celery's signals have no counterpart here: importing this module says what to use instead."""

raise ImportError(
    "cronbase.contrib.celery has no signals (task_prerun, task_postrun, task_failure...): use "
    "the App's hooks, app.cronbase_app.on_job_start, .on_job_end and .middleware "
    "(docs/guides/hooks.md)"
)
