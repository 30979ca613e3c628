"""The shop's tables (made by makemigrations; ClassVar annotations added for ruff)."""

from typing import ClassVar

from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies: ClassVar[list[tuple[str, str]]] = []

    operations: ClassVar[list[migrations.operations.base.Operation]] = [
        migrations.CreateModel(
            name="Order",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("sku", models.CharField(max_length=40)),
                ("quantity", models.PositiveIntegerField()),
                ("status", models.CharField(default="placed", max_length=20)),
                ("confirmed_at", models.DateTimeField(null=True)),
            ],
        ),
        migrations.CreateModel(
            name="Summary",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("taken_at", models.DateTimeField()),
                ("confirmed_orders", models.PositiveIntegerField()),
            ],
        ),
    ]
