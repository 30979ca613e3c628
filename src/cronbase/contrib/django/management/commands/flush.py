"""``manage.py flush``, which also empties cronbase's tables: Django's own flush (that
``TransactionTestCase`` runs after each test) knows only the tables of Django's models, so a job a
test left would still be there for the next one. An app's command of the same name takes the place
of Django's: this one runs Django's, then empties cronbase's tables in the same database."""

from __future__ import annotations

from typing import Any

from django.apps import apps
from django.core.management.commands import flush

from ...flush import empty_cronbase_tables


class Command(flush.Command):  # type: ignore[misc]  # django has no type hints here
    help = flush.Command.help + " cronbase's jobs, schedules, effects and audit log go too."

    def handle(self, **options: Any) -> None:
        if options["interactive"]:
            # Django's question, answered here, so that a "no" leaves cronbase's tables too.
            from django.db import connections

            name = connections[options["database"]].settings_dict["NAME"]
            confirm = input(
                "You have requested a flush of the database.\n"
                f'This will IRREVERSIBLY DESTROY all data currently in the "{name}" database,\n'
                "cronbase's jobs, schedules and audit log included, and return each table to an "
                "empty state.\nAre you sure you want to do this?\n\n"
                "    Type 'yes' to continue, or 'no' to cancel: "
            )
            if confirm != "yes":
                self.stdout.write("Flush cancelled.")
                return
        super().handle(**{**options, "interactive": False})
        # Only when cronbase's app takes part: a TransactionTestCase's available_apps may leave
        # it out, and Django then leaves its tables as they are.
        if apps.is_installed("cronbase.contrib.django"):
            empty_cronbase_tables(
                options["database"], reset_sequences=options.get("reset_sequences", True)
            )
