"""``cronbase dashboard``: the web dashboard for operators (needs the ``dashboard`` extra)."""

from __future__ import annotations

from datetime import timedelta

import click

from ..errors import ConfigurationError
from .common import Duration, Settings, app_option
from .main import cli


@cli.command()
@app_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", type=click.IntRange(min=1, max=65535), default=8080, show_default=True)
@click.option(
    "--user",
    envvar="CRONBASE_DASHBOARD_USER",
    help="Basic-auth user (env CRONBASE_DASHBOARD_USER); needs a password.",
)
@click.option(
    "--password",
    envvar="CRONBASE_DASHBOARD_PASSWORD",
    help="Basic-auth password; prefer the env CRONBASE_DASHBOARD_PASSWORD (argv is visible).",
)
@click.option(
    "--token",
    envvar="CRONBASE_DASHBOARD_TOKEN",
    help="Bearer token, also accepted as the basic-auth password; prefer the env "
    "CRONBASE_DASHBOARD_TOKEN.",
)
@click.option(
    "--long-running-after",
    type=Duration("minutes", positive=True),
    default=10.0,
    show_default=True,
    metavar="MINUTES",
    help='Threshold of the "running longer than expected" page.',
)
@click.pass_obj
def dashboard(
    settings: Settings,
    host: str,
    port: int,
    user: str | None,
    password: str | None,
    token: str | None,
    long_running_after: timedelta,
) -> None:
    """Serve the web dashboard: queues, jobs, schedules, effects, actions, audit log.

    Without credentials it binds loopback only; any other address needs a user and password
    or a token, or the command refuses to start.
    """
    try:
        from ..dashboard.auth import Credentials
        from ..dashboard.server import check_bind, serve
    except ImportError as exc:
        raise ConfigurationError(
            f"the dashboard needs the dashboard extra ({exc.name} is missing): "
            "pip install 'cronbase[dashboard]'"
        ) from None
    given = [v or None for v in (user, password, token)]
    auth = None if given == [None, None, None] else Credentials(*given)
    check_bind(host, auth)  # before anything starts, the embedded database included
    serve(
        settings.app(),
        host=host,
        port=port,
        auth=auth,
        long_running_after=long_running_after,
    )
