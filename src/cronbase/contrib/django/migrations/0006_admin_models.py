"""cronbase's tables as models for the admin: declared only (managed = False, no SQL runs; cronbase's
own migrations own the tables). Made by makemigrations; ClassVar annotations added for ruff."""

from typing import ClassVar

from django.db import migrations, models

import cronbase.contrib.django.models


class Migration(migrations.Migration):  # type: ignore[misc]  # django has no type hints here
    dependencies: ClassVar[list[tuple[str, str]]] = [
        ("cronbase", "0005_overruns"),
    ]

    operations: ClassVar[list[migrations.operations.base.Operation]] = [
        migrations.CreateModel(
            name="AuditEntry",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("at", models.DateTimeField()),
                ("actor", models.TextField()),
                ("action", models.TextField()),
                ("target", models.TextField()),
                ("detail", models.JSONField()),
            ],
            options={
                "verbose_name": "audit entry",
                "verbose_name_plural": "audit log",
                "db_table": '"cronbase"."audit_log"',
                "ordering": ["-id"],
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("task", models.TextField()),
                ("queue", models.TextField()),
                ("payload", models.JSONField()),
                (
                    "status",
                    models.TextField(
                        choices=[
                            ("pending", "pending"),
                            ("queued", "queued"),
                            ("running", "running"),
                            ("succeeded", "succeeded"),
                            ("failed", "failed"),
                            ("dead", "dead"),
                            ("cancelled", "cancelled"),
                        ]
                    ),
                ),
                ("priority", models.SmallIntegerField(help_text="Lower runs first.")),
                ("run_at", models.DateTimeField(verbose_name="run at")),
                ("attempts", models.IntegerField()),
                ("max_attempts", models.IntegerField(verbose_name="max attempts")),
                ("lease", models.DurationField()),
                ("locked_by", models.TextField(null=True, verbose_name="worker")),
                ("locked_until", models.DateTimeField(null=True, verbose_name="lease until")),
                ("idempotency_key", models.TextField(null=True, verbose_name="idempotency key")),
                ("dedupe_key", models.TextField(null=True, verbose_name="dedupe key")),
                ("progress", models.FloatField(null=True)),
                ("stage", models.TextField(null=True)),
                ("last_error", models.TextField(null=True, verbose_name="last error")),
                ("error_type", models.TextField(null=True, verbose_name="error type")),
                ("started_at", models.DateTimeField(null=True, verbose_name="started")),
                ("created_at", models.DateTimeField(verbose_name="enqueued")),
                ("updated_at", models.DateTimeField(verbose_name="updated")),
                ("finished_at", models.DateTimeField(null=True, verbose_name="finished")),
                ("result", models.JSONField(null=True)),
                ("snoozes", models.IntegerField()),
                ("workflow_id", models.BigIntegerField(null=True, verbose_name="workflow")),
            ],
            options={
                "db_table": '"cronbase"."jobs"',
                "ordering": ["-id"],
                "permissions": [("operate_job", "Can retry, cancel and requeue jobs")],
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="JobAttempt",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("attempt", models.IntegerField()),
                ("worker", models.TextField(null=True)),
                ("started_at", models.DateTimeField(null=True, verbose_name="started")),
                ("finished_at", models.DateTimeField(verbose_name="finished")),
                ("outcome", models.TextField()),
                ("error", models.TextField(null=True)),
                ("error_type", models.TextField(null=True, verbose_name="error type")),
                ("traceback", models.TextField(null=True)),
            ],
            options={
                "verbose_name": "attempt",
                "db_table": '"cronbase"."job_attempts"',
                "ordering": ["attempt", "finished_at"],
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Schedule",
            fields=[
                ("key", models.TextField(primary_key=True, serialize=False)),
                ("task", models.TextField()),
                ("payload", models.JSONField()),
                ("queue", models.TextField(null=True)),
                ("cron", models.TextField()),
                ("tz", models.TextField(verbose_name="time zone")),
                ("catch_up", models.TextField(verbose_name="catch-up")),
                ("max_catch_up", models.IntegerField(verbose_name="max catch-up")),
                ("is_paused", models.BooleanField(verbose_name="paused")),
                ("source", models.TextField()),
                ("last_fired_at", models.DateTimeField(null=True, verbose_name="last fired")),
                ("next_fire_at", models.DateTimeField(verbose_name="next fire")),
                ("created_at", models.DateTimeField(verbose_name="created")),
                ("updated_at", models.DateTimeField(verbose_name="updated")),
            ],
            options={
                "db_table": '"cronbase"."schedules"',
                "ordering": ["key"],
                "managed": False,
            },
        ),
        migrations.CreateModel(
            name="Worker",
            fields=[
                ("id", models.TextField(primary_key=True, serialize=False)),
                ("hostname", models.TextField()),
                ("pid", models.IntegerField()),
                (
                    "queues",
                    cronbase.contrib.django.models.TextArray(null=True),
                ),
                (
                    "tasks",
                    cronbase.contrib.django.models.TextArray(null=True),
                ),
                ("concurrency", models.IntegerField()),
                ("started_at", models.DateTimeField(verbose_name="started")),
                ("last_seen_at", models.DateTimeField(verbose_name="last heartbeat")),
            ],
            options={
                "db_table": '"cronbase"."workers"',
                "ordering": ["-last_seen_at"],
                "managed": False,
            },
        ),
    ]
