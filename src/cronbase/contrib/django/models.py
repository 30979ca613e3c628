"""cronbase's tables as Django sees them, for the admin (admin.py): unmanaged models, read-only.

cronbase's own migrations create and change these tables; Django never does (``managed = False``,
and the migration that declares them runs no SQL). Their schema is settings.CRONBASE's: the tables
are named here for the default one and renamed in ``AppConfig.ready()`` (``use_schema``). They
also give Django's ``post_migrate`` an app with models, which the schema's creation without
migrations relies on (schema.apply_schema_without_migrations).
"""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import models

from ...job import JobStatus
from ...payload.stored import read_stored

STATUS_CHOICES = [(status.value, status.value) for status in JobStatus]


class StoredJSON(models.JSONField):  # type: ignore[misc]
    """A jsonb column read by cronbase's rule (payload/stored.py): a value nested deeper than
    MAX_JSON_DEPTH, or one Python's json cannot read, is an UndecodableJSON. Django's json.loads
    raised a RecursionError for a row other SQL wrote 10,000 deep, and the whole list failed."""

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> Any:
        if isinstance(value, str):  # Django's psycopg backend reads jsonb as text
            return read_stored(value)
        return super().from_db_value(value, expression, connection)

    def deconstruct(self) -> tuple[Any, str, Any, Any]:
        name, _, args, kwargs = super().deconstruct()
        # As Django's own field to migrations: the same jsonb column, nothing to migrate.
        return name, "django.db.models.JSONField", args, kwargs


class TextArray(models.Field):  # type: ignore[misc]
    """A ``text[]`` column, read as a list (psycopg decodes it): ArrayField without
    ``django.contrib.postgres`` in INSTALLED_APPS, which these read-only columns do not need."""

    def db_type(self, connection: Any) -> str:
        return "text[]"


class CronbaseTable(models.Model):  # type: ignore[misc]  # django has no type hints here
    """One of cronbase's tables: read here, never created or changed (``managed = False``); a row
    is shown as its model's name and its key unless the model says better."""

    class Meta:
        abstract = True
        managed = False

    def __str__(self) -> str:
        return f"{self._meta.verbose_name} {self.pk}"


class Job(CronbaseTable):
    id = models.BigAutoField(primary_key=True)
    task = models.TextField()
    queue = models.TextField()
    payload = StoredJSON()
    status = models.TextField(choices=STATUS_CHOICES)
    priority = models.SmallIntegerField(help_text="Lower runs first.")
    run_at = models.DateTimeField("run at")
    attempts = models.IntegerField()
    max_attempts = models.IntegerField("max attempts")
    lease = models.DurationField()
    locked_by = models.TextField("worker", null=True)
    locked_until = models.DateTimeField("lease until", null=True)
    idempotency_key = models.TextField("idempotency key", null=True)
    dedupe_key = models.TextField("dedupe key", null=True)
    progress = models.FloatField(null=True)
    stage = models.TextField(null=True)
    last_error = models.TextField("last error", null=True)
    error_type = models.TextField("error type", null=True)
    started_at = models.DateTimeField("started", null=True)
    created_at = models.DateTimeField("enqueued")
    updated_at = models.DateTimeField("updated")
    finished_at = models.DateTimeField("finished", null=True)
    result = StoredJSON(null=True)
    snoozes = models.IntegerField()
    workflow_id = models.BigIntegerField("workflow", null=True)

    class Meta(CronbaseTable.Meta):
        # Live and finished jobs (a view over jobs and jobs_history, migration 0015).
        db_table = '"cronbase"."jobs_all"'
        ordering: ClassVar[list[str]] = ["-id"]
        permissions: ClassVar[list[tuple[str, str]]] = [
            ("operate_job", "Can retry, cancel and requeue jobs"),
        ]

    def __str__(self) -> str:
        return f"job {self.id} {self.task}"


class JobAttempt(CronbaseTable):
    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(
        Job, on_delete=models.DO_NOTHING, db_constraint=False, related_name="attempt_rows"
    )
    attempt = models.IntegerField()
    worker = models.TextField(null=True)
    started_at = models.DateTimeField("started", null=True)
    finished_at = models.DateTimeField("finished")
    outcome = models.TextField()
    error = models.TextField(null=True)
    error_type = models.TextField("error type", null=True)
    traceback = models.TextField(null=True)

    class Meta(CronbaseTable.Meta):
        db_table = '"cronbase"."job_attempts_all"'
        ordering: ClassVar[list[str]] = ["attempt", "finished_at"]
        verbose_name = "attempt"

    def __str__(self) -> str:
        return f"attempt {self.attempt} of job {self.job_id}"


class Schedule(CronbaseTable):
    key = models.TextField(primary_key=True)
    task = models.TextField()
    payload = StoredJSON()
    queue = models.TextField(null=True)
    cron = models.TextField()
    tz = models.TextField("time zone")
    catch_up = models.TextField("catch-up")
    max_catch_up = models.IntegerField("max catch-up")
    is_paused = models.BooleanField("paused")
    source = models.TextField()
    last_fired_at = models.DateTimeField("last fired", null=True)
    next_fire_at = models.DateTimeField("next fire")
    created_at = models.DateTimeField("created")
    updated_at = models.DateTimeField("updated")

    class Meta(CronbaseTable.Meta):
        db_table = '"cronbase"."schedules"'
        ordering: ClassVar[list[str]] = ["key"]


class Worker(CronbaseTable):
    id = models.TextField(primary_key=True)
    hostname = models.TextField()
    pid = models.IntegerField()
    queues = TextArray(null=True)
    tasks = TextArray(null=True)
    concurrency = models.IntegerField()
    started_at = models.DateTimeField("started")
    last_seen_at = models.DateTimeField("last heartbeat")

    class Meta(CronbaseTable.Meta):
        db_table = '"cronbase"."workers"'
        ordering: ClassVar[list[str]] = ["-last_seen_at"]


class AuditEntry(CronbaseTable):
    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField()
    actor = models.TextField()
    action = models.TextField()
    target = models.TextField()
    detail = StoredJSON()

    class Meta(CronbaseTable.Meta):
        db_table = '"cronbase"."audit_log"'
        ordering: ClassVar[list[str]] = ["-id"]
        verbose_name = "audit entry"
        verbose_name_plural = "audit log"

    def __str__(self) -> str:
        return f"{self.action} {self.target} by {self.actor}"


MODELS: tuple[Any, ...] = (Job, JobAttempt, Schedule, Worker, AuditEntry)


def use_schema(schema: str) -> None:
    """Point the models at cronbase's tables in ``schema`` (settings.CRONBASE's, or the App's)."""
    for model in MODELS:
        table = model._meta.db_table.split(".", 1)[1]
        model._meta.db_table = f'"{schema}".{table}'
