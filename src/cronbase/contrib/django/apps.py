"""The Django app (``"cronbase.contrib.django"`` in ``INSTALLED_APPS``): builds the App from
``settings.CRONBASE``, imports each installed app's ``tasks`` module, and joins the App to Django's
transactions and connection handling, and to the test database under Django's test runner."""

from __future__ import annotations

from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.db.models.signals import post_migrate
from django.utils.module_loading import autodiscover_modules

from .config import configured
from .connections import AtomicConnection, fresh_django_connections
from .database import DjangoDatabase
from .follow import DatabaseFollower
from .schema import apply_schema_without_migrations


class CronbaseConfig(AppConfig):  # type: ignore[misc]  # django has no type hints here
    name = "cronbase.contrib.django"
    label = "cronbase"
    verbose_name = "cronbase"

    def ready(self) -> None:
        config, app = configured()
        if config.tasks_module:
            # As Celery does: every installed app's tasks module registers its tasks, so the
            # worker (manage.py cronbase worker) knows them all.
            autodiscover_modules(config.tasks_module)
        if config.alias is not None:
            source = AtomicConnection(config.alias, app, check=config.app_path is not None)
            app.hooks.connection_sources.append(source)
            if not app.db.is_embedded and not isinstance(app.db, DjangoDatabase):
                # Reads and admin calls inside atomic() see that transaction, as defers join it.
                app._swap_database(DjangoDatabase.beside(app.db, source)).close()
            # The test runner points the alias at its test database after this: the App
            # follows when Django connects there. One receiver, however often ready() runs.
            connection_created.connect(
                DatabaseFollower(config, app), weak=False, dispatch_uid="cronbase-follow"
            )
        app.hooks.job_middleware.append(fresh_django_connections)
        from .models import use_schema  # models load after the app configs

        use_schema(app.schema)  # the admin's models, on the App's tables
        post_migrate.connect(apply_schema_without_migrations, sender=self)
