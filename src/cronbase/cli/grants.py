"""``cronbase grants ROLE [--apply]``: the grants of the application role in a two-role setup."""

from __future__ import annotations

import click

from ..db import pool
from .common import Settings, cli_actor
from .main import cli


@cli.command()
@click.argument("role")
@click.option(
    "--apply",
    "is_applied",
    is_flag=True,
    help="Run the statements (the database URL must be the schema owner's) instead of printing.",
)
@click.option(
    "--interface",
    is_flag=True,
    help="Only what another language's role needs to call the SQL interface (cronbase.defer, "
    "cronbase.claim...): "
    "USAGE on the schema and EXECUTE on its functions, no right on any table.",
)
@click.pass_obj
def grants(settings: Settings, role: str, is_applied: bool, interface: bool) -> None:
    """Print the GRANT statements ROLE needs on the schema, one per line (for psql).

    They let ROLE run workers, enqueue, tick schedules, prune, and serve the dashboard, and no
    more: no CREATE, no TRUNCATE, no DROP, so it cannot migrate. Migrate as the owner, then run
    this as the owner with --apply; again after each upgrade's migrations (it is idempotent).
    With --interface: only the SQL interface, for a service in another language.
    """
    app = settings.app()
    if not is_applied:
        for line in app.grants.statements(role, interface=interface):
            click.echo(line)
        return
    applied = app.grants.apply(role, interface=interface, actor=cli_actor())
    for line in applied:
        click.echo(f"granted: {line}")
    may = (
        "defer jobs and work queues through the SQL interface (cronbase.defer(), cronbase.claim())"
        if interface
        else "run workers, enqueue and serve the dashboard"
    )
    click.echo(
        f"role {role!r} may now {may} on schema {app.schema!r} of "
        f"{pool.masked(app.database_url)}, and cannot migrate"
    )
