"""``cronbase effects list|show|forget``: the ledger of side effects, for operators."""

from __future__ import annotations

import json

import click
from rich.table import Table
from rich.text import Text

from ..effects import STATUSES, EffectRecord
from .common import INT8_MAX, Settings, cli_actor, console, listed, payload_text, when
from .main import cli

STYLES = {"processing": "bold yellow", "done": "green", "failed": "red"}


def effects_table(found: list[EffectRecord]) -> Table:
    table = Table()
    for column in ("key", "status", "job", "started", "finished", "result / error"):
        table.add_column(column, overflow="fold", no_wrap=column in ("status", "started"))
    for e in found:
        job = f"{e.job_id} #{e.attempt}" if e.job_id else ""
        detail = Text(e.error or "", style="red") if e.error else payload_text(e.result or {})
        table.add_row(
            Text(e.key),
            Text(e.status + (" (reconciled)" if e.reconciled else ""), style=STYLES[e.status]),
            job,
            when(e.started_at),
            when(e.finished_at),
            detail,
        )
    return table


@cli.group()
def effects() -> None:
    """List, inspect and forget recorded side effects."""


@effects.command("list")
@click.option("--status", type=click.Choice(STATUSES))
@click.option("--limit", type=click.IntRange(min=1, max=INT8_MAX), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def list_effects(settings: Settings, status: str | None, limit: int, as_json: bool) -> None:
    """Effects, most recently changed first."""
    found = settings.app().effects.list(status=status, limit=limit)  # type: ignore[arg-type]
    out = listed(settings, found, as_json, "no effects")
    if out is not None and found:
        out.print(effects_table(found))


@effects.command("show")
@click.argument("key")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_obj
def show_effect(settings: Settings, key: str, as_json: bool) -> None:
    """One effect: who performed it, when, and what it recorded."""
    effect = settings.app().effects.get(key)
    if as_json:
        click.echo(json.dumps(effect.to_json(), indent=2))
        return
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for name, value in effect.to_json().items():
        if value not in (None, "", 0, False):
            table.add_row(name, Text(json.dumps(value) if isinstance(value, dict) else str(value)))
    console(settings.width).print(table)


@effects.command("forget")
@click.argument("key")
@click.pass_obj
def forget_effect(settings: Settings, key: str) -> None:
    """Delete an effect's record so that it can happen again."""
    forgotten = settings.app().effects.forget(key, actor=cli_actor())
    click.echo(f"effect {key!r} forgotten (it was {forgotten.status}); it can happen again")
