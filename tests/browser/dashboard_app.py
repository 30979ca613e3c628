"""The app of the dashboard tests: ``cronbase --app tests.browser.dashboard_app:app dashboard``.

The test process builds the same tasks on its own URL with :func:`make_app` and runs burst
workers in threads; the handlers wait on these events, which the tests set.
"""

from __future__ import annotations

import threading

import cronbase

ALLOW_FLAKY = threading.Event()  # until set, ``flaky`` raises
RELEASE_HOLD = threading.Event()  # ``hold`` runs until set


def make_app(database_url: str | None = None) -> cronbase.App:
    app = cronbase.App(database_url=database_url)

    @app.task(queue="emails")
    def send_email(to: str) -> None: ...

    def call_service(n: int) -> None:
        raise RuntimeError(f"payment service refused request {n}: 503 Service Unavailable")

    @app.task(max_attempts=1)
    def flaky(n: int) -> None:
        if not ALLOW_FLAKY.is_set():
            call_service(n)

    @app.task(queue="reports")
    def build_report(team: str) -> None:
        cronbase.current_job().set_progress(100, stage="done")

    @app.task(queue="slow")
    def hold(n: int) -> None:
        RELEASE_HOLD.wait(60)

    return app


app = make_app()  # its database from CRONBASE_DATABASE_URL, which the tests set
