"""The Django app (``"cronbase.contrib.django"`` in ``INSTALLED_APPS``): builds the App from
``settings.CRONBASE``, imports each installed app's ``tasks`` module, and joins the App to Django's
transactions and connection handling."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules

from .config import configured
from .connections import AtomicConnection, fresh_django_connections


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
        app.hooks.job_middleware.append(fresh_django_connections)
