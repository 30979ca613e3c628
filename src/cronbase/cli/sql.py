"""``cronbase sql``: the statements cronbase sends, as PostgreSQL receives them, for the
configured schema (operations/statements.py)."""

from __future__ import annotations

import click

from ..errors import InvalidValueError
from ..operations.statements import rendered
from .common import Settings
from .main import cli


@cli.command("sql")
@click.argument("names", nargs=-1)
@click.option("--list", "only_names", is_flag=True, help="Print the statements' names only.")
@click.pass_obj
def sql_command(settings: Settings, names: tuple[str, ...], only_names: bool) -> None:
    """Print the final text of cronbase's statements (all, or NAMES) for the schema: fragments
    put in place, variants rendered. Reads no database."""
    try:
        found = rendered(settings.schema or "cronbase", list(names) or None)
    except KeyError as exc:
        raise InvalidValueError(str(exc.args[0])) from None
    for name, text in found.items():
        click.echo(name if only_names else f"-- name: {name}\n{text};\n")
