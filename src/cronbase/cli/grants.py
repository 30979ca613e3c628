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
@click.pass_obj
def grants(settings: Settings, role: str, is_applied: bool) -> None:
    """Print the GRANT statements ROLE needs on the schema, one per line (for psql).

    They let ROLE run workers, enqueue, tick schedules, prune, and serve the dashboard, and no
    more: no CREATE, no TRUNCATE, no DROP, so it cannot migrate. Migrate as the owner, then run
    this as the owner with --apply; again after each upgrade's migrations (it is idempotent).
    """
    app = settings.app()
    if not is_applied:
        for line in app.grants.statements(role):
            click.echo(line)
        return
    applied = app.grants.apply(role, actor=cli_actor())
    for line in applied:
        click.echo(f"granted: {line}")
    click.echo(
        f"role {role!r} may now run workers, enqueue and serve the dashboard on schema "
        f"{app.schema!r} of {pool.masked(app.database_url)}, and cannot migrate"
    )
