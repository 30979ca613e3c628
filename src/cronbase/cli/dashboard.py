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
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    metavar="NAME",
    help="A host name or address the dashboard is served as, beyond localhost, loopback "
    "addresses and --host (repeatable): any other Host header is refused (DNS rebinding).",
)
@click.option(
    "--trusted-proxy",
    "trusted_proxies",
    multiple=True,
    metavar="ADDRESS",
    help="A proxy (address or network, repeatable) whose X-Forwarded-For and X-Forwarded-Proto "
    "are believed; needs credentials. No other's are.",
)
@click.option(
    "--certfile",
    type=click.Path(dir_okay=False),
    help="Serve HTTPS with this certificate (PEM; with its chain).",
)
@click.option(
    "--keyfile",
    type=click.Path(dir_okay=False),
    help="The certificate's private key (PEM), unless --certfile holds it.",
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
    allowed_hosts: tuple[str, ...],
    trusted_proxies: tuple[str, ...],
    certfile: str | None,
    keyfile: str | None,
    long_running_after: timedelta,
) -> None:
    """Serve the web dashboard: queues, jobs, schedules, effects, actions, audit log.

    Without credentials it binds loopback only; any other address, and any --trusted-proxy,
    needs a user and password or a token, or the command refuses to start. It answers only the
    hosts it is served as, and a POST only from its own pages.
    """
    try:
        from ..dashboard.auth import Credentials
        from ..dashboard.server import check_bind, check_proxies, check_tls, serve, served_as
    except ImportError as exc:
        raise ConfigurationError(
            f"the dashboard needs the dashboard extra ({exc.name} is missing): "
            "pip install starlette jinja2 uvicorn python-multipart (cronbase's dashboard extra: "
            "pip install -e '.[dashboard]' in its clone)"
        ) from None
    given = [v or None for v in (user, password, token)]
    auth = None if given == [None, None, None] else Credentials(*given)
    # Before anything starts, the embedded database included.
    check_bind(host, auth)
    check_proxies(trusted_proxies, auth)
    check_tls(certfile, keyfile)
    served_as(host, allowed_hosts)
    serve(
        settings.app(),
        host=host,
        port=port,
        auth=auth,
        long_running_after=long_running_after,
        allowed_hosts=allowed_hosts,
        trusted_proxies=trusted_proxies,
        certfile=certfile,
        keyfile=keyfile,
    )
